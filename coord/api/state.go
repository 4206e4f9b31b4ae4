package api

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/replan"
	"github.com/tmmu/tmmu/shard"
)

// JobSpec is what an operator submits: the graph, how it is sharded and
// planned, and how many steps to run.
type JobSpec struct {
	Name string `json:"name" cbor:"name"`
	// ModelDigest is the SHA-256 of the global IR's canonical CBOR, which
	// the IR store (IRBucket) holds; Model is the IR itself in entries
	// committed before IRs moved out of the raft log.
	Model        []byte              `json:"-" cbor:"model,omitempty"`
	ModelDigest  ir.Hash             `json:"model_digest" cbor:"model_digest,omitempty"`
	ShardSpec    shard.Spec          `json:"shard_spec" cbor:"shard_spec"` // resolved
	ArenaConfig  planner.ArenaConfig `json:"arena_config,omitempty" cbor:"arena_config"`
	Mode         planner.Mode        `json:"mode,omitempty" cbor:"mode"`
	Strategy     planner.Strategy    `json:"strategy" cbor:"strategy"`
	ReplayToken  ir.Hash             `json:"replay_token" cbor:"replay_token"`
	ReplanPolicy replan.Policy       `json:"replan_policy" cbor:"replan_policy"`
	Steps        uint64              `json:"steps" cbor:"steps"` // steps to run; 0 = until stopped
	// Window is how many steps ranks may run beyond the committed
	// progress (default DefaultWindow). A replan's boundary is always
	// past that horizon, so no rank can have started it under the old
	// epoch.
	Window uint64 `json:"window" cbor:"window"`
	// Source, when set, is the generator the IR came from, with the
	// job's dynamic dimensions: a shape replan regenerates the IR at the
	// new envelope. Jobs submitted as a bare IR replan only for operator
	// requests and membership changes.
	Source *ModelSource `json:"source,omitempty" cbor:"source,omitempty"`
	// Elastic lets the job shrink when ranks leave for good: the leader
	// replans it for the live ranks (see RunAgreement).
	Elastic bool `json:"elastic,omitempty" cbor:"elastic"`
	// DataMode is how tensor data may be handled: "standard" (or empty),
	// "confidential" or "regulated". The last two forbid debug fills and
	// keep tensor-derived values (the loss) out of logs, metrics and
	// results.
	DataMode ir.DataMode `json:"data_mode,omitempty" cbor:"data_mode,omitempty"`
	// CheckpointEvery is the checkpoint interval in steps: every rank
	// checkpoints the state after each multiple of it, after the last
	// step and at every epoch boundary (default DefaultCheckpointEvery).
	CheckpointEvery uint64 `json:"checkpoint_every,omitempty" cbor:"checkpoint_every,omitempty"`
	// CheckpointKeep is how many committed checkpoints the job keeps
	// (default DefaultCheckpointKeep); older ones are garbage-collected.
	CheckpointKeep uint64 `json:"checkpoint_keep,omitempty" cbor:"checkpoint_keep,omitempty"`
	// Seed is the job's seed: the batch of a step and every random draw
	// derive from (Seed, step, rank), so a rank that goes back to a
	// checkpoint computes the same steps again.
	Seed uint64 `json:"seed,omitempty" cbor:"seed,omitempty"`
	// Data is what the job trains on (nil: the synthetic counting task);
	// Weights the initial weights (nil: the default initialisation);
	// Optimizer its optimizer (nil: DefaultOptimizer).
	Data      *DataSpec  `json:"data,omitempty" cbor:"data,omitempty"`
	Weights   *DataRef   `json:"weights,omitempty" cbor:"weights,omitempty"`
	Optimizer *Optimizer `json:"optimizer,omitempty" cbor:"optimizer,omitempty"`
}

// Checkpoint defaults.
const (
	DefaultCheckpointEvery = 50
	DefaultCheckpointKeep  = 3
)

// Every returns the checkpoint interval (the default for 0).
func (s *JobSpec) Every() uint64 {
	if s.CheckpointEvery == 0 {
		return DefaultCheckpointEvery
	}
	return s.CheckpointEvery
}

// Keep returns how many checkpoints are kept (the default for 0).
func (s *JobSpec) Keep() uint64 {
	if s.CheckpointKeep == 0 {
		return DefaultCheckpointKeep
	}
	return s.CheckpointKeep
}

// DefaultWindow is JobSpec.Window's default.
const DefaultWindow = 2

// JobStatus is where a job stands.
type JobStatus string

// Job statuses.
const (
	StatusAgreeing  JobStatus = "agreeing"  // the current epoch waits for every rank's plan hash
	StatusRunning   JobStatus = "running"   // the current epoch is agreed; ranks run steps
	StatusDone      JobStatus = "done"      // every step ran and the last checkpoint is committed
	StatusFailed    JobStatus = "failed"    // a committed failure (plan mismatch, abort, a restore that does not match)
	StatusCancelled JobStatus = "cancelled" // an operator cancelled the job
)

