// Command coordinator is one member of tmmu's raft-replicated coordinator
// cluster. It holds the jobs, computes every rank's expected plan hash,
// commits agreement outcomes from the workers' NATS reports while it leads,
// and serves the HTTP API (jobs, status, /livez, /readyz, /metrics).
//
//	coordinator --id c0 --raft-addr 10.0.0.1:7000 --http-addr 10.0.0.1:8080 \
//	    --data-dir /var/lib/tmmu --nats nats://10.0.0.9:4222 \
//	    --bootstrap --peers c0=10.0.0.1:7000=10.0.0.1:8080,c1=...,c2=...
//
// Every flag can come from the environment instead: TMMU_ID,
// TMMU_RAFT_ADDR, TMMU_HTTP_ADDR, TMMU_DATA_DIR, TMMU_NATS, TMMU_PEERS,
// TMMU_BOOTSTRAP, TMMU_FAST_FAILOVER, TMMU_API_TOKEN(_FILE),
// TMMU_NATS_USER, TMMU_NATS_PASSWORD(_FILE), TMMU_LOG_FORMAT, TMMU_ETCD.
// Secrets (the API token, the NATS password) come from the environment or
// files. "coordinator healthcheck URL" probes an endpoint and exits 0 on
// 200, for container healthchecks. A node joining an existing cluster
// starts without --bootstrap (with --peers listing the cluster, for
// redirects) and is added by an operator: tmmu voter add ID RAFT HTTP. On
// SIGTERM or SIGINT it hands leadership to another
// voter, then stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/coord"
	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/transport"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "healthcheck" {
		os.Exit(cli.Healthcheck(os.Args[2:]))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "coordinator:", err)
		os.Exit(1)
	}
}

// parsePeers reads id=raftaddr=httpaddr,...
func parsePeers(s string) ([]coord.Peer, error) {
	var out []coord.Peer
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		f := strings.Split(p, "=")
		if len(f) != 3 {
			return nil, fmt.Errorf("peer %q: want id=raft_host:port=http_host:port", p)
		}
		out = append(out, coord.Peer{ID: f[0], RaftAddr: f[1], HTTPAddr: f[2]})
	}
	return out, nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	id := fs.String("id", "", "this node's raft id (required)")
	raftAddr := fs.String("raft-addr", "127.0.0.1:7000", "raft TCP address, bound and advertised")
	httpAddr := fs.String("http-addr", "127.0.0.1:8080", "HTTP API address")
	dataDir := fs.String("data-dir", "tmmu-coordinator", "raft log, stable store and snapshots")
	natsURL := fs.String("nats", nats.DefaultURL, "NATS server URL (JetStream enabled)")
	etcd := fs.String("etcd", "", "etcd endpoints, comma-separated: lets the leader shrink elastic jobs whose ranks left (empty: no elastic shrinking)")
	peers := fs.String("peers", "", "the cluster's voters: id=raft_addr=http_addr,... (this node included)")
	bootstrap := fs.Bool("bootstrap", false, "bootstrap a new cluster of --peers when the data dir is empty (every initial voter gets the same --peers; a node joining later runs without --bootstrap and is added with tmmu voter add)")
	token := fs.String("api-token", "", "bearer token every mutating API call (job submit, replan, voter changes) must carry (empty: none)")
	tokenFile := fs.String("api-token-file", "", "read the API token from this file")
	natsAuth := cli.NATSFlags(fs)
	logFormat := fs.String("log-format", "text", "log format: text or json")
	fast := fs.Bool("fast-failover", false, "raft heartbeat and election timeouts of 300 ms instead of 1 s, for clusters on one LAN")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cli.ApplyEnv(fs); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log, err := cli.Logger(os.Stderr, *logFormat, level)
	if err != nil {
		return err
	}
	apiToken, err := cli.Secret(*token, *tokenFile)
	if err != nil {
		return fmt.Errorf("--api-token-file: %w", err)
	}
	natsOpts, err := natsAuth()
	if err != nil {
		return err
	}
	ps, err := parsePeers(*peers)
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		ps = []coord.Peer{{ID: *id, RaftAddr: *raftAddr, HTTPAddr: *httpAddr}}
	}
	node, err := coord.Open(coord.Config{ID: *id, RaftAddr: *raftAddr, HTTPAddr: *httpAddr, DataDir: *dataDir,
		Bootstrap: *bootstrap, Peers: ps, Fast: *fast, APIToken: apiToken, Logger: log})
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: *httpAddr, Handler: node.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()

	nc, err := nats.Connect(*natsURL, append(natsOpts, nats.MaxReconnects(-1), nats.Name("tmmu-coordinator-"+*id))...)
	if err != nil {
		node.Shutdown()
		return fmt.Errorf("nats %s: %w", *natsURL, err)
	}
	defer nc.Close()
	tr, err := transport.New(nc)
	if err != nil {
		node.Shutdown()
		return err
	}
	var rv *rendezvous.Client
	if *etcd != "" {
		ec, err := rendezvous.Dial(strings.Split(*etcd, ","))
		if err != nil {
			node.Shutdown()
			return fmt.Errorf("etcd %s: %w", *etcd, err)
		}
		defer ec.Close()
		rv = rendezvous.New(ec, "", 0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	agreeDone := make(chan struct{})
	go func() { node.RunAgreement(ctx, tr, rv); close(agreeDone) }()
	log.Info("coordinator started", "id", *id, "raft", *raftAddr, "http", *httpAddr, "peers", len(ps))

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("stopping: handing leadership over")
	stop()
	<-agreeDone
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	if serr := node.TransferAndShutdown(); serr != nil {
		log.Warn("shutdown", "err", serr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
