// Package worker is one rank of a tmmu job: it joins through the etcd
// rendezvous, fetches its job from the coordinators, plans its rank view,
// proves its plan hash over NATS, waits until the epoch is committed as
// agreed, and runs steps, each behind a go/no-go barrier; it checkpoints
// its shard of the model state and restores it, so the job's training
// state survives the cluster's faults.
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
//  5. Hold the state the next step needs (recovery.Prepare): carry it
//     from the epoch before (checkpointing it at the boundary), start
//     from the initial state, restore a committed checkpoint (verified by
//     digest and by the state hash the executor then seals), go back to
//     where a rollback epoch starts, or — a process that holds nothing,
//     past the first step — ask the leader to roll the job back to its
//     last checkpoint (transport.RecoveryRequest).
//  6. Run steps. Before step s every rank publishes a StepReport (s, its
//     plan hash); a rank runs s once every rank has reported s or a later
//     step with its expected hash. After the step it publishes StepDone,
//     from which the leader commits progress, and at a checkpoint step
//     (recovery.Due) stores its shard (package checkpoint) and reports it.
//
// # Trust
//
// Every report names the etcd revision of the worker's claim of its rank
// (the leader counts a plan report only from the claim's holder), and is
// stored under the worker identity's own token (its NATS credentials
// write nothing else). The barrier counts a rank's step reports only from
// the identity the epoch's committed outcome names as its holder, and the
// collectives only that identity's contributions. Outcomes and grants
// that arrive on NATS act only if they are of this incarnation of the job
// and, with a transport WithVerifier, signed by the coordinators (others
// are dropped and counted).
//
// # Faults
//
// No transient fault ends a worker. NATS: the client reconnects, puts are
// retried with backoff, watches resume (package transport). etcd: a lost
// rank lease is claimed again for the same identity (the same rank, a new
// lease). Coordinators: failed or stale answers are retried; only the
// committed state ends a worker — the job done, failed, cancelled or
// deleted. A rank that is gone makes the others wait, inside a collective
// if need be: a step that a rollback abandons is cancelled.
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
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/recovery"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/shard"
	"github.com/tmmu/tmmu/transport"
)

// Config configures a worker.
type Config struct {
	Identity    string // stable across restarts of this worker
	Job         string
	Coordinator *api.Client
	Transport   *transport.Transport
	Rendezvous  *rendezvous.Client
	// Store holds the checkpoints; nil means the JetStream object store
	// bucket checkpoint.DefaultBucket on Transport's connection. Every
	// worker of a job and the coordinators use the same store.
	Store checkpoint.Store
	// Executor builds the executor for a planned view; nil means the
	// arena executor, or plan-only when the plan is larger than
	// runner.DefaultMaxBytes.
	Executor func(g *ir.Graph, p *planner.Plan) (runner.Executor, error)
	// ExecutorName, when Executor is nil, names one of ExecutorNames
	// (see Executors); the engine's executors use Transport for the
	// job's collectives.
	ExecutorName string
	// AdjustOptions, if set, changes the planner options before this
	// worker plans (an operator's local override; a different plan is
	// detected as a mismatch).
	AdjustOptions func(*planner.Options)
	// Observe, if set, returns the dynamic dimension sizes ("seq") seen
	// at the end of a step (the data pipeline's batch shapes).
	Observe func(step uint64) map[string]uint64
	// OnStep is called just before each step runs (a test's safety
	// recorder); AfterStep after it ran, with its stats (the loss).
	OnStep    func(Event)
	AfterStep func(Event, runner.StepStats)
	// Stats, if set, is told about checkpoints, restores and
	// reconnections (the daemon's metrics).
	Stats Stats
	// Standby is how long a worker that an elastic job's world left out
	// waits for an epoch that takes it back before it ends with
	// ErrNotMember (0: it ends at once).
	Standby time.Duration
	Logger  *slog.Logger
	// Poll is how often the worker polls the coordinators while waiting,
	// in case announcements are lost (default 1 s; grants and epochs
	// normally arrive as NATS announcements).
	Poll time.Duration
}

// Stats receives what a worker does beyond its steps. Its methods are
// called from the worker's goroutine.
type Stats interface {
	// Checkpointed: the shard of step was stored and reported.
	Checkpointed(step, bytes uint64, took time.Duration)
	// Restored: the state after step was restored from its checkpoint.
	Restored(step, bytes uint64, took time.Duration)
	// Reconnected: a dependency came back after a failure ("etcd": the
	// rank was claimed again; "coordinator": an answer after failures).
	Reconnected(what string)
}

