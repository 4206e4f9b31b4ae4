package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/localcluster"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/worker"
)

var demoCmd = &command{
	name: "demo",
	summary: "Run a whole cluster in this process: embedded NATS and etcd, 3 raft coordinators on loopback and N workers; " +
		"submit a GPT-2 train_full job sharded with ZeRO-3 over them, train it (WebGPU, else the cpu kernels) with agreement before each step, print a summary.",
	usage: "demo [--workers N] [--steps K] [--zero S] [--layers L --hidden H --heads A --seq T --batch B --vocab V | --ir FILE] [--executor auto|webgpu|cpu|arena|plan-only] [-o text|json]",
	run:   runDemo,
}

type demoRank struct {
	Identity    string  `json:"identity"`
	Rank        uint64  `json:"rank"`
	PlanHash    ir.Hash `json:"plan_hash"`
	Executor    string  `json:"executor"`
	ModelState  uint64  `json:"model_state_bytes"`
	Reserved    uint64  `json:"reserved_bytes"`
	PlanMs      float64 `json:"plan_ms"`
	AgreementMs float64 `json:"agreement_ms"`
	StepMs      float64 `json:"step_ms_mean"`
	Steps       uint64  `json:"steps_run"`
	FirstLoss   float64 `json:"first_loss,omitempty"`
	LastLoss    float64 `json:"last_loss,omitempty"`
	Err         string  `json:"error,omitempty"`
}

