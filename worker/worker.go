// Package worker is one rank of a tmmu job: it joins through the etcd
// rendezvous, fetches its job from the coordinators, plans its rank view,
// proves its plan hash over NATS, waits until the epoch is committed as
// agreed, and runs steps, each behind a go/no-go barrier.
//
// # One epoch
//
//  1. Fetch the job (GET /v1/jobs/{name}, any coordinator) and its IR.
//  2. Claim a rank (rendezvous.Claim): a stable rank per identity, held
//     by an etcd lease; a restarted worker with the same identity gets its
//     rank back.
//  3. Plan the rank (shard.PlanRank with the job's options) and report
//     the plan hash (transport.Report: once per job, epoch and rank).
//  4. Wait for the committed outcome of the epoch: the leader's
//     announcement on NATS, or the job as the coordinators hold it
//     (polled). A mismatch is committed by the leader and ends the worker
//     with ErrNotAgreed: no rank runs a step under an epoch that is not
//     agreed.
//  5. Run steps. Before step s every rank publishes a StepReport (s, its
//     plan hash) and repeats it while it waits; a rank runs s once every
//     rank has reported s or a later step with its expected hash (a rank
//     reporting a later step has passed s already: that is how a replacement
//     worker catches up with ranks waiting further on). After the step it
//     publishes StepDone, from which the leader commits progress.
//
// Cancelling the context drains the worker: it finishes the step it is
// running, releases its rank (the lease is revoked; the rank shows as
// missing, reserved for the identity) and returns.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tmmu/tmmu/coord"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/runtime"
	"github.com/tmmu/tmmu/shard"
	"github.com/tmmu/tmmu/transport"
)

// Config configures a worker.
type Config struct {
	Identity    string // stable across restarts of this worker
	Job         string
	Coordinator *coord.Client
	Transport   *transport.Transport
	Rendezvous  *rendezvous.Client
	// Executor builds the executor for a planned view; nil means the
	// arena executor, or plan-only when the plan is larger than
	// runtime.DefaultMaxBytes.
	Executor func(g *ir.Graph, p *planner.Plan) (runtime.Executor, error)
	// AdjustOptions, if set, changes the planner options before this
	// worker plans (an operator's local override; a different plan is
	// detected as a mismatch).
	AdjustOptions func(*planner.Options)
	// OnStep is called just before each step runs (a test's safety
	// recorder).
	OnStep func(Event)
	Logger *slog.Logger
	// Poll is how often the worker polls the coordinators while waiting
	// (default 100 ms); Resend how often it repeats its StepReport
	// while waiting at a barrier (default 100 ms).
	Poll, Resend time.Duration
}

// Event describes a step about to run.
type Event struct {
	Job      string
	Identity string
	Rank     uint64
	Epoch    uint64
	Step     uint64
	PlanHash ir.Hash
}

// Result is what a worker did.
type Result struct {
	Rank          uint64
	Epoch         uint64
	PlanHash      ir.Hash
	Executor      string
	StepsRun      uint64
	FirstStep     uint64
	LastStep      uint64
	PlanTime      time.Duration
	AgreementTime time.Duration // from reporting to seeing the committed outcome
	StepTime      time.Duration // total time running steps (barriers excluded)
	Model         shard.ModelState
	Bytes         uint64 // the plan's reserved bytes
}

// ErrNotAgreed is returned when the epoch was committed as not agreed.
var ErrNotAgreed = errors.New("worker: the epoch was not agreed")