// WaitStats is what a Stats may also implement to be told what the
// worker is waiting on: Waiting after each failed try of something it
// retries (what, the last error, when the run of failures began, the
// tries so far), Waited when it succeeded. The daemon shows it in
// /readyz and its metrics.
type WaitStats interface {
	Waiting(what string, err error, since time.Time, tries int)
	Waited(what string)
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
	Epoch         uint64 // the last epoch it ran under
	Epochs        uint64 // epochs it ran steps under
	PlanHash      ir.Hash
	Executor      string
	StepsRun      uint64
	FirstStep     uint64
	LastStep      uint64
	PlanTime      time.Duration
	AgreementTime time.Duration // from reporting to seeing the committed outcome (first epoch)
	StepTime      time.Duration // total time running steps (barriers excluded)
	Model         shard.ModelState
	Bytes         uint64 // the plan's reserved bytes
	Replans       uint64 // replan requests this worker sent
	// Losses are the training losses of the steps run, in order, when
	// the executor computes (cpu, webgpu). After a rollback the steps
	// run again add their losses again. Validations are the validation
	// losses, with their steps, the same way.
	Losses      []float64
	Validations []Validation
	// DataFetched and DataFed are the training data's bytes this worker
	// fetched and fed (runner.StepStats), after its last step.
	DataFetched, DataFed uint64
	// LastState is the sealed state hash of the state the run ended with
	// (CommitExecution_v1) when the executor computes, sealed once at
	// the end.
	LastState string
	// Switches are the trace records of the plan changes this worker
	// made at epoch boundaries, in the same process.
	Switches []Switch
	// Checkpoints counts the shards this worker stored; Restores the
	// checkpoints it restored; Rollbacks the rollbacks it asked for;
	// Abandoned the steps a rollback cut short; Reclaims the times it
	// claimed its rank again after losing the lease.
	Checkpoints, Restores, Rollbacks, Abandoned, Reclaims uint64
}

// Validation is a validation loss after a step: the mean loss over the
// validation set's first batches (this rank's rows of them).
type Validation struct {
	Step uint64  `json:"step"`
	Loss float64 `json:"loss"`
}

// reportLosses keeps the losses of the last steps and the latest
// validation for the progress reports (the leader averages them over
// the ranks), and returns them.
func (w *run) reportLosses(step uint64, stats runner.StepStats) ([]transport.StepLoss, *transport.StepLoss) {
	if stats.HasLoss {
		// A step run again after a rollback replaces what it had.
		w.losses = slices.DeleteFunc(w.losses, func(l transport.StepLoss) bool { return l.Step >= step })
		w.losses = append(w.losses, transport.StepLoss{Step: step, Loss: stats.Loss})
		if n := len(w.losses); n > transport.MaxReportedLosses {
			w.losses = slices.Clone(w.losses[n-transport.MaxReportedLosses:])
		}
	}
	if stats.HasValLoss {
		w.val = &transport.StepLoss{Step: step, Loss: stats.ValLoss}
	}
	if w.val != nil && w.val.Step > step {
		w.val = nil // a validation of an abandoned timeline
	}
	return slices.Clone(w.losses), w.val
}

// validates says whether the job validates after step: every
// data.val_every steps, and after its last step.
func (w *run) validates(step uint64) bool {
	d := w.data
	if d == nil || d.spec == nil || d.spec.Val == nil {
		return false
	}
	spec := w.current().Spec
	return (d.spec.ValEvery > 0 && step%d.spec.ValEvery == 0) || step == spec.Steps
}

// Switch is a plan change at a safepoint: from Step on the rank runs
// epoch Epoch with plan New instead of Old.
type Switch struct {
	Epoch uint64  `json:"epoch"`
	Step  uint64  `json:"step"`
	Old   ir.Hash `json:"old_plan_hash"`
	New   ir.Hash `json:"new_plan_hash"`
}

// ErrNotAgreed is returned when an epoch was committed as not agreed.
var ErrNotAgreed = errors.New("worker: the epoch was not agreed")

// ErrNotMember is returned when an epoch of an elastic job leaves this
// worker out (it was counted as lost and came back too late).
var ErrNotMember = errors.New("worker: the job's world no longer includes this worker")

// ErrAborted is returned when the job was failed or aborted.
var ErrAborted = errors.New("worker: the job was aborted")

// ErrCancelled is returned when an operator cancelled the job.
var ErrCancelled = errors.New("worker: the job was cancelled")

// ErrReplaced is returned when this worker's lease lapsed (it was paused
// or cut off) and another process with its identity claimed the rank
// since: the newer one runs the rank, this one stops without a request.
var ErrReplaced = errors.New("worker: replaced by a newer worker of this identity")

// ErrDeleted is returned when the job was deleted.
var ErrDeleted = errors.New("worker: the job was deleted")

// epochPlan is this rank's plan under one epoch.
type epochPlan struct {
	epoch    uint64
	rank     uint64 // this worker's rank in the epoch's world
	world    uint64
	member   bool // false: the epoch's world does not include this worker
	hash     ir.Hash
	plan     *shard.RankPlan
	graph    *ir.Graph
	exec     runner.Executor
	reported time.Time
	barrier  *barrier
	put      uint64 // the highest step this rank reported ready under the epoch
	// fresh: exec holds the initial state (built, nothing run or loaded).
	fresh bool
}

// shardWritten is a shard this worker stored.
type shardWritten struct {
	epoch  uint64
	digest ir.Hash
	data   []byte // kept for the latest one: a same-world restore reads it here
}

