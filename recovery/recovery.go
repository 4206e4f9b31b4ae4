// Package recovery holds the decisions that keep a job's training state
// consistent through faults, as pure functions of values: when a rank
// checkpoints, how a rank comes to hold the state the next step needs
// (carry it, restore a checkpoint, start fresh, or ask for a rollback),
// what the leader commits when a rank asks (roll every rank back, drop a
// corrupt checkpoint, pause, fail), when a checkpoint is complete, and
// which stored objects are garbage. Like package replan it does no I/O,
// reads no clock and starts no goroutines: the worker and the leader
// loops feed it what they saw and carry out what it returns.
//
// # Timelines
//
// A job's epochs are numbered in commit order; each starts at a step
// (StartStep). An epoch may start from a checkpoint instead of from the
// state the epoch before left (Restore): a rollback (every rank goes back
// to the checkpoint of step c and runs c+1 again; the committed progress
// goes back to c), or a restore at a boundary (a world that grows starts
// from the checkpoint the old world wrote just before the boundary). The
// epoch that runs step s is the latest with StartStep ≤ s, so a rollback
// supersedes every epoch before it from c+1 on, and what ranks did past c
// under those epochs is abandoned. Barriers, collectives and progress are
// keyed by epoch, so an abandoned timeline never mixes with the new one.
//
// # Exactness
//
// The batch of a step, and every random draw, derive from (seed, step,
// rank); the state after step c is in the checkpoint, bit for bit. A rank
// that goes back to c and runs c+1, c+2, ... computes what it computed
// the first time, so a run with faults ends in the state of the run
// without them.
package recovery

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/ir"
)

// Epoch is what the decisions need of a committed epoch.
type Epoch struct {
	Epoch     uint64
	StartStep uint64
	World     uint64
	Agreed    bool
	// Restore, when set, makes the epoch start from a checkpoint.
	Restore *Restore
}

// Restore is where an epoch starts from: the state after Step as its
// committed checkpoint holds it (Step 0: the initial state). StartStep is
// always Step+1. Rollback says the job went back to Step: ranks had run
// steps past it under earlier epochs, which are abandoned.
type Restore struct {
	Step     uint64
	Rollback bool
}

func (r *Restore) what() string {
	if r.Step == 0 {
		return "the initial state"
	}
	return fmt.Sprintf("the checkpoint of step %d", r.Step)
}

// Manifest identifies a committed checkpoint: the state of every rank of
// a world after Step, written under Epoch.
type Manifest struct {
	Step  uint64
	Epoch uint64
	World uint64
}

// Due reports whether a rank checkpoints the state after step k: every
// `every` steps, and after the job's last step (last 0: the job runs
// until stopped). Epoch boundaries are checkpointed too (see Prepare).
func Due(k, every, last uint64) bool {
	return k > 0 && ((every > 0 && k%every == 0) || k == last)
}

// Holding is the model state a worker holds.
type Holding struct {
	// Valid is false when the worker holds no consistent state: a
	// process that restarted past step 0, or one whose step was
	// abandoned halfway.
	Valid bool
	Step  uint64 // the state is the one after Step
	Epoch uint64 // the epoch whose executor holds it
	// Stateless executors (memory traffic only, plan-only) hold nothing
	// that can be lost: they never need a rollback.
	Stateless bool
}

// ActionKind says how a worker comes to hold the state a step needs.
type ActionKind int

const (
	// Ready: the epoch's executor holds the state after step s-1.
	Ready ActionKind = iota
	// Carry: an earlier epoch's executor holds it; move it over (and
	// checkpoint it first when Checkpoint is set: an epoch boundary).
	Carry
	// Init: the step is the first of the job (or a rollback to the
	// initial state): start from the initial state.
	Init
	// Load: restore the committed checkpoint of Step.
	Load
	// Wait: the checkpoint the epoch starts from is not committed yet
	// (checkpoint Step first when Checkpoint is set).
	Wait
	// Rewind: the epoch starts from a checkpoint at Step+1, before the
	// step asked for; go back to step Step+1.
	Rewind
	// AskRollback: nothing holds the state; ask the leader to roll the
	// job back to its last checkpoint.
	AskRollback
)

var actionNames = [...]string{"ready", "carry", "init", "load", "wait", "rewind", "ask-rollback"}