// Run runs the worker until the job's steps are done, the epoch is not
// agreed, or ctx ends (a drain: the current step finishes first).
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Poll == 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	if cfg.Resend == 0 {
		cfg.Resend = 100 * time.Millisecond
	}
	log = log.With("job", cfg.Job, "identity", cfg.Identity)

	job, err := waitJob(ctx, cfg)
	if err != nil {
		return res, err
	}
	data, err := cfg.Coordinator.IR(ctx, cfg.Job)
	if err != nil {
		return res, fmt.Errorf("worker: fetching the IR: %w", err)
	}
	model, err := ir.DecodeCBOR(data)
	if err != nil {
		return res, fmt.Errorf("worker: the job's IR: %w", err)
	}
	world := job.Spec.ShardSpec.WorldSize
	claim, err := cfg.Rendezvous.Claim(ctx, cfg.Job, world, cfg.Identity)
	if err != nil {
		return res, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if rerr := claim.Release(rctx); rerr != nil {
			log.Warn("releasing the rank", "err", rerr)
		}
	}()
	rank := claim.Rank
	res.Rank = rank
	log = log.With("rank", rank)

	e := job.Current()
	res.Epoch = e.Epoch
	opts := job.Spec.PlanOptions()
	if cfg.AdjustOptions != nil {
		cfg.AdjustOptions(&opts)
	}
	t0 := time.Now()
	rp, err := shard.PlanRank(model, &job.Spec.ShardSpec, rank, opts)
	if err != nil {
		return res, fmt.Errorf("worker: planning rank %d: %w", rank, err)
	}
	res.PlanTime = time.Since(t0)
	res.PlanHash, res.Model, res.Bytes = rp.Plan.PlanHash, rp.ModelState, rp.Plan.Metrics.ReservedBytes

	// Listen for the outcome before reporting, so it cannot be missed.
	outcomes := make(chan transport.Outcome, 4)
	sub, err := cfg.Transport.SubscribeOutcomes(cfg.Job, func(o transport.Outcome) {
		if o.Epoch == e.Epoch {
			select {
			case outcomes <- o:
			default:
			}
		}
	})
	if err != nil {
		return res, err
	}
	defer sub.Unsubscribe()
	t1 := time.Now()
	if err := cfg.Transport.Report(ctx, transport.PlanReport{Job: cfg.Job, Epoch: e.Epoch, Rank: rank, Identity: cfg.Identity, PlanHash: rp.Plan.PlanHash}); err != nil {
		return res, fmt.Errorf("worker: reporting the plan hash: %w", err)
	}
	committed, err := waitOutcome(ctx, cfg, e.Epoch, outcomes)
	if err != nil {
		return res, err
	}
	res.AgreementTime = time.Since(t1)
	if !committed.Agreed {
		return res, fmt.Errorf("%w: %s", ErrNotAgreed, committed.Reason)
	}
	log.Debug("epoch agreed", "epoch", e.Epoch, "plan_hash", rp.Plan.PlanHash.Short())

	view, err := shard.RankView(model, &job.Spec.ShardSpec, rank)
	if err != nil {
		return res, err
	}
	exec, err := newExecutor(cfg, view.Graph, rp.Plan)
	if err != nil {
		return res, err
	}
	res.Executor = exec.Name()

	// Steps: start where every rank has finished (a replacement worker
	// joins the others there).
	latest, err := cfg.Coordinator.Job(ctx, cfg.Job)
	if err != nil {
		return res, err
	}
	step := max(e.StartStep, latest.LastStep+1)
	res.FirstStep = step
	b := newBarrier(world, e.Expected)
	stepSub, err := cfg.Transport.SubscribeStepReports(cfg.Job, func(r transport.StepReport) {
		if r.Epoch == e.Epoch {
			b.add(r)
		}
	})
	if err != nil {
		return res, err
	}
	defer stepSub.Unsubscribe()
	for job.Spec.Steps == 0 || step <= job.Spec.Steps {
		if err := b.wait(ctx, step, cfg.Resend, func() error {
			return cfg.Transport.PublishStepReport(transport.StepReport{Job: cfg.Job, Epoch: e.Epoch, Rank: rank, Step: step, PlanHash: rp.Plan.PlanHash})
		}); err != nil {
			if ctx.Err() != nil {
				return res, nil // drained between steps
			}
			return res, err
		}
		if cfg.OnStep != nil {
			cfg.OnStep(Event{Job: cfg.Job, Identity: cfg.Identity, Rank: rank, Epoch: e.Epoch, Step: step, PlanHash: rp.Plan.PlanHash})
		}
		t := time.Now()
		if _, err := exec.Step(context.WithoutCancel(ctx), step); err != nil {
			return res, fmt.Errorf("worker: step %d: %w", step, err)
		}
		took := time.Since(t)
		res.StepTime += took
		res.StepsRun++
		res.LastStep = step
		if err := cfg.Transport.PutProgress(context.WithoutCancel(ctx), transport.StepDone{Job: cfg.Job, Epoch: e.Epoch, Rank: rank, Step: step, Nanos: took.Nanoseconds()}); err != nil {
			log.Warn("publishing progress", "step", step, "err", err)
		}
		step++
		if ctx.Err() != nil {
			return res, nil
		}
	}
	// Keep answering the barrier of the last step briefly, so a rank
	// that is still waiting sees this one pass it.
	cfg.Transport.PublishStepReport(transport.StepReport{Job: cfg.Job, Epoch: e.Epoch, Rank: rank, Step: step, PlanHash: rp.Plan.PlanHash})
	return res, nil
}