type run struct {
	// replaced ends the run with ErrReplaced as its cause (keepClaim).
	replaced context.CancelCauseFunc
	cfg      Config
	log      *slog.Logger
	store    checkpoint.Store
	rank     uint64
	world    uint64
	models   map[ir.Hash]*ir.Model
	plans    map[uint64]*epochPlan
	// view is the last rank view planned, for viewKey: a replan that
	// keeps the graph, spec and rank plans it again without a new view.
	view    *shard.View
	viewKey viewKey
	// setup is what executors are told about the job.
	dataMode ir.DataMode
	// data is the job's datasets, initial weights and optimizer; losses
	// and val what the progress reports carry of the losses.
	data   *jobData
	losses []transport.StepLoss
	val    *transport.StepLoss
	seed   uint64
	// job is the job as last fetched. It is kept from step to step and
	// fetched again only when an announcement, a failed outcome or the
	// poll says it changed. A stale copy is safe: it can only hold less
	// progress, and a new epoch's boundary lies past every horizon the
	// leader granted, so a rank waits at the boundary until it fetches.
	job  *api.Job
	wake chan struct{} // announcements and outcomes: refresh the job
	// stepWake is wake for the supervisor of a long step (see step).
	stepWake chan struct{}
	granted  chan struct{} // a grant raised a horizon or an epoch was agreed
	grants   map[uint64]uint64
	// agreed holds the outcomes the leader announced (it announces only
	// committed ones), so a worker need not fetch the job to learn them.
	agreed  map[uint64]transport.Outcome
	mu      sync.Mutex
	res     Result
	started bool
	// early holds the step reports of epochs not planned yet, the latest
	// per rank and identity; prepare hands them to the epoch's barrier.
	early map[uint64]map[earlyKey]transport.StepReport
	// running is the epoch of the steps being run: reports of older
	// epochs are dropped.
	running uint64
	// watches is the job's step-report watch; it ends with the run.
	watchCtx context.Context
	watches  sync.WaitGroup
	standby  time.Time // when this worker found itself outside the world
	// hold is the model state the worker holds; holder the epoch whose
	// executor holds it.
	hold   recovery.Holding
	holder *epochPlan
	// last is the stats of the last step run (at lastStep), for the loss
	// a boundary checkpoint logs.
	last     runner.StepStats
	lastStep uint64
	// written are the shards this worker stored or queued for the
	// writer, by step (ckptMu); queue feeds the writer.
	ckptMu     sync.Mutex
	written    map[uint64]shardWritten
	queue      chan shardJob
	writerOnce sync.Once
	// bad are checkpoints found corrupt (by step): not read again.
	bad map[uint64]badCheckpoint
	// asked is when a recovery request was last published, by kind and
	// step, so requests repeat at the poll's pace (askMu).
	askMu sync.Mutex
	asked map[string]time.Time
	// failing counts consecutive failed coordinator fetches.
	failing int
	// claim is the rank's current claim (replaced when the lease is lost).
	claimMu sync.Mutex
	claim   *rendezvous.Claim
}

// badCheckpoint is a checkpoint this worker could not restore: corrupt,
// or a state that does not match; its request is repeated, the restore
// not tried again.
type badCheckpoint struct {
	kind   recovery.RequestKind
	reason string
}

// skipTo sends the step loop to another step: an epoch that takes the
// worker back, or the first step of an epoch that starts from a
// checkpoint.
type skipTo struct{ step uint64 }

func (s *skipTo) Error() string { return fmt.Sprintf("worker: go on at step %d", s.step) }

// retryable marks a failure that may pass (NATS, etcd or the
// coordinators unreachable): the worker waits and tries again.
type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

func transient(err error) error { return &retryable{err} }

// errFinished ends the step loop: the job is done.
var errFinished = errors.New("worker: the job is done")

func standbySince(t *time.Time) time.Time {
	if t.IsZero() {
		*t = time.Now()
	}
	return *t
}

// Run runs the worker until the job is done, failed, cancelled or
// deleted, an epoch is not agreed, or ctx ends (a drain: the current step
// finishes first).
func Run(ctx context.Context, cfg Config) (Result, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Poll == 0 {
		cfg.Poll = time.Second
	}
	if cfg.Executor == nil && cfg.ExecutorName != "" {
		x, err := Executors(cfg.ExecutorName, cfg.Transport, cfg.Job, log.With("identity", cfg.Identity))
		if err != nil {
			return Result{}, err
		}
		cfg.Executor = x
	}
	w := &run{cfg: cfg, log: log.With("job", cfg.Job, "identity", cfg.Identity), models: map[ir.Hash]*ir.Model{},
		plans: map[uint64]*epochPlan{}, wake: make(chan struct{}, 1), stepWake: make(chan struct{}, 1), granted: make(chan struct{}, 1), grants: map[uint64]uint64{}, agreed: map[uint64]transport.Outcome{},
		early: map[uint64]map[earlyKey]transport.StepReport{}, written: map[uint64]shardWritten{}, bad: map[uint64]badCheckpoint{}, asked: map[string]time.Time{},
		queue: make(chan shardJob, 1), store: cfg.Store}
	wctx, stop := context.WithCancel(ctx)
	w.watchCtx = wctx
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.replaced = cancel
	err := w.run(rctx)
	if cause := context.Cause(rctx); errors.Is(cause, ErrReplaced) {
		err = cause
	}
	// Executors seal their state when asked, not every step: once here,
	// in the executor that holds it (none after a step that failed half
	// way: its state is no step's).
	if h := w.holder; w.hold.Valid && h != nil && h.exec != nil {
		w.sealFinal(h.exec)
	}
	for _, p := range w.plans {
		if p.exec != nil {
			closeExecutor(p.exec)
		}
	}
	stop()
	w.watches.Wait()
	if errors.Is(err, errFinished) {
		err = nil
	}
	return w.res, err
}

func (w *run) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
	select {
	case w.stepWake <- struct{}{}:
	default:
	}
}