func (k ActionKind) String() string { return actionNames[k] }

// Action is Prepare's answer.
type Action struct {
	Kind ActionKind
	// Step is the checkpoint to restore or wait for, the step before the
	// one to rewind to.
	Step uint64
	// Checkpoint asks to checkpoint the held state first (the state
	// after Step for Wait, after s-1 for Carry).
	Checkpoint bool
	Reason     string
}

// Prepare decides how a worker comes to hold the state that step s of
// epoch e needs: the state after s-1. started says whether the worker's
// rank reported a step under e already (in this process or an earlier
// one): until it has, no rank has passed e's first step, which waits for
// every rank. committed reports whether the checkpoint of a step is
// committed; written whether this worker already wrote its own shard of
// it.
func Prepare(s uint64, e Epoch, h Holding, started bool, committed, written func(step uint64) bool) Action {
	need := s - 1
	if h.Valid && h.Step == need && h.Epoch == e.Epoch {
		return Action{Kind: Ready}
	}
	if r := e.Restore; r != nil {
		switch {
		case s > e.StartStep && !started:
			// The rank has not started the epoch, so no rank has passed
			// its first step: they wait for this one there.
			return Action{Kind: Rewind, Step: r.Step, Reason: fmt.Sprintf("epoch %d starts from %s", e.Epoch, r.what())}
		case s > e.StartStep && h.Stateless:
			return Action{Kind: Init, Reason: "the executor holds no model state"}
		case s > e.StartStep:
			// A new process (or an abandoned step) in the middle of the
			// epoch: the others are past the checkpoint it starts from.
			return Action{Kind: AskRollback, Reason: fmt.Sprintf("step %d needs the state after step %d; %s", s, need, holds(h))}
		case r.Step == 0:
			return Action{Kind: Init, Reason: fmt.Sprintf("epoch %d starts from %s", e.Epoch, r.what())}
		case committed(r.Step):
			return Action{Kind: Load, Step: r.Step, Reason: fmt.Sprintf("epoch %d starts from the checkpoint of step %d", e.Epoch, r.Step)}
		}
		// A rank of the world before the boundary holds that state:
		// it writes its shard, then waits for the others'.
		return Action{Kind: Wait, Step: r.Step, Checkpoint: h.Valid && h.Step == r.Step && !written(r.Step),
			Reason: fmt.Sprintf("epoch %d starts from the checkpoint of step %d, not committed yet", e.Epoch, r.Step)}
	}
	if h.Valid && h.Step == need {
		return Action{Kind: Carry, Checkpoint: s == e.StartStep && need > 0 && !written(need),
			Reason: fmt.Sprintf("epoch %d takes over the state of epoch %d", e.Epoch, h.Epoch)}
	}
	if need == 0 {
		return Action{Kind: Init, Reason: "the job's first step"}
	}
	if h.Stateless {
		return Action{Kind: Init, Reason: "the executor holds no model state"}
	}
	return Action{Kind: AskRollback, Reason: fmt.Sprintf("step %d needs the state after step %d; %s", s, need, holds(h))}
}

func holds(h Holding) string {
	if h.Valid {
		return fmt.Sprintf("this process holds the state after step %d", h.Step)
	}
	return "this process holds no model state"
}

