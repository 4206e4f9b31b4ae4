// Command coordinator is one member of tmmu's raft-replicated coordinator
// cluster. It holds the jobs, computes every rank's expected plan hash,
// commits agreement outcomes from the workers' NATS reports while it leads,
// commits checkpoints once every rank stored its shard, decides rollbacks
// when a rank restarts without its state, and serves the HTTP API (jobs,
// status, /livez, /readyz, /metrics).
//
//	coordinator --id c0 --raft-addr 10.0.0.1:7000 --http-addr 10.0.0.1:8080 \
//	    --data-dir /var/lib/tmmu --nats nats://10.0.0.9:4222 \
//	    --bootstrap --peers c0=10.0.0.1:7000=10.0.0.1:8080,c1=...,c2=...
//
// Every flag can come from the environment instead: TMMU_ID,
// TMMU_RAFT_ADDR, TMMU_HTTP_ADDR, TMMU_DATA_DIR, TMMU_NATS, TMMU_PEERS,
// TMMU_BOOTSTRAP, TMMU_FAST_FAILOVER, TMMU_API_TOKEN(_FILE),
// TMMU_NATS_USER, TMMU_NATS_PASSWORD(_FILE), TMMU_LOG_FORMAT, TMMU_ETCD,
// TMMU_SHRINK_AFTER, TMMU_CHECKPOINT_DIR.
// Secrets (the API token, the NATS password) come from the environment or
// files. "coordinator healthcheck URL" probes an endpoint and exits 0 on
// 200, for container healthchecks. A node joining an existing cluster
// starts without --bootstrap (with --peers listing the cluster, for
// redirects) and is added by an operator: tmmu voter add ID RAFT HTTP. On
// SIGTERM or SIGINT it hands leadership to another
// voter, then stops.
package main

import (
	"os"

	"github.com/tmmu/tmmu/internal/coordd"
)

func main() { os.Exit(coordd.Main(os.Args[1:], os.Stderr)) }