// Job is a job as the replicated state holds it.
type Job struct {
	Spec          JobSpec   `json:"spec" cbor:"spec"`
	IRHash        ir.Hash   `json:"ir_hash" cbor:"ir_hash"`
	ShardSpecHash ir.Hash   `json:"shard_spec_hash" cbor:"shard_spec_hash"`
	Status        JobStatus `json:"status" cbor:"status"`
	Reason        string    `json:"reason,omitempty" cbor:"reason"`
	Epochs        []Epoch   `json:"epochs" cbor:"epochs"`
	// LastStep is the highest step every rank has finished (the steps
	// are numbered from 1), as recorded by the leader. A rollback sets
	// it back to the checkpoint's step.
	LastStep uint64 `json:"last_step" cbor:"last_step"`
	// Checkpoints are the committed checkpoints the job keeps, oldest
	// first (at most Spec.Keep()).
	Checkpoints []Checkpoint `json:"checkpoints,omitempty" cbor:"checkpoints,omitempty"`
	// Dropped are the last checkpoints dropped because an object of
	// theirs was corrupt (at most MaxDropped), with the reason.
	Dropped []Checkpoint `json:"dropped_checkpoints,omitempty" cbor:"dropped,omitempty"`
	// Paused, when set, says why the job waits (the checkpoint store is
	// full): ranks run no step past PausedAt (the checkpoint that could
	// not be stored) until it clears, which the next committed checkpoint
	// does.
	Paused   string `json:"paused,omitempty" cbor:"paused,omitempty"`
	PausedAt uint64 `json:"paused_at,omitempty" cbor:"paused_at,omitempty"`
	// Loss is the training loss of the newest step every rank reported
	// one for (the mean over the ranks); Validations the validation
	// losses (means over the ranks), oldest first, at most
	// MaxValidations. Neither in confidential and regulated jobs.
	Loss        *StepLoss  `json:"loss,omitempty" cbor:"loss,omitempty"`
	Validations []StepLoss `json:"validations,omitempty" cbor:"validations,omitempty"`
}

// StepLoss is a loss after a step.
type StepLoss struct {
	Step uint64  `json:"step" cbor:"step"`
	Loss float64 `json:"loss" cbor:"loss"`
}

// MaxValidations bounds Job.Validations.
const MaxValidations = 64

// MaxDropped bounds Job.Dropped.
const MaxDropped = 8

// Checkpoint is a committed checkpoint: every rank of the world of Epoch
// stored its shard of the state after Step.
type Checkpoint struct {
	Step   uint64            `json:"step" cbor:"step"`
	Epoch  uint64            `json:"epoch" cbor:"epoch"`
	World  uint64            `json:"world" cbor:"world"`
	Shards []CheckpointShard `json:"shards" cbor:"shards"` // by rank
	// Bytes is the sum of the shards' sizes; WriteNanos the slowest
	// rank's time to store its shard.
	Bytes      uint64 `json:"bytes" cbor:"bytes"`
	WriteNanos int64  `json:"write_nanos" cbor:"write_nanos"`
	// CommittedAt is the leader's clock (Unix ns) when it proposed it.
	CommittedAt int64 `json:"committed_at_unix_nano" cbor:"committed_at"`
	// Reason says why it was dropped (Job.Dropped only).
	Reason string `json:"reason,omitempty" cbor:"reason,omitempty"`
}

// CheckpointShard is one rank's object of a checkpoint.
type CheckpointShard struct {
	Rank      uint64  `json:"rank" cbor:"rank"`
	Identity  string  `json:"identity" cbor:"identity"`
	Digest    ir.Hash `json:"digest" cbor:"digest"`
	StateHash ir.Hash `json:"state_hash" cbor:"state_hash"`
	Bytes     uint64  `json:"bytes" cbor:"bytes"`
}

// Restore makes an epoch start from a checkpoint instead of from the
// state the epoch before left: the state after Step (0: the initial
// state). The epoch's StartStep is Step+1. A Rollback sends the job back
// to Step (the committed progress too); otherwise the epoch restores at
// its boundary, from the checkpoint the world before it writes there
// (an elastic job that grows).
type Restore struct {
	Step     uint64 `json:"step" cbor:"step"`
	Rollback bool   `json:"rollback,omitempty" cbor:"rollback,omitempty"`
}

// Current returns the job's latest epoch.
func (j *Job) Current() *Epoch { return &j.Epochs[len(j.Epochs)-1] }

// Final reports whether the job is over: done, failed or cancelled.
func (j *Job) Final() bool {
	return j.Status == StatusDone || j.Status == StatusFailed || j.Status == StatusCancelled
}