// Job is what the leader's decisions need of a job.
type Job struct {
	Epochs      []Epoch    // committed, in order
	LastStep    uint64     // committed progress
	Checkpoints []Manifest // committed, oldest first
	Final       bool       // done, failed, cancelled
	Paused      bool
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

// Checkpoint returns the committed checkpoint of step, if any.
func (j *Job) Checkpoint(step uint64) (Manifest, bool) {
	for _, m := range j.Checkpoints {
		if m.Step == step {
			return m, true
		}
	}
	return Manifest{}, false
}

// RequestKind is why a rank asks the leader for help.
type RequestKind string

const (
	// Stateless: the rank cannot hold the state its next step needs (it
	// restarted, or was replaced by a process with its identity).
	Stateless RequestKind = "stateless"
	// Corrupt: a checkpoint object failed its digest (CHECKPOINT_CORRUPT).
	Corrupt RequestKind = "corrupt"
	// Mismatch: a restored state does not hash to the checkpoint's state
	// hash (RESTORE_MISMATCH).
	Mismatch RequestKind = "mismatch"
	// StoreFull: the checkpoint store refused an object
	// (CHECKPOINT_STORE_FULL).
	StoreFull RequestKind = "store_full"
)

// Request is a rank's request.
type Request struct {
	Kind     RequestKind
	Rank     uint64
	Identity string
	Epoch    uint64 // the epoch the rank is in
	// Step is the step the rank wants to run (Stateless) or the
	// checkpoint's step (the others).
	Step   uint64
	Detail string
}

// DecisionKind is what the leader does about a request.
type DecisionKind string

const (
	None     DecisionKind = "none"
	Rollback DecisionKind = "rollback" // commit an epoch that restores checkpoint To (Drop first, when set)
	Pause    DecisionKind = "pause"    // commit the job as paused with Reason
	Fail     DecisionKind = "fail"     // commit the job as failed with Reason
)

// Decision is Decide's answer.
type Decision struct {
	Kind DecisionKind
	// To is the checkpoint a rollback restores (its step; 0 and no
	// manifest: the initial state).
	To     uint64
	ToAt   *Manifest
	Drop   *Manifest // a corrupt checkpoint to drop first
	Reason string
}

// Decide returns what the leader commits for a request, given the job as
// committed. It is idempotent: the same request again, or a request the
// committed state already answers, decides None, so ranks may repeat
// requests until they see the answer.
func Decide(j Job, q Request) Decision {
	if j.Final || len(j.Epochs) == 0 {
		return Decision{Kind: None, Reason: "the job is over"}
	}
	last := j.Epochs[len(j.Epochs)-1]
	who := fmt.Sprintf("rank %d", q.Rank)
	if q.Identity != "" {
		who += " (" + q.Identity + ")"
	}
	switch q.Kind {
	case Stateless:
		if q.Epoch < last.Epoch {
			// The rank decides again under the new epoch, which may
			// already restore what it needs.
			return Decision{Kind: None, Reason: fmt.Sprintf("epoch %d was superseded by epoch %d", q.Epoch, last.Epoch)}
		}
		if last.Restore != nil && q.Step <= last.StartStep {
			return Decision{Kind: None, Reason: fmt.Sprintf("epoch %d starts from %s", last.Epoch, last.Restore.what())}
		}
		if !last.Agreed {
			return Decision{Kind: None, Reason: fmt.Sprintf("epoch %d is not agreed yet", last.Epoch)}
		}
		d := rollTo(j, nil)
		d.Reason = fmt.Sprintf("%s has no state for step %d%s: every rank restores %s", who, q.Step, paren(q.Detail), d.target())
		return d
	case Corrupt:
		m, ok := j.Checkpoint(q.Step)
		if !ok || q.Epoch < last.Epoch || last.Restore == nil || last.Restore.Step != q.Step {
			return Decision{Kind: None, Reason: fmt.Sprintf("the checkpoint of step %d is not the one epoch %d restores", q.Step, last.Epoch)}
		}
		if !last.Agreed {
			return Decision{Kind: None, Reason: fmt.Sprintf("epoch %d is not agreed yet", last.Epoch)}
		}
		d := rollTo(j, &m)
		d.Drop = &m
		d.Reason = fmt.Sprintf("CHECKPOINT_CORRUPT: %s read a corrupt object of the checkpoint of step %d%s: it is dropped and every rank restores %s",
			who, q.Step, paren(q.Detail), d.target())
		return d
	case Mismatch:
		return Decision{Kind: Fail, Reason: fmt.Sprintf("RESTORE_MISMATCH: %s restored the checkpoint of step %d and holds another state%s", who, q.Step, paren(q.Detail))}
	case StoreFull:
		if j.Paused {
			return Decision{Kind: None, Reason: "the job is paused already"}
		}
		return Decision{Kind: Pause, Reason: fmt.Sprintf("CHECKPOINT_STORE_FULL: %s cannot store its shard of the checkpoint of step %d%s; the job resumes once it is stored", who, q.Step, paren(q.Detail))}
	}
	return Decision{Kind: None, Reason: fmt.Sprintf("unknown request %q", q.Kind)}
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// rollTo returns a rollback to the newest committed checkpoint other
// than skip, or to the initial state.
func rollTo(j Job, skip *Manifest) Decision {
	for i := len(j.Checkpoints) - 1; i >= 0; i-- {
		if m := j.Checkpoints[i]; skip == nil || m != *skip {
			return Decision{Kind: Rollback, To: m.Step, ToAt: &m}
		}
	}
	return Decision{Kind: Rollback}
}

func (d Decision) target() string {
	if d.ToAt == nil {
		return "the initial state"
	}
	return fmt.Sprintf("the checkpoint of step %d", d.To)
}

// Report is one rank's shard of a checkpoint, as the rank reported it.
type Report struct {
	Step, Epoch, Rank uint64
	Identity          string
	Digest, State     ir.Hash
	Bytes             uint64
	Nanos             int64
}

// Tally collects checkpoint reports until a checkpoint is complete: every
// rank of the world of the epoch that ran its step reported. It is not
// safe for concurrent use.
type Tally struct {
	pending map[[2]uint64]map[uint64]Report // (step, epoch) → rank → report
}

// Add adds r and returns the complete checkpoint it finishes, its shards
// in rank order. Reports of an abandoned timeline (an epoch that no
// longer runs their step), of ranks outside the world, and of a
// checkpoint already committed are dropped; a rank's later report
// replaces its earlier one.
func (t *Tally) Add(j *Job, r Report) ([]Report, bool) {
	for k := range t.pending {
		if j.EpochFor(k[0]).Epoch != k[1] {
			delete(t.pending, k) // an abandoned timeline's
		}
	}
	e := j.EpochFor(r.Step)
	if e.Epoch != r.Epoch || r.Rank >= e.World || r.Step == 0 {
		return nil, false
	}
	if m, ok := j.Checkpoint(r.Step); ok && m.Epoch == r.Epoch {
		return nil, false
	}
	if t.pending == nil {
		t.pending = map[[2]uint64]map[uint64]Report{}
	}
	k := [2]uint64{r.Step, r.Epoch}
	if t.pending[k] == nil {
		t.pending[k] = map[uint64]Report{}
	}
	t.pending[k][r.Rank] = r
	if uint64(len(t.pending[k])) < e.World {
		return nil, false
	}
	out := make([]Report, 0, e.World)
	for rank := range e.World {
		out = append(out, t.pending[k][rank])
	}
	delete(t.pending, k)
	return out, true
}

// Pending returns, sorted, the (step, epoch) checkpoints with some but not
// all reports, and how many ranks reported each.
func (t *Tally) Pending() []string {
	var out []string
	for k, rs := range t.pending {
		out = append(out, fmt.Sprintf("step %d epoch %d: %d ranks", k[0], k[1], len(rs)))
	}
	slices.Sort(out)
	return out
}

// Object is a stored checkpoint object: which step and rank it holds a
// shard of, and its digest.
type Object struct {
	Name   string
	Step   uint64
	Rank   uint64
	Digest ir.Hash
}

// Kept is a committed checkpoint's objects: the digest of each rank's
// shard.
type Kept struct {
	Step    uint64
	Digests []ir.Hash // by rank
}

// Garbage returns the names of the objects to delete, sorted: those no
// kept checkpoint references, of steps up to the newest kept one (older
// checkpoints, and partial ones no rank will finish). Objects past the
// newest kept checkpoint may belong to one being written and stay.
func Garbage(objects []Object, kept []Kept) []string {
	ref := map[[2]uint64]ir.Hash{}
	newest := uint64(0)
	for _, k := range kept {
		newest = max(newest, k.Step)
		for r, d := range k.Digests {
			ref[[2]uint64{k.Step, uint64(r)}] = d
		}
	}
	var out []string
	for _, o := range objects {
		if d, ok := ref[[2]uint64{o.Step, o.Rank}]; ok && d == o.Digest {
			continue
		}
		if len(kept) > 0 && o.Step <= newest {
			out = append(out, o.Name)
		}
	}
	slices.Sort(out)
	return out
}

// String renders an action for logs and scenarios.
func (a Action) String() string {
	var b strings.Builder
	b.WriteString(a.Kind.String())
	switch a.Kind {
	case Load, Wait:
		fmt.Fprintf(&b, " step=%d", a.Step)
	case Rewind:
		fmt.Fprintf(&b, " to=%d", a.Step+1)
	}
	if a.Checkpoint {
		b.WriteString(" checkpoint-first")
	}
	if a.Reason != "" {
		b.WriteString(": " + a.Reason)
	}
	return b.String()
}