// backoff waits before the next try of something that failed: a growing,
// jittered pause up to 2 s, or until ctx ends.
func backoff(ctx context.Context, try int) error {
	d := min(50*time.Millisecond<<min(try, 6), 2*time.Second)
	d = d/2 + rand.N(d/2+1)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// retry runs f until it succeeds or ctx ends, logging the first failure
// of a run of them and the recovery. Each try gets transport.AttemptTimeout.
func (w *run) retry(ctx context.Context, what string, f func(context.Context) error) error {
	return w.retryFor(ctx, what, transport.AttemptTimeout, f)
}

// retryFor is retry with each try bounded by attempt.
func (w *run) retryFor(ctx context.Context, what string, attempt time.Duration, f func(context.Context) error) error {
	var since time.Time
	for try := 0; ; try++ {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := f(actx)
		cancel()
		if err == nil {
			w.waited(what, try)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return err // closed for good: nothing to wait for
		}
		w.waiting(what, err, try, &since)
		if err := backoff(ctx, try); err != nil {
			return err
		}
	}
}

// waiting records a failed try (try counts from 0) of what: it logs the
// first one and then ever more rarely (tries 2, 4, 8, ...: with the
// backoff's 2 s cap, about every doubling of the time spent), and tells
// Stats (WaitStats) what the worker waits on and why. since is when the
// run of failures began; waiting sets it on the first try.
func (w *run) waiting(what string, err error, try int, since *time.Time) {
	if try == 0 {
		*since = time.Now()
	}
	if try&(try+1) == 0 { // 0, 1, 3, 7, ...: the first and each doubling
		w.log.Warn("retrying", "what", what, "err", err, "tries", try+1, "since", since.Format(time.RFC3339))
	}
	if ws, ok := w.cfg.Stats.(WaitStats); ok {
		ws.Waiting(what, err, *since, try+1)
	}
}

// waited says a wait on what ended (after tries failures).
func (w *run) waited(what string, tries int) {
	if tries > 0 {
		w.log.Info("recovered", "what", what, "tries", tries+1)
		if ws, ok := w.cfg.Stats.(WaitStats); ok {
			ws.Waited(what)
		}
	}
}

func (w *run) run(ctx context.Context) error {
	cfg := w.cfg
	job, err := waitJob(ctx, cfg)
	if err != nil {
		return err
	}
	w.world = job.Spec.ShardSpec.WorldSize
	w.dataMode, w.seed = job.Spec.DataMode, job.Spec.Seed
	if err := w.prepareData(ctx, job); err != nil {
		return err
	}
	if w.store == nil {
		if w.store, err = checkpoint.WaitNATSStore(ctx, cfg.Transport.JetStream(), checkpoint.NATSConfig{}); err != nil {
			return err
		}
	}
	claim, err := w.claimRank(ctx)
	if err != nil {
		return err
	}
	w.claim = claim
	w.rank, w.res.Rank = claim.Rank, claim.Rank
	w.log = w.log.With("rank", w.rank)
	kctx, stopClaim := context.WithCancel(ctx)
	var keeping sync.WaitGroup
	keeping.Add(1)
	go func() {
		defer keeping.Done()
		w.keepClaim(kctx)
	}()
	defer func() {
		// Stop claiming again first: releasing ends the lease.
		stopClaim()
		keeping.Wait()
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		w.claimMu.Lock()
		c := w.claim
		w.claimMu.Unlock()
		if rerr := c.Release(rctx); rerr != nil {
			w.log.Warn("releasing the rank", "err", rerr)
		}
	}()

	// Listen before reporting anything, so nothing is missed. Outcomes
	// and grants act without a fetch, so they must be this incarnation
	// of the job's (a deleted job's signed grants replayed to a job
	// submitted again under its name are not).
	incarnation := job.Incarnation()
	for _, sub := range []func() (*nats.Subscription, error){
		func() (*nats.Subscription, error) {
			return cfg.Transport.SubscribeOutcomes(cfg.Job, func(o transport.Outcome) {
				if o.Incarnation != incarnation {
					w.log.Debug("an outcome of another incarnation of the job", "incarnation", o.Incarnation)
					return
				}
				w.mu.Lock()
				w.agreed[o.Epoch] = o
				w.mu.Unlock()
				if !o.Agreed {
					w.poke() // fetch the job for the committed reason
					return
				}
				select {
				case w.granted <- struct{}{}:
				default:
				}
			})
		},
		func() (*nats.Subscription, error) {
			return cfg.Transport.SubscribeAnnouncements(cfg.Job, func(a transport.Announcement) {
				if a.Kind != transport.KindGrant {
					w.poke()
					return
				}
				// A grant raises the epoch's horizon without a fetch.
				if a.Incarnation != incarnation {
					w.log.Debug("a grant of another incarnation of the job", "incarnation", a.Incarnation)
					return
				}
				w.mu.Lock()
				if a.StartStep > w.grants[a.Epoch] {
					w.grants[a.Epoch] = a.StartStep
				}
				w.mu.Unlock()
				select {
				case w.granted <- struct{}{}:
				default:
				}
			})
		},
	} {
		s, err := sub()
		if err != nil {
			return err
		}
		defer s.Unsubscribe()
	}

	// One watch of the step reports of every epoch, for the barriers.
	steps, err := cfg.Transport.WatchJobSteps(w.watchCtx, cfg.Job)
	if err != nil {
		return err
	}
	w.watches.Add(1)
	go func() {
		defer w.watches.Done()
		for r := range steps {
			w.stepReport(r)
		}
	}()

	// Start where every rank has finished (a replacement joins the
	// others there).
	step := max(job.Epochs[0].StartStep, job.LastStep+1)
	w.res.FirstStep = step
	for {
		p, err := w.await(ctx, step)
		var skip *skipTo
		if errors.As(err, &skip) {
			step = skip.step
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil // drained between steps
			}
			return err
		}
		ev := Event{Job: cfg.Job, Identity: cfg.Identity, Rank: p.rank, Epoch: p.epoch, Step: step, PlanHash: p.hash}
		if cfg.OnStep != nil {
			cfg.OnStep(ev)
		}
		t := time.Now()
		stats, err := w.step(ctx, p, step)
		if errors.Is(err, errAbandoned) {
			// A rollback superseded the step: what it left is not a
			// state of any timeline.
			w.hold, w.holder = recovery.Holding{Stateless: w.hold.Stateless}, nil
			w.res.Abandoned++
			w.log.Info("a rollback abandoned the step", "step", step)
			continue
		}
		if err != nil {
			w.hold.Valid = false
			return fmt.Errorf("worker: step %d: %w", step, err)
		}
		took := time.Since(t)
		if cfg.AfterStep != nil {
			cfg.AfterStep(ev, stats)
		}
		w.hold = recovery.Holding{Valid: true, Step: step, Epoch: p.epoch, Stateless: w.hold.Stateless}
		w.last, w.lastStep = stats, step
		if stats.HasLoss {
			w.res.Losses = append(w.res.Losses, stats.Loss)
			w.log.Debug("step", "step", step, "loss", stats.Loss)
		}
		if stats.DataFed > 0 {
			w.res.DataFetched, w.res.DataFed = stats.DataFetched, stats.DataFed
		}
		if stats.HasValLoss {
			w.res.Validations = append(w.res.Validations, Validation{Step: step, Loss: stats.ValLoss})
			w.log.Info("validated", "step", step, "val_loss", stats.ValLoss)
		}
		w.res.StepTime += took
		w.res.StepsRun++
		w.res.LastStep = step
		p.fresh = false
		done := transport.StepDone{Job: cfg.Job, Epoch: p.epoch, Rank: p.rank, Step: step, Nanos: took.Nanoseconds(), Identity: cfg.Identity, ClaimRevision: w.claimRevision()}
		done.Losses, done.Val = w.reportLosses(step, stats)
		if err := w.retry(ctx, "recording progress", func(c context.Context) error { return cfg.Transport.PutProgress(c, done) }); err != nil {
			return drained(ctx, err)
		}
		if spec := w.current().Spec; recovery.Due(step, spec.Every(), spec.Steps) {
			if err := w.checkpoint(ctx, p, step, stats); err != nil {
				return drained(ctx, err)
			}
		}
		w.observe(p, step)
		step++
		if ctx.Err() != nil {
			return nil
		}
	}
}