// Checkpoint returns the committed checkpoint of step, or nil.
func (j *Job) Checkpoint(step uint64) *Checkpoint {
	for i := range j.Checkpoints {
		if j.Checkpoints[i].Step == step {
			return &j.Checkpoints[i]
		}
	}
	return nil
}

// LastCheckpoint returns the newest committed checkpoint, or nil.
func (j *Job) LastCheckpoint() *Checkpoint {
	if len(j.Checkpoints) == 0 {
		return nil
	}
	return &j.Checkpoints[len(j.Checkpoints)-1]
}

// Timeline returns the latest epoch that rolled the job back (0 when
// none did): progress reported under earlier epochs belongs to an
// abandoned timeline.
func (j *Job) Timeline() uint64 {
	for i := len(j.Epochs) - 1; i > 0; i-- {
		if r := j.Epochs[i].Restore; r != nil && r.Rollback {
			return uint64(i)
		}
	}
	return 0
}

// Epoch is one plan epoch of a job: the plan every rank must hold.
type Epoch struct {
	Epoch uint64 `json:"epoch" cbor:"epoch"`
	// StartStep is the first step run under this epoch.
	StartStep      uint64    `json:"start_step" cbor:"start_step"`
	Reason         string    `json:"reason" cbor:"reason"`
	GlobalPlanHash ir.Hash   `json:"global_plan_hash" cbor:"global_plan_hash"`
	Expected       []ir.Hash `json:"expected" cbor:"expected"` // per rank
	// Outcome is nil until the leader commits the agreement outcome.
	Outcome *Outcome `json:"outcome,omitempty" cbor:"outcome"`
	// The plan inputs an epoch changes; empty means as in the epoch
	// before (the first epoch's come from the spec).
	Model       []byte                 `json:"-" cbor:"model,omitempty"`                             // a regenerated IR, canonical CBOR (older entries)
	ModelDigest ir.Hash                `json:"model_digest,omitempty" cbor:"model_digest,omitempty"` // a regenerated IR in the IR store
	IRHash      ir.Hash                `json:"ir_hash" cbor:"ir_hash"`
	ArenaConfig planner.ArenaConfig    `json:"arena_config,omitempty" cbor:"arena_config,omitempty"`
	Strategy    planner.Strategy       `json:"strategy,omitempty" cbor:"strategy,omitempty"`
	Envelope    map[string]ir.DimRange `json:"envelope,omitempty" cbor:"envelope,omitempty"`
	// ShardSpec and Members change the world (an elastic job that lost
	// ranks): the resolved spec for the new world size, and the
	// identities of its ranks in rank order.
	ShardSpec *shard.Spec `json:"shard_spec,omitempty" cbor:"shard_spec,omitempty"`
	Members   []string    `json:"members,omitempty" cbor:"members,omitempty"`
	// Restore, when set, makes the epoch start from a checkpoint.
	Restore *Restore `json:"restore,omitempty" cbor:"restore,omitempty"`
	// Requests are the ids of the operator replan requests the epoch
	// answers: a retried request (on a new leader, say) is answered with
	// this epoch.
	Requests []string `json:"requests,omitempty" cbor:"requests,omitempty"`
	// CommittedAt is the leader's clock (Unix ns) when it proposed the
	// epoch; it is data, not read by Apply.
	CommittedAt int64 `json:"committed_at_unix_nano" cbor:"committed_at"`
}

// Inputs returns the plan inputs of epoch i: its IR and planner
// options, as changed by the epochs up to i.
func (j *Job) Inputs(i uint64) (model ModelRef, opts planner.Options, env map[string]ir.DimRange) {
	model, opts = ModelRef{Inline: j.Spec.Model, Digest: j.Spec.ModelDigest}, j.Spec.PlanOptions()
	for k := uint64(0); k <= i && k < uint64(len(j.Epochs)); k++ {
		e := &j.Epochs[k]
		if e.Model != nil || !e.ModelDigest.IsZero() {
			model = ModelRef{Inline: e.Model, Digest: e.ModelDigest}
		}
		if e.ArenaConfig != nil {
			opts.Arenas = e.ArenaConfig
		}
		if e.Strategy != "" {
			opts.Strategy = e.Strategy
		}
		if e.Envelope != nil {
			env = e.Envelope
		}
	}
	return model, opts, env
}

// World returns the shard spec of epoch i and the identities of its ranks
// in rank order (nil: the ranks are the rendezvous ranks).
func (j *Job) World(i uint64) (*shard.Spec, []string) {
	spec, members := &j.Spec.ShardSpec, []string(nil)
	for k := uint64(0); k <= i && k < uint64(len(j.Epochs)); k++ {
		if e := &j.Epochs[k]; e.ShardSpec != nil {
			spec, members = e.ShardSpec, e.Members
		}
	}
	return spec, members
}

