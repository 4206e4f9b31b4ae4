// Command worker is one rank of a tmmu job. It claims a stable rank in etcd
// for its identity, fetches the job from the coordinators, plans its rank
// view, proves its plan hash over NATS, waits until the epoch is committed
// as agreed and runs the steps, each behind a go/no-go barrier (see package
// worker).
//
//	worker --identity node3-gpu0 --job train \
//	    --coordinators http://10.0.0.1:8080,http://10.0.0.2:8080 \
//	    --nats nats://10.0.0.9:4222 --etcd http://10.0.0.9:2379
//
// Every flag can come from the environment instead (TMMU_IDENTITY,
// TMMU_JOB, TMMU_COORDINATORS, TMMU_NATS, TMMU_ETCD, TMMU_LEASE_TTL,
// TMMU_STANDBY, TMMU_EXECUTOR, TMMU_NATS_USER, TMMU_NATS_PASSWORD(_FILE),
// TMMU_HTTP_ADDR, TMMU_LOG_FORMAT). With --http-addr it serves /livez,
// /readyz (ready once it runs steps) and Prometheus /metrics;
// "worker healthcheck URL" probes an endpoint, for container
// healthchecks. SIGTERM or SIGINT drains it: the running step finishes,
// the rank is released (shown as missing, kept for this identity).
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
	"github.com/tmmu/tmmu/worker"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "healthcheck" {
		os.Exit(cli.Healthcheck(os.Args[2:]))
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	host, _ := os.Hostname()
	identity := fs.String("identity", host, "stable identity of this worker (a restarted worker with the same identity gets its rank back)")
	job := fs.String("job", "", "job name (required)")
	coords := fs.String("coordinators", "http://127.0.0.1:8080", "coordinator HTTP URLs, comma-separated")
	natsURL := fs.String("nats", nats.DefaultURL, "NATS server URL (JetStream enabled)")
	etcd := fs.String("etcd", "http://127.0.0.1:2379", "etcd endpoints, comma-separated")
	ttl := fs.Int64("lease-ttl", 10, "rank lease TTL in seconds")
	standby := fs.Duration("standby", 10*time.Minute, "how long to wait, when an elastic job's world leaves this worker out, for an epoch that takes it back")
	executor := fs.String("executor", "auto", "auto (webgpu if an adapter exists, else cpu; arena for graphs the engine cannot run), webgpu, cpu, arena or plan-only")
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
	log, err := cli.Logger(os.Stderr, *logFormat, level)
	if err != nil {
		return err
	}
	natsOpts, err := natsAuth()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(*natsURL, append(natsOpts, nats.MaxReconnects(-1), nats.Name("tmmu-worker-"+*identity))...)
	if err != nil {
		return fmt.Errorf("nats %s: %w", *natsURL, err)
	}
	defer nc.Close()
	tr, err := transport.New(nc)
	if err != nil {
		return err
	}
	ec, err := rendezvous.Dial(strings.Split(*etcd, ","))
	if err != nil {
		return fmt.Errorf("etcd %s: %w", *etcd, err)
	}
	defer ec.Close()
	cfg := worker.Config{Identity: *identity, Job: *job, Coordinator: coord.NewClient(strings.Split(*coords, ",")...),
		Transport: tr, Rendezvous: rendezvous.New(ec, "", *ttl), Logger: log, Standby: *standby}
	exec, err := worker.Executors(*executor, tr, *job, log)
	if err != nil {
		return fmt.Errorf("--executor: %w", err)
	}
	m := newMetrics()
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	res, err := worker.Run(ctx, cfg)
	log.Info("worker finished", "rank", res.Rank, "epoch", res.Epoch, "plan_hash", res.PlanHash.Short(), "executor", res.Executor,
		"steps_run", res.StepsRun, "last_step", res.LastStep, "agreement", res.AgreementTime, "losses", len(res.Losses), "err", err)
	if n := len(res.Losses); n > 0 {
		log.Info("training", "first_loss", res.Losses[0], "last_loss", res.Losses[n-1])
	}
	return err
}