// drained returns nil for an error that a drain (ctx ending) caused.
func drained(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// errAbandoned is returned by step when a rollback superseded it.
var errAbandoned = errors.New("worker: the step was abandoned")

// step runs one step. It is cancelled when the job rolls back past it
// (the leader committed an epoch that runs this step again) or ends: a
// rank stuck in a collective with a rank that died is released that way.
func (w *run) step(ctx context.Context, p *epochPlan, step uint64) (runner.StepStats, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var superseded bool
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		// A step longer than two polls may be waiting for a rank that
		// is gone: from then on, look at the job on every announcement
		// and poll. Shorter steps cost nothing here, and the
		// announcements stay for await (stepWake is a copy of wake).
		t := time.NewTimer(2 * w.cfg.Poll)
		defer t.Stop()
		select {
		case <-done:
			return
		case <-t.C:
		}
		for {
			j, err := w.cfg.Coordinator.RecentJob(sctx, w.cfg.Job)
			if err == nil {
				w.mu.Lock()
				w.job = j
				w.mu.Unlock()
				if j.Final() || j.EpochFor(step).Epoch != p.epoch {
					superseded = true
					cancel()
					return
				}
			}
			t.Reset(w.cfg.Poll)
			select {
			case <-done:
				return
			case <-w.stepWake:
			case <-t.C:
			}
		}
	}()
	stats, err := p.exec.Step(sctx, step)
	if v, ok := p.exec.(runner.Validator); ok && err == nil && w.validates(step) {
		// Every rank validates at the same steps (its collectives pair
		// up), after the step and under the same cancellation.
		stats.ValLoss, stats.HasValLoss, err = v.Validate(sctx, step)
	}
	close(done)
	<-exited
	if superseded {
		w.poke()
		return stats, errAbandoned
	}
	return stats, err
}

// observe asks for a replan when the step saw dimensions outside its
// epoch's envelope.
func (w *run) observe(p *epochPlan, step uint64) {
	if w.cfg.Observe == nil {
		return
	}
	dims := w.cfg.Observe(step)
	if len(dims) == 0 {
		return
	}
	job, err := w.cfg.Coordinator.Job(context.Background(), w.cfg.Job)
	if err != nil {
		return
	}
	_, _, env := job.Inputs(p.epoch)
	var out []string
	for _, d := range slices.Sorted(maps.Keys(dims)) {
		if r, ok := env[d]; ok && (dims[d] < r.Min || dims[d] > r.Max) {
			out = append(out, fmt.Sprintf("%s=%d outside [%d,%d]", d, dims[d], r.Min, r.Max))
		}
	}
	if len(out) == 0 {
		return
	}
	req := transport.ReplanRequest{Job: w.cfg.Job, Epoch: p.epoch, Rank: p.rank, Step: step, Reason: strings.Join(out, ", "),
		DedupeID: fmt.Sprintf("%s/%d/%d", w.cfg.Identity, p.epoch, step), Dims: dims, Identity: w.cfg.Identity, ClaimRevision: w.claimRevision()}
	if err := w.cfg.Transport.PublishReplanRequest(req); err != nil {
		w.log.Warn("asking for a replan", "err", err)
		return
	}
	w.res.Replans++
}