// EpochFor returns the epoch that runs step s: the latest whose StartStep
// is at most s.
func (j *Job) EpochFor(s uint64) *Epoch {
	for i := len(j.Epochs) - 1; i > 0; i-- {
		if j.Epochs[i].StartStep <= s {
			return &j.Epochs[i]
		}
	}
	return &j.Epochs[0]
}

// RowsBefore is how many global rows of its data stream the job
// consumed before step s (steps from 1) in the lineage that epoch i
// runs: every step j < s counts batch rows a rank times the world size
// of the epoch, of those up to i, that ran it last (the latest one whose
// StartStep is at most j: a rollback's epoch runs its steps again). With
// one world size throughout it is (s−1)·batch·world.
func (j *Job) RowsBefore(i, s, batch uint64) uint64 {
	i = min(i, uint64(len(j.Epochs))-1)
	starts := make([]uint64, 0, i+1)
	for k := range i + 1 {
		starts = append(starts, max(j.Epochs[k].StartStep, 1))
	}
	bounds := slices.Clone(starts)
	slices.Sort(bounds)
	bounds = slices.Compact(append(bounds, s))
	rows := uint64(0)
	for n, a := range bounds {
		if a >= s || n+1 == len(bounds) {
			break
		}
		b := min(bounds[n+1], s)
		// The epoch that ran steps [a, b) last.
		last := uint64(0)
		for k, st := range starts {
			if st <= a {
				last = uint64(k)
			}
		}
		rows += (b - a) * batch * j.WorldSize(last)
	}
	return rows
}

// Incarnation names this incarnation of the job: the leader's clock when
// it committed the submission. Signed announcements carry it, so those of
// a deleted job do not apply to one submitted again under its name.
func (j *Job) Incarnation() int64 { return j.Epochs[0].CommittedAt }

// Holders returns, by rank, the identities whose reports count under
// epoch i: the epoch's members (an elastic world), else the holders its
// committed outcome recorded; nil while neither is known.
func (j *Job) Holders(i uint64) []string {
	if i >= uint64(len(j.Epochs)) {
		return nil
	}
	if _, members := j.World(i); members != nil {
		return members
	}
	if o := j.Epochs[i].Outcome; o != nil {
		return o.Holders
	}
	return nil
}

// HolderOf says whether identity may report for rank under epoch i: it
// is the rank's holder. Under an epoch that is not agreed yet (no step
// runs under it) nobody may, and under one whose outcome was committed
// before holders were recorded anybody may. decided is false when the
// epoch's holders are not known here yet (no such epoch, or no outcome):
// a node that trails the log may learn them later.
func (j *Job) HolderOf(i, rank uint64, identity string) (ok, decided bool) {
	h := j.Holders(i)
	if h == nil {
		known := i < uint64(len(j.Epochs)) && j.Epochs[i].Outcome != nil
		return known, known
	}
	return rank < uint64(len(h)) && h[rank] == identity, true
}

// Horizon returns the last step ranks may run under epoch i: the
// committed progress plus the window, and never the next epoch's
// boundary or beyond.
func (j *Job) Horizon(i uint64) uint64 {
	w := j.Spec.Window
	if w == 0 {
		w = DefaultWindow
	}
	h := j.LastStep + w
	if i+1 < uint64(len(j.Epochs)) {
		h = min(h, j.Epochs[i+1].StartStep-1)
	}
	return h
}

// Outcome is the committed result of an epoch's agreement.
type Outcome struct {
	Agreed     bool       `json:"agreed" cbor:"agreed"`
	Mismatches []Mismatch `json:"mismatches,omitempty" cbor:"mismatches"`
	Missing    []uint64   `json:"missing,omitempty" cbor:"missing"`
	Reason     string     `json:"reason,omitempty" cbor:"reason"`
	// At is the leader's clock (Unix ns) when it proposed the outcome.
	At int64 `json:"at_unix_nano" cbor:"at"`
	// Holders are, by rank, the identities whose plan reports counted:
	// each held the rank's etcd claim at the revision it named. Only
	// their step, progress, checkpoint and recovery reports count for
	// the rank under the epoch.
	Holders []string `json:"holders,omitempty" cbor:"holders,omitempty"`
}

// Mismatch is a rank whose plan hash differs from the expected one.
type Mismatch struct {
	Rank     uint64  `json:"rank" cbor:"rank"`
	Expected ir.Hash `json:"expected" cbor:"expected"`
	Got      ir.Hash `json:"got" cbor:"got"`
}

