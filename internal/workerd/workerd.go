// Package workerd is the worker daemon (cmd/worker): flags and
// environment, NATS, etcd and the coordinators, the checkpoint store, the
// executor, metrics and health endpoints, and signals, around package
// worker. Main is cmd/worker's main; tests run it in processes of their
// own.
package workerd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/transport"
	"github.com/tmmu/tmmu/trust"
	"github.com/tmmu/tmmu/worker"
)

// Main runs the worker daemon with args (without the program name) and
// returns its exit status. "healthcheck URL" probes an endpoint.
func Main(args []string, stderr io.Writer) int { return cli.Main("worker", args, stderr, run) }

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host, _ := os.Hostname()
	identity := fs.String("identity", host, "stable identity of this worker (a restarted worker with the same identity gets its rank back)")
	job := fs.String("job", "", "job name (required)")
	coords := fs.String("coordinators", "http://127.0.0.1:8080", "coordinator HTTP URLs, comma-separated")
	natsURL := fs.String("nats", nats.DefaultURL, "NATS server URL (JetStream enabled)")
	etcd := fs.String("etcd", "http://127.0.0.1:2379", "etcd endpoints, comma-separated")
	ttl := fs.Int64("lease-ttl", 10, "rank lease TTL in seconds")
	standby := fs.Duration("standby", 10*time.Minute, "how long to wait, when an elastic job's world leaves this worker out, for an epoch that takes it back")
	executor := fs.String("executor", "auto", "auto (webgpu if an adapter exists, else cpu; arena for graphs the engine cannot run), webgpu, cpu, arena or plan-only")
	ckptDir := fs.String("checkpoint-dir", "", "keep checkpoints in this directory (every worker and coordinator of the cluster must see the same one) instead of the NATS object store bucket "+"tmmu_checkpoints")
	poll := fs.Duration("poll", time.Second, "how often to poll the coordinators while waiting, in case announcements are lost")
	verifyKey := fs.String("verify-key-file", "", "the coordinators' public key(s) (PEM): outcomes and announcements that do not verify are ignored")
	tokenFile := fs.String("token-file", "", "the coordinators' read token (or API token), which reads of the job need")
	sec := cli.SecurityFlags(fs)
	natsAuth := cli.NATSFlags(fs)
	httpAddr := fs.String("http-addr", "", "serve /livez, /readyz and /metrics here (empty: no HTTP)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cli.ApplyEnv(fs); err != nil {
		return err
	}
	if *job == "" {
		return fmt.Errorf("--job is required")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log, err := cli.Logger(stderr, *logFormat, level)
	if err != nil {
		return err
	}
	sec.Fill(trust.RoleWorker, *identity, map[*string]func(trust.Layout) string{verifyKey: trust.Layout.VerifyKey, tokenFile: trust.Layout.ReadToken})
	if err := sec.Require("worker", map[string]string{"--verify-key-file": *verifyKey, "--nats-nkey-file": *sec.Nkey, "--token-file": *tokenFile}); err != nil {
		return err
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
	trOpts := []transport.Option{transport.WithIdentity(*identity)}
	if !*sec.Insecure {
		// The coordinators create the buckets; a worker's credentials
		// may only use them.
		trOpts = append(trOpts, transport.OpenOnly())
	}
	if *verifyKey != "" {
		v, err := trust.LoadVerifier(*verifyKey)
		if err != nil {
			return fmt.Errorf("--verify-key-file: %w", err)
		}
		trOpts = append(trOpts, transport.WithVerifier(v))
	}
	token, err := cli.Secret("", *tokenFile)
	if err != nil {
		return fmt.Errorf("--token-file: %w", err)
	}
	coordClient := api.NewClient(strings.Split(*coords, ",")...)
	coordClient.Token = token
	if coordClient.HTTP.Transport, err = sec.CoordinatorTransport(); err != nil {
		return err
	}
	etls, err := sec.EtcdTLS()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	m := newMetrics()
	natsOpts = append(natsOpts,
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("NATS disconnected", "err", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			m.reconnects.WithLabelValues("nats").Inc()
			log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted())
		}))
	nc, tr, err := cli.DialNATS(ctx, *natsURL, "tmmu-worker-"+*identity, log, natsOpts, trOpts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	m.watch(tr)
	ec, err := rendezvous.Dial(strings.Split(*etcd, ","), etls, log)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", *etcd, err)
	}
	defer ec.Close()
	store, err := cli.CheckpointStore(ctx, *ckptDir, tr)
	if err != nil {
		return fmt.Errorf("checkpoint store: %w", err)
	}
	cfg := worker.Config{Identity: *identity, Job: *job, Coordinator: coordClient,
		Transport: tr, Rendezvous: rendezvous.New(ec, "", *ttl), Store: store, Logger: log, Standby: *standby, Poll: *poll, Stats: m}
	exec, err := worker.Executors(*executor, tr, *job, log)
	if err != nil {
		return fmt.Errorf("--executor: %w", err)
	}
	cfg.Executor = m.wrap(exec)
	if *httpAddr != "" {
		srv := &http.Server{Addr: *httpAddr, Handler: m.handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "addr", *httpAddr, "err", err)
			}
		}()
		defer srv.Close()
	}
	res, err := worker.Run(ctx, cfg)
	log.Info("worker finished", "rank", res.Rank, "epoch", res.Epoch, "plan_hash", res.PlanHash.Short(), "executor", res.Executor,
		"steps_run", res.StepsRun, "last_step", res.LastStep, "agreement", res.AgreementTime, "losses", len(res.Losses),
		"checkpoints", res.Checkpoints, "restores", res.Restores, "rollbacks_asked", res.Rollbacks, "reclaims", res.Reclaims, "last_state_hash", res.LastState, "err", err)
	if n := len(res.Losses); n > 0 {
		log.Info("training", "first_loss", res.Losses[0], "last_loss", res.Losses[n-1])
	}
	return err
}