// current returns the job as last fetched.
func (w *run) current() *api.Job {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.job
}

// fetch returns the job as the coordinators hold it. Failures are
// retryable, but for a deleted job.
func (w *run) fetch(ctx context.Context) (*api.Job, error) {
	j, err := w.cfg.Coordinator.RecentJob(ctx, w.cfg.Job)
	if errors.Is(err, api.ErrGone) {
		return nil, fmt.Errorf("%w: %v", ErrDeleted, err)
	}
	if err != nil {
		if w.failing == 0 {
			w.log.Warn("fetching the job", "err", err)
		}
		w.failing++
		return nil, transient(err)
	}
	if w.failing > 0 {
		w.log.Info("the coordinators answer again", "failures", w.failing)
		w.failing = 0
		if w.cfg.Stats != nil {
			w.cfg.Stats.Reconnected("coordinator")
		}
	}
	return j, nil
}

// final returns the error that ends the worker for a job that is over.
func final(job *api.Job, step uint64) error {
	switch job.Status {
	case api.StatusDone:
		return errFinished
	case api.StatusCancelled:
		return fmt.Errorf("%w: %s", ErrCancelled, job.Reason)
	case api.StatusFailed:
		if e := job.EpochFor(step); e.Outcome != nil && !e.Outcome.Agreed {
			return fmt.Errorf("%w: %s", ErrNotAgreed, job.Reason)
		}
		return fmt.Errorf("%w: %s", ErrAborted, job.Reason)
	}
	return nil
}