// State is the replicated state: every job by name, the HTTP addresses of
// voters added after the cluster was bootstrapped, and the jobs deleted
// (name → the leader's clock, Unix ns, when it proposed the deletion), so
// that their workers learn the deletion is final.
type State struct {
	Jobs    map[string]*Job  `json:"jobs" cbor:"jobs"`
	Peers   map[string]Peer  `json:"peers,omitempty" cbor:"peers"`
	Deleted map[string]int64 `json:"deleted,omitempty" cbor:"deleted,omitempty"`
}

// Command kinds.
const (
	CmdSubmit     = "submit"     // a new job with its first epoch
	CmdOutcome    = "outcome"    // an epoch's agreement outcome
	CmdProgress   = "progress"   // the highest step every rank finished
	CmdEpoch      = "epoch"      // a new epoch (replan)
	CmdFail       = "fail"       // fail a job with a reason
	CmdPeer       = "peer"       // record (or, with Remove, forget) a voter's addresses
	CmdCheckpoint = "checkpoint" // a complete checkpoint
	CmdPause      = "pause"      // pause a job with a reason (or, with Remove, resume it)
	CmdCancel     = "cancel"     // cancel a job
	CmdDelete     = "delete"     // delete a job
)

// Command is one replicated log entry. Commands are idempotent and keyed
// by (job, epoch): applying one twice leaves the state as applying it once,
// so a client that lost track of an Apply (leadership changed under it)
// retries safely.
type Command struct {
	Kind    string   `cbor:"kind"`
	Job     string   `cbor:"job"`
	Epoch   uint64   `cbor:"epoch"`
	Spec    *JobSpec `cbor:"spec,omitempty"`
	IRHash  ir.Hash  `cbor:"ir_hash"`
	SSHash  ir.Hash  `cbor:"shard_spec_hash"`
	New     *Epoch   `cbor:"new,omitempty"`
	Outcome *Outcome `cbor:"outcome,omitempty"`
	Step    uint64   `cbor:"step"`
	Reason  string   `cbor:"reason"`
	Peer    *Peer    `cbor:"peer,omitempty"`
	Remove  bool     `cbor:"remove"`
	// Fence keeps an epoch command's boundary as given (the first step
	// a lost rank never reported ready, which no rank can have run).
	// Leaders no longer send it — an elastic shrink rolls back to a
	// checkpoint — but entries in existing logs may carry it.
	Fence bool `cbor:"fence"`
	// Checkpoint is a checkpoint command's manifest.
	Checkpoint *Checkpoint `cbor:"checkpoint,omitempty"`
	// Drop, with a rollback epoch, drops the checkpoint of that step
	// first (an object of it was corrupt), atomically with the rollback.
	Drop *uint64 `cbor:"drop,omitempty"`
	// At is the leader's clock (Unix ns) for commands that record a
	// time (deletion).
	At int64 `cbor:"at,omitempty"`
	// Loss and Val, with a progress command, are the ranks' mean training
	// loss of its step and their newest common validation loss.
	Loss *StepLoss `cbor:"loss,omitempty"`
	Val  *StepLoss `cbor:"val,omitempty"`
}

// Result is what applying a command returns: Changed is false for a
// command whose effect was already there (a retry); Err names a command
// the state refuses.
type Result struct {
	Changed bool
	Err     error
}

// Apply applies c to s. It is deterministic and never panics on any
// command.
func (s *State) Apply(c *Command) Result {
	if s.Jobs == nil {
		s.Jobs = map[string]*Job{}
	}
	if c.Kind == CmdPeer {
		return s.applyPeer(c)
	}
	j := s.Jobs[c.Job]
	if c.Kind != CmdSubmit && j == nil {
		return Result{Err: fmt.Errorf("coord: no job %q", c.Job)}
	}
	switch c.Kind {
	case CmdSubmit:
		return s.applySubmit(c, j)
	case CmdOutcome:
		return j.applyOutcome(c)
	case CmdProgress:
		return j.applyProgress(c)
	case CmdEpoch:
		return j.applyEpoch(c)
	case CmdFail:
		return j.applyEnd(StatusFailed, c)
	case CmdCheckpoint:
		return j.applyCheckpoint(c)
	case CmdPause:
		return j.applyPause(c)
	case CmdCancel:
		return j.applyEnd(StatusCancelled, c)
	case CmdDelete:
		return s.applyDelete(c)
	}
	return Result{Err: fmt.Errorf("coord: unknown command %q", c.Kind)}
}

