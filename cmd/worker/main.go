// Command worker is one rank of a tmmu job. It claims a stable rank in etcd
// for its identity, fetches the job from the coordinators, plans its rank
// view, proves its plan hash over NATS, waits until the epoch is committed
// as agreed and runs the steps, each behind a go/no-go barrier (see package
// worker). It checkpoints its shard of the model state at the job's
// checkpoint steps and, restarted, restores it: the job rolls back to its
// last checkpoint and every rank continues from there, bit for bit.
//
//	worker --identity node3-gpu0 --job train \
//	    --coordinators http://10.0.0.1:8080,http://10.0.0.2:8080 \
//	    --nats nats://10.0.0.9:4222 --etcd http://10.0.0.9:2379
//
// Every flag can come from the environment instead (TMMU_IDENTITY,
// TMMU_JOB, TMMU_COORDINATORS, TMMU_NATS, TMMU_ETCD, TMMU_LEASE_TTL,
// TMMU_STANDBY, TMMU_EXECUTOR, TMMU_CHECKPOINT_DIR, TMMU_POLL,
// TMMU_NATS_USER, TMMU_NATS_PASSWORD(_FILE), TMMU_HTTP_ADDR,
// TMMU_LOG_FORMAT). With --http-addr it serves /livez, /readyz (ready once
// it runs steps) and Prometheus /metrics; "worker healthcheck URL" probes
// an endpoint, for container healthchecks. SIGTERM or SIGINT drains it:
// the running step finishes, the rank is released (shown as missing, kept
// for this identity).
//
// It rides through NATS, etcd and coordinator restarts: it waits and
// retries, and ends only when its job is done, failed, cancelled or
// deleted (or on a signal).
//
// Executors (worker.Executors): "webgpu" and "cpu" train the rank's view
// in its planned arenas (package engine), data-parallel ranks exchanging
// gradients and parameters over NATS; "auto" (the default) is webgpu when
// the machine has an adapter, else cpu, and the arena executor for graphs
// the engine does not run (bf16, tensor or pipeline parallel), each
// fallback logged; "arena" moves each step's memory traffic at the
// planned addresses without arithmetic; "plan-only" runs no work.
package main

import (
	"os"

	"github.com/tmmu/tmmu/internal/workerd"
)

func main() { os.Exit(workerd.Main(os.Args[1:], os.Stderr)) }