func newExecutor(cfg Config, g *ir.Graph, p *planner.Plan) (runtime.Executor, error) {
	if cfg.Executor != nil {
		return cfg.Executor(g, p)
	}
	if p.Metrics.ReservedBytes > runtime.DefaultMaxBytes {
		return runtime.PlanOnly{}, nil
	}
	return runtime.NewArenaExecutor(g, p, 0)
}

func waitJob(ctx context.Context, cfg Config) (*coord.Job, error) {
	for {
		j, err := cfg.Coordinator.Job(ctx, cfg.Job)
		if err == nil {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(cfg.Poll):
		}
	}
}

// waitOutcome waits for the epoch's committed outcome: from the leader's
// announcement (published after the commit) or from the job state.
func waitOutcome(ctx context.Context, cfg Config, epoch uint64, outcomes <-chan transport.Outcome) (*coord.Outcome, error) {
	tick := time.NewTicker(cfg.Poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case o := <-outcomes:
			out := &coord.Outcome{Agreed: o.Agreed, Missing: o.Missing, Reason: o.Reason}
			for _, m := range o.Mismatches {
				out.Mismatches = append(out.Mismatches, coord.Mismatch{Rank: m.Rank, Expected: m.Expected, Got: m.Got})
			}
			if !out.Agreed && out.Reason == "" {
				out.Reason = fmt.Sprintf("mismatches %v, missing %v", out.Mismatches, out.Missing)
			}
			return out, nil
		case <-tick.C:
			j, err := cfg.Coordinator.Job(ctx, cfg.Job)
			if err != nil || uint64(len(j.Epochs)) <= epoch {
				continue
			}
			if o := j.Epochs[epoch].Outcome; o != nil {
				if !o.Agreed && o.Reason == "" {
					o.Reason = j.Reason
				}
				return o, nil
			}
		}
	}
}

// barrier is the go/no-go barrier before each step: rank r has passed step
// s once it reported s or a later step with its expected hash.
type barrier struct {
	mu       sync.Mutex
	expected []ir.Hash
	at       []uint64 // highest step reported per rank (0 = none)
	changed  chan struct{}
}

func newBarrier(world uint64, expected []ir.Hash) *barrier {
	return &barrier{expected: expected, at: make([]uint64, world), changed: make(chan struct{}, 1)}
}

func (b *barrier) add(r transport.StepReport) {
	b.mu.Lock()
	if r.Rank < uint64(len(b.at)) && r.PlanHash == b.expected[r.Rank] && r.Step > b.at[r.Rank] {
		b.at[r.Rank] = r.Step
	}
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

func (b *barrier) ready(step uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.at {
		if s < step {
			return false
		}
	}
	return true
}

// wait publishes this rank's report for step (again every resend) until
// every rank has passed it.
func (b *barrier) wait(ctx context.Context, step uint64, resend time.Duration, publish func() error) error {
	if err := publish(); err != nil {
		return err
	}
	tick := time.NewTicker(resend)
	defer tick.Stop()
	for !b.ready(step) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-b.changed:
		case <-tick.C:
			if err := publish(); err != nil {
				return err
			}
		}
	}
	return nil
}