// applySubmit adds a job with its first epoch; the same submission again is a
// retry, another one under the name is refused naming the fields that
// differ.
func (s *State) applySubmit(c *Command, j *Job) Result {
	if c.Spec == nil || c.New == nil || c.Spec.Name != c.Job || c.New.Epoch != 0 {
		return Result{Err: fmt.Errorf("coord: malformed submit of %q", c.Job)}
	}
	if j != nil {
		differ := specDiff(j, c)
		if len(differ) == 0 {
			return Result{} // a retry
		}
		return Result{Err: failure.New(failure.InvalidOptions, OpCoordinator,
			fmt.Sprintf("job %q exists and this submission differs in %s: delete the job first, or submit under another name", c.Job, strings.Join(differ, ", ")),
			"fields", strings.Join(differ, ","))}
	}
	e := *c.New
	e.Outcome = nil
	s.Jobs[c.Job] = &Job{Spec: *c.Spec, IRHash: c.IRHash, ShardSpecHash: c.SSHash, Status: StatusAgreeing, Epochs: []Epoch{e}}
	delete(s.Deleted, c.Job)
	if len(s.Deleted) == 0 {
		s.Deleted = nil
	}
	return Result{Changed: true}
}

// applyOutcome records an epoch's agreement outcome (the first one stands):
// the job runs, or fails when the epoch is not agreed.
func (j *Job) applyOutcome(c *Command) Result {
	if c.Outcome == nil || c.Epoch >= uint64(len(j.Epochs)) {
		return Result{Err: fmt.Errorf("coord: job %q has no epoch %d", c.Job, c.Epoch)}
	}
	e := &j.Epochs[c.Epoch]
	if e.Outcome != nil {
		return Result{} // the first outcome stands
	}
	o := *c.Outcome
	e.Outcome = &o
	if j.Status == StatusAgreeing || j.Status == StatusRunning {
		if !o.Agreed {
			j.Status, j.Reason = StatusFailed, fmt.Sprintf("epoch %d not agreed: %s", c.Epoch, describe(&o))
		} else if c.Epoch == uint64(len(j.Epochs))-1 {
			j.Status = StatusRunning
			j.finish()
		}
	}
	return Result{Changed: true}
}

// applyProgress commits the highest step every rank finished, unless it is
// stale (lower, or of an abandoned timeline) or the job is over.
func (j *Job) applyProgress(c *Command) Result {
	// Progress computed from an abandoned timeline's reports (a
	// rollback committed since) is stale.
	if c.Step <= j.LastStep || c.Epoch < j.Timeline() || j.Final() {
		return Result{}
	}
	j.LastStep = c.Step
	if c.Loss != nil {
		l := *c.Loss
		j.Loss = &l
	}
	if v := c.Val; v != nil && (len(j.Validations) == 0 || v.Step > j.Validations[len(j.Validations)-1].Step) {
		j.Validations = append(j.Validations, *v)
		if n := len(j.Validations); n > MaxValidations {
			j.Validations = slices.Clone(j.Validations[n-MaxValidations:])
		}
	}
	j.finish()
	return Result{Changed: true}
}

// applyEpoch adds the next plan epoch to an agreed job: a rollback to a
// committed checkpoint, or a boundary past the horizon (or the fenced one
// given).
func (j *Job) applyEpoch(c *Command) Result {
	if c.New == nil {
		return Result{Err: fmt.Errorf("coord: malformed epoch for %q", c.Job)}
	}
	switch next := uint64(len(j.Epochs)); {
	case c.New.Epoch < next:
		if j.Epochs[c.New.Epoch].GlobalPlanHash == c.New.GlobalPlanHash {
			return Result{}
		}
		return Result{Err: fmt.Errorf("coord: job %q already has epoch %d with another plan", c.Job, c.New.Epoch)}
	case c.New.Epoch > next:
		return Result{Err: fmt.Errorf("coord: job %q is at epoch %d; epoch %d skips ahead", c.Job, next-1, c.New.Epoch)}
	}
	if j.Final() {
		return Result{Err: fmt.Errorf("coord: job %q is %s", c.Job, j.Status)}
	}
	if prev := j.Current(); prev.Outcome == nil || !prev.Outcome.Agreed {
		return Result{Err: fmt.Errorf("coord: job %q: epoch %d is not agreed yet", c.Job, prev.Epoch)}
	}
	e := *c.New
	e.Outcome = nil
	switch r := e.Restore; {
	case r != nil && r.Rollback:
		// Back (or on) to a committed checkpoint: every rank
		// restores it and runs the steps after it again.
		rr := *r
		e.Restore = &rr
		// Check everything before changing anything.
		if c.Drop != nil && (j.Checkpoint(*c.Drop) == nil || *c.Drop == r.Step) {
			return Result{Err: fmt.Errorf("coord: job %q: no checkpoint of step %d to drop, or it is the one restored", c.Job, *c.Drop)}
		}
		if r.Step > 0 && j.Checkpoint(r.Step) == nil {
			return Result{Err: fmt.Errorf("coord: job %q has no committed checkpoint of step %d", c.Job, r.Step)}
		}
		if c.Drop != nil {
			j.dropCheckpoint(*c.Drop, e.Reason)
		}
		e.StartStep = r.Step + 1
		j.LastStep = r.Step
		// Checkpoints past it belong to the timeline abandoned.
		j.Checkpoints = slices.DeleteFunc(j.Checkpoints, func(k Checkpoint) bool { return k.Step > r.Step })
	case !c.Fence:
		// The boundary lies past every step a rank may already run
		// under the epoch before (its horizon), whatever progress
		// was committed since the leader chose it.
		e.StartStep = max(e.StartStep, j.Horizon(uint64(len(j.Epochs))-1)+1)
		if r != nil {
			e.Restore = &Restore{Step: e.StartStep - 1}
		}
	case e.StartStep <= j.LastStep || e.StartStep < j.Current().StartStep:
		return Result{Err: fmt.Errorf("coord: job %q: fenced boundary %d is not past the finished step %d", c.Job, e.StartStep, j.LastStep)}
	}
	j.Epochs = append(j.Epochs, e)
	j.Status = StatusAgreeing
	return Result{Changed: true}
}