func runDemo(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	workers := fs.Uint64("workers", 4, "workers (ranks); the job is data-parallel over all of them")
	steps := fs.Uint64("steps", 20, "steps to run")
	zero := fs.Int("zero", 3, "ZeRO stage")
	cfg := models.GPT2Config{Layers: 2, Hidden: 64, Heads: 4, Seq: 32, Context: 32, Batch: 1, Vocab: 64, DType: ir.F32, Train: true}
	fs.Uint64Var(&cfg.Layers, "layers", cfg.Layers, "GPT-2 blocks")
	fs.Uint64Var(&cfg.Hidden, "hidden", cfg.Hidden, "model width")
	fs.Uint64Var(&cfg.Heads, "heads", cfg.Heads, "attention heads")
	fs.Uint64Var(&cfg.Seq, "seq", cfg.Seq, "tokens per sequence")
	fs.Uint64Var(&cfg.Batch, "batch", cfg.Batch, "sequences per rank")
	fs.Uint64Var(&cfg.Vocab, "vocab", cfg.Vocab, "vocabulary")
	executor := fs.String("executor", "auto", "auto (webgpu when an adapter exists, else cpu), webgpu, cpu, arena (memory traffic only) or plan-only (for models too large to run here)")
	dtype := fs.String("dtype", "fp32", "fp32 (trainable by the cpu and webgpu executors) or bf16 (arena and plan-only)")
	irFile := fs.String("ir", "", "submit this graph (UML_Model_IR JSON or CBOR, e.g. from tmmu import) instead of the generated GPT-2; the executors run it if they support its ops and dtypes, else (with --executor auto) the memory-traffic executor does, and the summary says which")
	out := fs.String("o", "text", "output: text or json")
	verbose := fs.Bool("v", false, "log the cluster's warnings")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("demo takes no arguments")
	}
	if *steps == 0 {
		return usagef("--steps 0: want 1 or more (a demo job runs a number of steps and ends)")
	}
	if *workers == 0 || *workers > 256 {
		return usagef("--workers %d: want 1 to 256", *workers)
	}
	cfg.Context = max(cfg.Context, cfg.Seq)
	cfg.DType = ir.DType(*dtype)
	switch *executor {
	case "auto", "webgpu", "cpu", "arena", "plan-only":
	default:
		return usagef("--executor %q: want auto, webgpu, cpu, arena or plan-only", *executor)
	}
	var m *ir.Model
	if *irFile != "" {
		data, err := readInput(e, *irFile)
		if err != nil {
			return err
		}
		if m, err = ir.Decode(data); err != nil {
			return err
		}
	} else if m, err = models.GPT2(cfg); err != nil {
		return usageError{err.Error()}
	}
	dir, err := os.MkdirTemp("", "tmmu-demo-")
	if err != nil {
		return ioError(err, "temporary directory")
	}
	defer os.RemoveAll(dir)
	logf := func(format string, a ...any) {
		if *out == "text" {
			fmt.Fprintf(e.stdout, format+"\n", a...)
		}
	}
	opts := localcluster.Options{Dir: dir}
	if *verbose {
		opts.Logger = newStderrLogger(e)
	}
	t0 := time.Now()
	l, err := localcluster.Start(opts)
	if err != nil {
		return err
	}
	defer l.Close()
	st, err := l.Client().Status(context.Background())
	if err != nil {
		return err
	}
	logf("cluster up in %s: NATS %s, etcd %s, coordinators %d (leader %s, term %d)",
		time.Since(t0).Round(time.Millisecond), l.NATSURL, l.EtcdEndpoint, len(st.Voters), st.Leader, st.Term)

	irJSON, _ := json.Marshal(m)
	spec := fmt.Sprintf(`{"world_size": %d, "data_parallel": {"zero_stage": %d}}`, *workers, *zero)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t1 := time.Now()
	// Planned for WebGPU's default limits, so every rank's device can
	// bind the arenas and every rank agrees on one plan.
	job, err := l.Client().Submit(ctx, &api.SubmitRequest{Name: "demo", IR: irJSON, ShardSpec: json.RawMessage(spec), Steps: *steps,
		ArenaConfig: engine.ExecutableArenas(engine.PortableLimits, nil)})
	if err != nil {
		return err
	}
	logf("job demo: %s, %d ranks, ZeRO-%d, %d steps; the leader planned every rank in %s\n  global_plan_hash %s",
		m.Name, *workers, *zero, *steps, time.Since(t1).Round(time.Millisecond), job.Current().GlobalPlanHash)

	groups := map[string]*engine.Local{} // the in-process data-parallel groups
	var gmu sync.Mutex
	group := func(p *planner.Plan) (engine.Collectives, func() error, error) {
		gmu.Lock()
		defer gmu.Unlock()
		key := fmt.Sprint(p.ShardSpecHash, p.WorldSize)
		if groups[key] == nil {
			groups[key] = engine.NewLocal(int(p.WorldSize))
		}
		return groups[key].Member(int(p.Rank)), func() error { return nil }, nil
	}
	ranks := make([]demoRank, *workers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	t2 := time.Now()
	for i := range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("worker-%d", i)
			wc := worker.Config{Identity: id, Job: "demo"}
			switch *executor {
			case "plan-only":
				wc.Executor = func(*ir.Graph, *planner.Plan) (runner.Executor, error) { return runner.PlanOnly{}, nil }
			case "arena":
				wc.Executor = func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) { return runner.NewArenaExecutor(g, p, 0) }
			default:
				wc.Executor = engine.Factory(engine.FactoryOptions{Backend: *executor, Group: group, Log: demoLog(e, *verbose),
					Fallback: func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) { return runner.NewArenaExecutor(g, p, 0) }})
			}
			res, err := l.RunWorker(ctx, wc, 10)
			r := demoRank{Identity: id, Rank: res.Rank, PlanHash: res.PlanHash, Executor: res.Executor, ModelState: res.Model.Total(),
				Reserved: res.Bytes, PlanMs: ms(res.PlanTime), AgreementMs: ms(res.AgreementTime), Steps: res.StepsRun}
			if res.StepsRun > 0 {
				r.StepMs = ms(res.StepTime) / float64(res.StepsRun)
			}
			if n := len(res.Losses); n > 0 {
				r.FirstLoss, r.LastLoss = res.Losses[0], res.Losses[n-1]
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.Err = err.Error()
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			}
			ranks[i] = r
		}()
	}
	wg.Wait()
	took := time.Since(t2)
	sort.Slice(ranks, func(a, b int) bool { return ranks[a].Rank < ranks[b].Rank })
	final, ferr := l.Client().Job(ctx, "demo")
	if ferr == nil && final.Status != api.StatusDone {
		// Progress is committed asynchronously; give the leader a moment.
		deadline := time.Now().Add(5 * time.Second)
		for final.Status != api.StatusDone && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			final, ferr = l.Client().Job(ctx, "demo")
			if ferr != nil {
				break
			}
		}
	}
	if ferr != nil {
		errs = append(errs, ferr)
	}
	if *out == "json" {
		return errors.Join(append(errs, writeJSON(e.stdout, struct {
			Job   *api.Job   `json:"job"`
			Ranks []demoRank `json:"ranks"`
		}{final, ranks}))...)
	}
	t := &table{align: "rlllrrrrrrrr"}
	t.add("RANK", "WORKER", "PLAN HASH", "EXECUTOR", "MODEL STATE", "ARENAS", "PLAN", "AGREEMENT", "STEP (MEAN)", "STEPS", "FIRST LOSS", "LAST LOSS")
	loss := func(x float64) string {
		if x == 0 {
			return "-"
		}
		return fmt.Sprintf("%.4f", x)
	}
	for _, r := range ranks {
		t.add(r.Rank, r.Identity, r.PlanHash.Short(), r.Executor, planner.FormatBytes(r.ModelState), planner.FormatBytes(r.Reserved),
			fmt.Sprintf("%.1f ms", r.PlanMs), fmt.Sprintf("%.1f ms", r.AgreementMs), fmt.Sprintf("%.1f ms", r.StepMs), r.Steps,
			loss(r.FirstLoss), loss(r.LastLoss))
	}
	fmt.Fprintln(e.stdout)
	t.write(e.stdout)
	if final != nil {
		o := final.Current().Outcome
		agreed := o != nil && o.Agreed
		fmt.Fprintf(e.stdout, "\nepoch %d agreed: %v (every rank's plan hash matched the leader's before any step ran)\n", final.Current().Epoch, agreed)
		fmt.Fprintf(e.stdout, "job %s: %s at step %d of %d, workers ran for %s\n", final.Spec.Name, final.Status, final.LastStep, final.Spec.Steps, took.Round(time.Millisecond))
		if k := final.LastCheckpoint(); k != nil {
			fmt.Fprintf(e.stdout, "checkpoint of step %d committed: %d shards, %s in the NATS object store, rank 0's state %s\n",
				k.Step, len(k.Shards), planner.FormatBytes(k.Bytes), k.Shards[0].StateHash.Short())
		}
	}
	if len(ranks) > 0 {
		switch ranks[0].Executor {
		case "arena":
			fmt.Fprintln(e.stdout, "executor arena: each step writes every output at its planned address in host memory and computes nothing (--executor auto trains fp32 models)")
		case "cpu", "webgpu":
			fmt.Fprintf(e.stdout, "executor %s: each rank trains its ZeRO shard in its planned arenas on a synthetic counting task; ranks exchange gradients and parameters in-process\n", ranks[0].Executor)
		}
	}
	return errors.Join(errs...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// demoLog is where the executors say which device they run on, or why
// they fell back: stderr with -v, else only warnings.
func demoLog(e *env, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
}

func newStderrLogger(e *env) *slog.Logger {
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
