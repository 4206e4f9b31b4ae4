// Package coordd is the coordinator daemon (cmd/coordinator): flags and
// environment, the raft node and its HTTP API, NATS, etcd and the
// checkpoint store for the leader's loops, and signals. Main is
// cmd/coordinator's main; tests run it in processes of their own.
package coordd

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/transport"
	"github.com/tmmu/tmmu/trust"
)

// Main runs the coordinator daemon with args (without the program name)
// and returns its exit status. "healthcheck URL" probes an endpoint.
func Main(args []string, stderr io.Writer) int { return cli.Main("coordinator", args, stderr, run) }

// parsePeers reads id=raftaddr=httpaddr,...
func parsePeers(s string) ([]api.Peer, error) {
	var out []api.Peer
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		f := strings.Split(p, "=")
		if len(f) != 3 {
			return nil, fmt.Errorf("peer %q: want id=raft_host:port=http_host:port", p)
		}
		out = append(out, api.Peer{ID: f[0], RaftAddr: f[1], HTTPAddr: f[2]})
	}
	return out, nil
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	id := fs.String("id", "", "this node's raft id (required)")
	raftAddr := fs.String("raft-addr", "127.0.0.1:7000", "raft TCP address, bound and advertised")
	httpAddr := fs.String("http-addr", "127.0.0.1:8080", "HTTP API address")
	dataDir := fs.String("data-dir", "tmmu-coordinator", "raft log, stable store and snapshots")
	natsURL := fs.String("nats", nats.DefaultURL, "NATS server URL (JetStream enabled)")
	etcd := fs.String("etcd", "", "etcd endpoints, comma-separated: lets the leader see which ranks hold their lease (tmmu status) and shrink elastic jobs whose ranks left (empty: neither)")
	shrinkAfter := fs.Duration("shrink-after", coord.DefaultShrinkAfter, "how long a rank of an elastic job must have been missing before the job shrinks without it")
	ckptDir := fs.String("checkpoint-dir", "", "the checkpoints' directory, as the workers see it (empty: the NATS object store bucket tmmu_checkpoints); the leader deletes what no kept checkpoint needs")
	peers := fs.String("peers", "", "the cluster's voters: id=raft_addr=http_addr,... (this node included)")
	bootstrap := fs.Bool("bootstrap", false, "bootstrap a new cluster of --peers when the data dir is empty (every initial voter gets the same --peers; a node joining later runs without --bootstrap and is added with tmmu voter add)")
	token := fs.String("api-token", "", "bearer token every API call but /livez, /readyz and /metrics must carry (prefer --api-token-file)")
	tokenFile := fs.String("api-token-file", "", "read the API token from this file")
	readTokenFile := fs.String("read-token-file", "", "read the read token (reads of jobs, IRs, plans and status accept it; what workers hold) from this file")
	signingKey := fs.String("signing-key-file", "", "the coordinators' ed25519 key (PEM) that signs every outcome and announcement")
	sec := cli.SecurityFlags(fs)
	natsAuth := cli.NATSFlags(fs)
	logFormat := fs.String("log-format", "text", "log format: text or json")
	stopTimeout := fs.Duration("stop-timeout", 10*time.Second, "after SIGTERM, exit within this long whatever the peers do (raft's log is on disk; what is left undone is logged)")
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
	log, err := cli.Logger(stderr, *logFormat, level)
	if err != nil {
		return err
	}
	sec.Fill(trust.RoleCoordinator, *id, map[*string]func(trust.Layout) string{
		signingKey: trust.Layout.SigningKey, tokenFile: trust.Layout.APIToken, readTokenFile: trust.Layout.ReadToken})
	// A secure coordinator signs its decisions, binds reports to etcd
	// claims and guards its API with tokens.
	if err := sec.Require("coordinator", map[string]string{"--signing-key-file": *signingKey, "--api-token-file": *tokenFile + *token,
		"--nats-nkey-file": *sec.Nkey, "--etcd": *etcd}); err != nil {
		return err
	}
	apiToken, err := cli.Secret(*token, *tokenFile)
	if err != nil {
		return fmt.Errorf("--api-token-file: %w", err)
	}
	readToken, err := cli.Secret("", *readTokenFile)
	if err != nil {
		return fmt.Errorf("--read-token-file: %w", err)
	}
	natsOpts, err := natsAuth()
	if err != nil {
		return err
	}
	secOpts, err := sec.NATSOptions()
	if err != nil {
		return err
	}
	natsOpts = append(natsOpts, secOpts...)
	var trOpts []transport.Option
	if *signingKey != "" {
		s, err := trust.LoadSigner(*signingKey)
		if err != nil {
			return fmt.Errorf("--signing-key-file: %w", err)
		}
		trOpts = append(trOpts, transport.WithSigner(s))
	}
	ps, err := parsePeers(*peers)
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		ps = []api.Peer{{ID: *id, RaftAddr: *raftAddr, HTTPAddr: *httpAddr}}
	}
	cfg := coord.Config{ID: *id, RaftAddr: *raftAddr, HTTPAddr: *httpAddr, DataDir: *dataDir,
		Bootstrap: *bootstrap, Peers: ps, Fast: *fast, APIToken: apiToken, ReadToken: readToken, Logger: log}
	var apiTLS *tls.Config
	if files := sec.TLS(); files.Enabled() {
		rt := &coord.RaftTLS{}
		if rt.Server, err = files.Server(true, trust.RoleCoordinator); err != nil {
			return err
		}
		if rt.Client, err = files.Client(trust.RoleCoordinator); err != nil {
			return err
		}
		if apiTLS, err = files.Server(false); err != nil {
			return err
		}
		cfg.RaftTLS, cfg.HTTPS = rt, true
	}
	node, err := coord.Open(cfg)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: *httpAddr, Handler: node.Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: apiTLS,
		ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelDebug)}
	errc := make(chan error, 1)
	go func() {
		if apiTLS != nil {
			errc <- srv.ListenAndServeTLS("", "")
			return
		}
		errc <- srv.ListenAndServe()
	}()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("coordinator started", "id", *id, "raft", *raftAddr, "http", *httpAddr, "peers", len(ps), "tls", apiTLS != nil, "signed", *signingKey != "")
	if *sec.Insecure {
		log.Warn("running --insecure: no TLS, no signed decisions, reports not bound to NATS identities unless the server enforces them")
	}
	// The raft node serves while NATS is not up yet: the leader's loops
	// start once it is.
	agreeDone := make(chan struct{})
	go func() {
		defer close(agreeDone)
		natsOpts = append(natsOpts, nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted()) }),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected", "err", err) }))
		nc, tr, err := cli.DialNATS(ctx, *natsURL, "tmmu-coordinator-"+*id, log, natsOpts, trOpts...)
		if err != nil {
			if ctx.Err() == nil {
				log.Error("NATS", "err", err)
			}
			return
		}
		defer nc.Close()
		irs, err := checkpoint.WaitNATSStore(ctx, tr.JetStream(), checkpoint.NATSConfig{Bucket: coord.IRBucket})
		if err != nil {
			if ctx.Err() == nil {
				log.Error("the IR store", "err", err)
			}
			return
		}
		node.SetIRStore(irs)
		l := coord.Leading{Transport: tr, ShrinkAfter: *shrinkAfter}
		if *etcd != "" {
			etls, err := sec.EtcdTLS()
			if err != nil {
				log.Error("etcd TLS", "err", err)
				return
			}
			ec, err := rendezvous.Dial(strings.Split(*etcd, ","), etls, log)
			if err != nil {
				log.Error("etcd", "endpoints", *etcd, "err", err)
				return
			}
			defer ec.Close()
			l.Rendezvous = rendezvous.New(ec, "", 0)
		}
		if *ckptDir != "" {
			if l.Store, err = cli.CheckpointStore(ctx, *ckptDir, tr); err != nil {
				log.Error("checkpoint store", "err", err)
				return
			}
		}
		node.RunAgreement(ctx, l)
	}()

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("stopping: handing leadership over")
	// Each phase may wait on peers, NATS or etcd that are stopping too:
	// the whole shutdown is bounded, and a phase that overruns is named.
	var phase atomic.Value
	phase.Store("the leader's loops")
	stopped := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(stopped)
		stop()
		<-agreeDone
		phase.Store("the HTTP server")
		sctx, cancel := context.WithTimeout(context.Background(), min(5*time.Second, *stopTimeout/2))
		defer cancel()
		srv.Shutdown(sctx)
		phase.Store("raft (leadership transfer, shutdown)")
		if serr := node.TransferAndShutdown(); serr != nil {
			log.Warn("shutdown", "err", serr)
		}
	}()
	select {
	case <-stopped:
		log.Info("stopped", "took", time.Since(began).Round(time.Millisecond))
	case <-time.After(*stopTimeout):
		log.Error("shutdown overran its bound: exiting anyway (raft's log and snapshots are on disk)", "bound", *stopTimeout, "stuck_in", phase.Load())
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