// applyEnd fails or cancels (status) a job that is not over, for
// c.Reason.
func (j *Job) applyEnd(status JobStatus, c *Command) Result {
	if j.Final() {
		return Result{}
	}
	j.Status, j.Reason = status, c.Reason
	return Result{Changed: true}
}

// applyCheckpoint commits a checkpoint every rank stored, keeping the last
// Spec.Keep(); it unpauses the job.
func (j *Job) applyCheckpoint(c *Command) Result {
	k := c.Checkpoint
	if k == nil || k.Step == 0 || uint64(len(k.Shards)) != k.World {
		return Result{Err: fmt.Errorf("coord: malformed checkpoint for %q", c.Job)}
	}
	if e := j.EpochFor(k.Step); e.Epoch != k.Epoch || j.WorldSize(e.Epoch) != k.World {
		return Result{Err: fmt.Errorf("coord: job %q: step %d does not run under epoch %d with %d ranks", c.Job, k.Step, k.Epoch, k.World)}
	}
	if have := j.Checkpoint(k.Step); have != nil {
		if have.Epoch == k.Epoch {
			return Result{} // a retry
		}
		return Result{Err: fmt.Errorf("coord: job %q already has a checkpoint of step %d", c.Job, k.Step)}
	}
	kk := *k
	kk.Shards = slices.Clone(k.Shards)
	at, _ := slices.BinarySearchFunc(j.Checkpoints, kk.Step, func(x Checkpoint, step uint64) int { return cmp.Compare(x.Step, step) })
	j.Checkpoints = slices.Insert(j.Checkpoints, at, kk)
	if n := uint64(len(j.Checkpoints)); n > j.Spec.Keep() {
		j.Checkpoints = slices.Delete(j.Checkpoints, 0, int(n-j.Spec.Keep()))
	}
	j.Paused, j.PausedAt = "", 0 // the store took every shard
	j.finish()
	return Result{Changed: true}
}

// applyPause pauses the job at a step (the checkpoint store is full), or
// resumes it.
func (j *Job) applyPause(c *Command) Result {
	if j.Final() || (c.Remove && j.Paused == "") || (!c.Remove && j.Paused == c.Reason) {
		return Result{}
	}
	if c.Remove {
		j.Paused, j.PausedAt = "", 0
	} else {
		j.Paused, j.PausedAt = c.Reason, c.Step
	}
	return Result{Changed: true}
}

// applyDelete removes the job, remembering when.
func (s *State) applyDelete(c *Command) Result {
	delete(s.Jobs, c.Job)
	if s.Deleted == nil {
		s.Deleted = map[string]int64{}
	}
	s.Deleted[c.Job] = c.At
	return Result{Changed: true}
}

// finish marks a running job done once its last step and the checkpoint
// of its last step are committed: a done job's final state is durable.
func (j *Job) finish() {
	if j.Spec.Steps > 0 && j.LastStep >= j.Spec.Steps && j.Status == StatusRunning {
		if k := j.LastCheckpoint(); k != nil && k.Step >= j.Spec.Steps {
			j.Status = StatusDone
		}
	}
}

// dropCheckpoint removes the checkpoint of step, keeping it in Dropped
// with the reason.
func (j *Job) dropCheckpoint(step uint64, reason string) {
	k := j.Checkpoint(step)
	if k == nil {
		return
	}
	d := *k
	d.Reason = reason
	j.Dropped = append(j.Dropped, d)
	if len(j.Dropped) > MaxDropped {
		j.Dropped = slices.Delete(j.Dropped, 0, len(j.Dropped)-MaxDropped)
	}
	j.Checkpoints = slices.DeleteFunc(j.Checkpoints, func(x Checkpoint) bool { return x.Step == step })
}