// await returns the plan to run step under, once the rank holds the
// state the step needs and the step may run.
func (w *run) await(ctx context.Context, step uint64) (*epochPlan, error) {
	poll := time.NewTicker(w.cfg.Poll)
	defer poll.Stop()
	w.mu.Lock()
	job := w.job
	w.mu.Unlock()
	fresh := job == nil
	select {
	case <-w.wake:
		fresh = true
	default:
	}
	// Failures that may pass are retried here; a run of them is logged
	// with backoff and shown as what the worker waits on.
	var since time.Time
	fails := 0
	failed := func(err error) {
		w.waiting("getting ready for a step", err, fails, &since)
		fails++
	}
	for {
		if fresh {
			j, err := w.fetch(ctx)
			if err != nil && !isRetryable(err) {
				return nil, err
			}
			if err != nil {
				failed(err)
			}
			if err == nil {
				job = j
				w.mu.Lock()
				w.job = j
				w.mu.Unlock()
			}
			fresh = false
		}
		var changed <-chan struct{} // nil until the job is known
		if job != nil {
			if err := final(job, step); err != nil {
				return nil, err
			}
			p, ready, err := w.ready(ctx, job, step)
			if err != nil && !isRetryable(err) {
				return nil, err
			}
			if ready {
				w.waited("getting ready for a step", fails)
				return p, nil
			}
			if err != nil {
				failed(fmt.Errorf("step %d: %w", step, err))
			}
			if p != nil && p.barrier != nil {
				changed = p.barrier.changed
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-w.wake:
			fresh = true
		case <-poll.C:
			fresh = true
		case <-changed:
		case <-w.granted:
		}
	}
}

func isRetryable(err error) bool {
	var r *retryable
	return errors.As(err, &r)
}

// ready plans every epoch from the step's on, brings the state the step
// needs into the step's epoch, and reports the rank ready for the step
// when the job's horizon allows; it says whether every rank is.
func (w *run) ready(ctx context.Context, job *api.Job, step uint64) (*epochPlan, bool, error) {
	e := job.EpochFor(step)
	// Plan and report every epoch from e on as soon as it exists.
	for i := e.Epoch; i < uint64(len(job.Epochs)); i++ {
		if _, err := w.prepare(ctx, job, i); err != nil {
			return nil, false, err
		}
	}
	w.mu.Lock()
	p := w.plans[e.Epoch]
	w.mu.Unlock()
	v := w.gateView(job, e, step, p)
	adm, outcome := admit(v)
	switch adm {
	case admitWait:
		return p, false, nil
	case admitRejoin:
		return nil, false, &skipTo{step: v.rejoin}
	case admitNotMember:
		return nil, false, fmt.Errorf("%w: epoch %d from step %d", ErrNotMember, e.Epoch, e.StartStep)
	case admitNotAgreed:
		return nil, false, fmt.Errorf("%w: %s", ErrNotAgreed, job.Reason)
	}
	holders, err := w.holders(ctx, job, e, p, outcome)
	if err != nil {
		return p, false, err
	}
	// Only the holders' step reports pass the barrier, and only their
	// contributions count in the collectives.
	p.barrier.setHolders(holders)
	if holders != nil {
		w.cfg.Transport.SetRoster(w.cfg.Job, holders)
	}
	if ok, err := w.holdState(ctx, job, p, step); !ok || err != nil {
		return p, false, err
	}
	w.mu.Lock()
	grant := w.grants[e.Epoch]
	w.mu.Unlock()
	if ok, _ := mayStep(job, step, grant); !ok {
		return p, false, nil
	}
	if p.put < step {
		r := transport.StepReport{Job: w.cfg.Job, Epoch: e.Epoch, Rank: p.rank, Step: step, PlanHash: p.hash, Identity: w.cfg.Identity, ClaimRevision: w.claimRevision()}
		if err := w.cfg.Transport.PutStep(ctx, r); err != nil {
			return p, false, transient(err)
		}
		p.put = step
	}
	return p, p.barrier.ready(step), nil
}

// gateView is what this worker knows of its own about step under epoch e,
// where it holds plan p, for the gate (gate.go).
func (w *run) gateView(job *api.Job, e *api.Epoch, step uint64, p *epochPlan) gateView {
	v := gateView{job: job, step: step, member: p.member}
	w.mu.Lock()
	for i := e.Epoch + 1; !p.member && i < uint64(len(job.Epochs)); i++ {
		if q := w.plans[i]; q != nil && q.member {
			v.rejoin = job.Epochs[i].StartStep
			break
		}
	}
	if o, ok := w.agreed[e.Epoch]; ok && o.Agreed {
		v.agreed = &api.Outcome{Agreed: true, Holders: o.Holders}
	}
	w.mu.Unlock()
	switch {
	case p.member:
		w.standby = time.Time{}
	case v.rejoin == 0:
		v.standbyOver = w.cfg.Standby == 0 || time.Since(standbySince(&w.standby)) > w.cfg.Standby
	}
	return v
}

// holders returns, by rank, the identities whose step reports count under
// epoch e, agreed by outcome: the job's, the whole job's when it was
// fetched with the recent epochs' holders only and an older epoch is to
// run, or the announced outcome's before the committed one is fetched.
func (w *run) holders(ctx context.Context, job *api.Job, e *api.Epoch, p *epochPlan, outcome *api.Outcome) ([]string, error) {
	holders := job.Holders(e.Epoch)
	if holders == nil && e.Outcome != nil && e.Epoch+2 < uint64(len(job.Epochs)) && !p.barrier.hasHolders() {
		full, err := w.cfg.Coordinator.Job(ctx, w.cfg.Job)
		if err != nil {
			return nil, transient(err)
		}
		holders = full.Holders(e.Epoch)
	}
	if holders == nil && e.Outcome == nil {
		holders = outcome.Holders
	}
	return holders, nil
}

// viewKey identifies a rank view: the model (one *ir.Model per IR hash),
// the shard spec's hash and the rank.
type viewKey struct {
	model *ir.Model
	spec  ir.Hash
	rank  uint64
}

// prepare plans this rank under epoch i and reports the hash, once.
func (w *run) prepare(ctx context.Context, job *api.Job, i uint64) (*epochPlan, error) {
	w.mu.Lock()
	p := w.plans[i]
	w.mu.Unlock()
	if p != nil {
		return p, nil
	}
	spec, members := job.World(i)
	rank, world := w.rank, spec.WorldSize
	if members != nil {
		k := slices.Index(members, w.cfg.Identity)
		if k < 0 {
			p = &epochPlan{epoch: i}
			w.mu.Lock()
			w.plans[i] = p
			w.mu.Unlock()
			return p, nil
		}
		rank = uint64(k)
	}
	if uint64(len(job.Epochs[i].Expected)) != world {
		// A job fetched with the recent epochs' hashes only, and an old
		// epoch to run: fetch it whole.
		full, err := w.cfg.Coordinator.Job(ctx, w.cfg.Job)
		if err != nil {
			return nil, transient(err)
		}
		if i >= uint64(len(full.Epochs)) || uint64(len(full.Epochs[i].Expected)) != world {
			return nil, fmt.Errorf("worker: epoch %d has no expected plan hash for each of %d ranks", i, world)
		}
		job = full
	}
	e := &job.Epochs[i]
	model, err := w.model(ctx, job, i)
	if err != nil {
		return nil, err
	}
	_, opts, _ := job.Inputs(i)
	// The packer may run steps on the worker's goroutines; the plan is
	// byte-identical with them or without (planner.Options.Spawn).
	opts.Spawn = planner.Goroutines
	if w.cfg.AdjustOptions != nil {
		w.cfg.AdjustOptions(&opts)
	}
	t := time.Now()
	var rp *shard.RankPlan
	key := viewKey{model: model, spec: spec.Hash(), rank: rank}
	if w.view != nil && w.viewKey == key {
		// Same graph, spec and rank as the epoch before: keep the view.
		rp, err = shard.PlanView(w.view, spec, opts)
	} else {
		rp, err = shard.PlanRank(model, spec, rank, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: planning rank %d under epoch %d: %w", rank, i, err)
	}
	w.view, w.viewKey = rp.View, key
	if i == 0 || w.res.PlanTime == 0 {
		w.res.PlanTime = time.Since(t)
	}
	p = &epochPlan{epoch: i, rank: rank, world: world, member: true, hash: rp.Plan.PlanHash, plan: rp, graph: rp.View.Graph, barrier: newBarrier(world, e.Expected)}
	r := transport.PlanReport{Job: w.cfg.Job, Epoch: i, Rank: rank, Identity: w.cfg.Identity, PlanHash: p.hash, ClaimRevision: w.claimRevision()}
	if err := w.cfg.Transport.Report(ctx, r); err != nil {
		if errors.Is(err, transport.ErrConflict) {
			return nil, fmt.Errorf("worker: reporting the plan hash of epoch %d: %w", i, err)
		}
		return nil, transient(fmt.Errorf("worker: reporting the plan hash of epoch %d: %w", i, err))
	}
	w.mu.Lock()
	for _, r := range w.early[i] {
		p.barrier.add(r)
	}
	delete(w.early, i)
	w.plans[i] = p
	w.mu.Unlock()
	p.reported = time.Now()
	w.log.Debug("planned and reported", "epoch", i, "plan_hash", p.hash.Short())
	return p, nil
}

// model returns the job's IR under epoch i (fetched once per IR hash).
func (w *run) model(ctx context.Context, job *api.Job, i uint64) (*ir.Model, error) {
	h := job.Epochs[0].IRHash
	for k := uint64(0); k <= i; k++ {
		if !job.Epochs[k].IRHash.IsZero() {
			h = job.Epochs[k].IRHash
		}
	}
	if m, ok := w.models[h]; ok && !h.IsZero() {
		return m, nil
	}
	data, err := w.cfg.Coordinator.IR(ctx, w.cfg.Job, i)
	if err != nil {
		return nil, transient(fmt.Errorf("worker: fetching the IR of epoch %d: %w", i, err))
	}
	m, err := ir.DecodeCBOR(data)
	if err != nil {
		return nil, fmt.Errorf("worker: the IR of epoch %d: %w", i, err)
	}
	if !h.IsZero() {
		w.models[h] = m
	}
	return m, nil
}

func closeExecutor(x runner.Executor) {
	if c, ok := x.(runner.Closer); ok {
		c.Close()
	}
}

func newExecutor(cfg Config, g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
	if cfg.Executor != nil {
		return cfg.Executor(g, p)
	}
	return runner.Default(g, p)
}

// waitJob fetches the job until the coordinators have it: a worker may
// start before its job is submitted, and a coordinator that restarted
// may not know the leader yet. A deleted job is final.
func waitJob(ctx context.Context, cfg Config) (*api.Job, error) {
	for try := 0; ; try++ {
		j, err := cfg.Coordinator.RecentJob(ctx, cfg.Job)
		if err == nil {
			return j, nil
		}
		if errors.Is(err, api.ErrGone) {
			return nil, fmt.Errorf("%w: %v", ErrDeleted, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(cfg.Poll):
		}
	}
}

// stepReport hands r to its epoch's barrier, or keeps it until the epoch
// is planned.
func (w *run) stepReport(r transport.StepReport) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.Epoch < w.running {
		return
	}
	if p := w.plans[r.Epoch]; p != nil {
		if p.barrier != nil {
			p.barrier.add(r)
		}
		return
	}
	// No rank reports a step of an epoch past the next one this worker
	// knows of (every epoch's agreement waits for this worker's report):
	// what claims to is dropped, so nobody can make early grow.
	if w.job != nil && r.Epoch > uint64(len(w.job.Epochs)) {
		return
	}
	if w.early[r.Epoch] == nil {
		w.early[r.Epoch] = map[earlyKey]transport.StepReport{}
	}
	w.early[r.Epoch][earlyKey{r.Rank, r.Identity}] = r // the stream's latest is the stored one
}

// earlyKey is a rank and the identity that reported for it.
type earlyKey struct {
	rank     uint64
	identity string
}

// barrier is the go/no-go barrier before each step of one epoch: rank r
// has passed step s once its holder (the identity the epoch's outcome
// names for it) reported s or a later step with its expected hash. What
// other identities store under the rank does not count.
type barrier struct {
	mu       sync.Mutex
	expected []ir.Hash
	at       []map[string]uint64 // per rank and identity, the highest step reported
	holders  []string            // by rank, once the epoch is agreed
	changed  chan struct{}
}

func newBarrier(world uint64, expected []ir.Hash) *barrier {
	b := &barrier{expected: expected, at: make([]map[string]uint64, world), changed: make(chan struct{}, 1)}
	for r := range b.at {
		b.at[r] = map[string]uint64{}
	}
	return b
}

func (b *barrier) add(r transport.StepReport) {
	b.mu.Lock()
	if r.Rank < uint64(len(b.at)) && r.PlanHash == b.expected[r.Rank] && r.Step > b.at[r.Rank][r.Identity] {
		b.at[r.Rank][r.Identity] = r.Step
	}
	b.mu.Unlock()
	b.signal()
}

func (b *barrier) signal() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// setHolders names the identities whose reports count, by rank (nil: an
// outcome that recorded none, whose ranks' reports count from anyone).
func (b *barrier) setHolders(h []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holders == nil && h != nil {
		b.holders = h
		b.signal()
	}
}

// hasHolders says whether the barrier knows its ranks' holders.
func (b *barrier) hasHolders() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.holders != nil
}

// reported says whether identity reported any step for rank.
func (b *barrier) reported(rank uint64, identity string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return rank < uint64(len(b.at)) && b.at[rank][identity] > 0
}

func (b *barrier) ready(step uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for r, by := range b.at {
		var s uint64
		if len(b.holders) == len(b.at) {
			s = by[b.holders[r]]
		} else {
			for _, x := range by {
				s = max(s, x)
			}
		}
		if s < step {
			return false
		}
	}
	return true
}

// sealFinal records the sealed hash of the state x holds as the state the
// run ended with.
func (w *run) sealFinal(x runner.Executor) {
	c, ok := x.(runner.StateCarrier)
	if !ok {
		return
	}
	if h, err := c.StateHash(); err == nil {
		w.res.LastState = h
	} else {
		w.log.Warn("sealing the final state", "err", err)
	}
}