// WorldSize returns the world size of epoch i.
func (j *Job) WorldSize(i uint64) uint64 {
	spec, _ := j.World(i)
	return spec.WorldSize
}

func (s *State) applyPeer(c *Command) Result {
	if c.Peer == nil || c.Peer.ID == "" {
		return Result{Err: fmt.Errorf("coord: malformed peer command")}
	}
	if s.Peers == nil {
		s.Peers = map[string]Peer{}
	}
	old, had := s.Peers[c.Peer.ID]
	if c.Remove {
		if !had {
			return Result{}
		}
		delete(s.Peers, c.Peer.ID)
		return Result{Changed: true}
	}
	if had && old == *c.Peer {
		return Result{}
	}
	s.Peers[c.Peer.ID] = *c.Peer
	return Result{Changed: true}
}

func describe(o *Outcome) string {
	if o.Reason != "" {
		return o.Reason
	}
	var parts []string
	for _, m := range o.Mismatches {
		parts = append(parts, fmt.Sprintf("rank %d holds plan %s, expected %s", m.Rank, m.Got.Short(), m.Expected.Short()))
	}
	if len(o.Missing) > 0 {
		parts = append(parts, fmt.Sprintf("ranks %v never reported", o.Missing))
	}
	return fmt.Sprint(parts)
}

// Clone returns a deep copy of s (for snapshots and readers).
func (s *State) Clone() *State {
	c := &State{Jobs: make(map[string]*Job, len(s.Jobs)), Peers: maps.Clone(s.Peers), Deleted: maps.Clone(s.Deleted)}
	for name, j := range s.Jobs {
		c.Jobs[name] = j.Clone()
	}
	return c
}

// Clone returns a copy of j that commands applied to j do not change.
func (j *Job) Clone() *Job {
	jj := *j
	jj.Checkpoints = slices.Clone(j.Checkpoints)
	jj.Dropped = slices.Clone(j.Dropped)
	jj.Validations = slices.Clone(j.Validations)
	jj.Epochs = slices.Clone(j.Epochs)
	for i := range jj.Epochs {
		jj.Epochs[i].Expected = slices.Clone(jj.Epochs[i].Expected)
		jj.Epochs[i].Envelope = maps.Clone(jj.Epochs[i].Envelope)
		if o := jj.Epochs[i].Outcome; o != nil {
			oo := *o
			oo.Mismatches, oo.Missing, oo.Holders = slices.Clone(o.Mismatches), slices.Clone(o.Missing), slices.Clone(o.Holders)
			jj.Epochs[i].Outcome = &oo
		}
	}
	return &jj
}

// Names returns the job names, sorted.
func (s *State) Names() []string { return slices.Sorted(maps.Keys(s.Jobs)) }

// specDiff names the fields in which submission c differs from job j as
// it was submitted (none: c is a retry).
func specDiff(j *Job, c *Command) []string {
	a, b := &j.Spec, c.Spec
	var out []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{"ir", j.IRHash == c.IRHash},
		{"shard_spec", j.ShardSpecHash == c.SSHash},
		{"arena_config", maps.Equal(a.ArenaConfig, b.ArenaConfig)},
		{"mode", a.Mode == b.Mode},
		{"strategy", a.Strategy == b.Strategy},
		{"replay_token", a.ReplayToken == b.ReplayToken},
		{"replan_policy", a.ReplanPolicy == b.ReplanPolicy},
		{"steps", a.Steps == b.Steps},
		{"window", a.Window == b.Window},
		{"model", sameSource(a.Source, b.Source)},
		{"elastic", a.Elastic == b.Elastic},
		{"data_mode", a.DataMode == b.DataMode},
		{"checkpoint_every", a.CheckpointEvery == b.CheckpointEvery},
		{"checkpoint_keep", a.CheckpointKeep == b.CheckpointKeep},
		{"seed", a.Seed == b.Seed},
		{"data", sameJSON(a.Data, b.Data)},
		{"weights", sameJSON(a.Weights, b.Weights)},
		{"optimizer", a.OptimizerOf() == b.OptimizerOf()},
	} {
		if !f.same {
			out = append(out, f.name)
		}
	}
	if len(out) == 0 && j.Epochs[0].GlobalPlanHash != c.New.GlobalPlanHash {
		// The same inputs plan to another hash: another planner version.
		out = append(out, "global_plan_hash")
	}
	return out
}

// sameSource says whether two model sources are the same submission
// (an empty map or config the same as none).
func sameSource(a, b *ModelSource) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Model == b.Model && bytes.Equal(a.Config, b.Config) &&
		maps.EqualFunc(a.Dims, b.Dims, func(x, y DimSpec) bool {
			return x.Min == y.Min && x.Max == y.Max && x.Limit == y.Limit && slices.Equal(x.Buckets, y.Buckets)
		})
}
