// Package replan decides when a job's plan must change and how, from the
// events the cluster sees: shapes observed by the ranks, operator
// requests and membership changes (spec II.H and §10). It is pure, like
// etcd-io/raft's RawNode: the coordinator feeds it events and carries out
// the decisions; it reads no clock and does no I/O.
//
// # Envelopes and buckets
//
// A job's dynamic dimensions are named ("seq", "batch"); the Envelope maps
// each to the [min, max] range the current plan is sized for. An observed
// value inside the range changes nothing. Above it, under
// REPLAN_AT_SAFEPOINT, the dimension grows to the smallest declared
// bucket that holds the value (or, without declared buckets, the next
// power of two); a value above every bucket, or above the dimension's
// limit, aborts the job whatever the policy. Under ABORT any exit aborts
// the job with a named reason.
//
// # Safepoints
//
// Events are buffered; Decide(s) folds every event of steps ≤ s into one
// decision for the safepoint after step s: the new epoch takes effect at
// step s+1 (its boundary). The fold takes maxima and sorted sets, so the
// same events give the same decision in any arrival order, and duplicates
// (the same rank's observation of the same step, an operator request id
// seen before) and late events (from steps of an earlier epoch) are
// ignored. While a decided replan is pending (committed, not yet in
// effect), new events wait for the next decision after Applied.
//
// # Cache
//
// The replan key is (shape_envelope_hash, mode, arena_config_hash), with
// the strategy and world size added: a return to a key seen before
// reports the plan remembered for it, so the coordinator reuses it.
package replan

import (
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/ir"
)

// Policy is a job's replan policy.
type Policy string

// Policies.
const (
	AtSafepoint Policy = "replan_at_safepoint"
	Abort       Policy = "abort"
)

// Envelope maps dynamic dimension names to the range a plan is sized for.
type Envelope map[string]ir.DimRange

// Hash returns shape_envelope_hash: SHA-256 over the canonical CBOR of the
// envelope as [[name, min, max], ...] in name order.
func (e Envelope) Hash() ir.Hash {
	rows := make([][3]any, 0, len(e))
	for _, k := range slices.Sorted(maps.Keys(e)) {
		rows = append(rows, [3]any{k, e[k].Min, e[k].Max})
	}
	h, err := ir.Sum(rows)
	if err != nil {
		panic("replan: hashing an envelope: " + err.Error())
	}
	return h
}

func (e Envelope) String() string {
	parts := make([]string, 0, len(e))
	for _, k := range slices.Sorted(maps.Keys(e)) {
		parts = append(parts, fmt.Sprintf("%s=[%d,%d]", k, e[k].Min, e[k].Max))
	}
	return strings.Join(parts, " ")
}

// Config is fixed for a job.
type Config struct {
	Policy Policy
	// Buckets lists, per dimension, the sizes it may grow to,
	// ascending. A dimension without buckets grows to the next power of
	// two.
	Buckets map[string][]uint64
	// Limit caps a dimension: observing more aborts the job (0: none).
	Limit map[string]uint64
	// Elastic lets a membership change replan the job for the new world
	// size; otherwise the job waits for the missing rank to come back.
	Elastic bool
}

// Epoch is what the current plan was made for.
type Epoch struct {
	Epoch           uint64
	StartStep       uint64
	Envelope        Envelope
	World           uint64
	Mode            string
	Strategy        string
	ArenaConfigHash ir.Hash
}

// Key is the replan key.
type Key struct {
	EnvelopeHash    ir.Hash
	Mode            string
	ArenaConfigHash ir.Hash
	Strategy        string
	World           uint64
}

func (e *Epoch) key() Key {
	return Key{EnvelopeHash: e.Envelope.Hash(), Mode: e.Mode, ArenaConfigHash: e.ArenaConfigHash, Strategy: e.Strategy, World: e.World}
}

// Observation is a rank's observed dimension sizes at the end of a step.
type Observation struct {
	Rank, Step uint64
	Dims       map[string]uint64
}

// Request is an operator's replan request: any of a new arena config
// (by its hash; the coordinator holds the config), a new strategy, a new
// envelope for some dimensions.
type Request struct {
	ID              string // deduplicates retries
	Step            uint64 // the step the request arrived at
	Reason          string
	ArenaConfigHash *ir.Hash
	Strategy        string
	Envelope        Envelope
}

// Membership is a change of the job's live ranks.
type Membership struct {
	Step   uint64
	World  uint64
	Reason string
}

// Ack says what happened to an event.
type Ack string

// Acks.
const (
	Accepted  Ack = "accepted"
	Duplicate Ack = "duplicate" // seen before
	Late      Ack = "late"      // from a step of an earlier epoch
	Inside    Ack = "inside"    // inside the envelope: nothing to do
	Held      Ack = "held"      // a replan is pending; decided after it takes effect
	Ignored   Ack = "ignored"   // a membership change in a job that is not elastic: it waits for the rank
)

// Kind is a decision's kind.
type Kind string

// Decision kinds.
const (
	None     Kind = "none"
	Replan   Kind = "replan"
	AbortJob Kind = "abort"
)

// Decision is what to do at a safepoint.
type Decision struct {
	Kind Kind
	// Next is the epoch to commit (Replan): its StartStep is the
	// boundary, the first step run under it.
	Next    Epoch
	Reasons []string // sorted
	// Requests are the ids of the operator requests the decision
	// answers, sorted.
	Requests []string
	// Cached is set when Next's key was seen before; Plan is the plan
	// remembered for it.
	Cached bool
	Plan   ir.Hash
}

// Replanner is one job's replan state machine.
type Replanner struct {
	cfg     Config
	cur     Epoch
	pending *Epoch
	obs     []Observation
	reqs    []Request
	mem     []Membership
	seenObs map[[2]uint64]bool
	seenReq map[string]bool
	cache   map[Key]ir.Hash
}

// New returns a replanner for a job whose current epoch is cur.
func New(cfg Config, cur Epoch) *Replanner {
	if cfg.Policy == "" {
		cfg.Policy = AtSafepoint
	}
	return &Replanner{cfg: cfg, cur: cur, seenObs: map[[2]uint64]bool{}, seenReq: map[string]bool{}, cache: map[Key]ir.Hash{}}
}

// Current returns the epoch in effect.
func (r *Replanner) Current() Epoch { return r.cur }

// Pending returns the decided epoch not yet in effect, if any.
func (r *Replanner) Pending() (Epoch, bool) {
	if r.pending == nil {
		return Epoch{}, false
	}
	return *r.pending, true
}

// Remember records the plan (a global plan hash) made for an epoch's key.
func (r *Replanner) Remember(e Epoch, plan ir.Hash) { r.cache[e.key()] = plan }

// Seen records operator requests already decided (by another replanner:
// a new leader's learns them from the committed epochs), so that a retry
// is a Duplicate.
func (r *Replanner) Seen(ids ...string) {
	for _, id := range ids {
		r.seenReq[id] = true
	}
}

// Observe buffers an observation.
func (r *Replanner) Observe(o Observation) Ack {
	if o.Step < r.cur.StartStep {
		return Late
	}
	k := [2]uint64{o.Rank, o.Step}
	if r.seenObs[k] {
		return Duplicate
	}
	r.seenObs[k] = true
	env := r.envelope()
	exits := false
	for d, v := range o.Dims {
		if rg, ok := env[d]; ok && (v < rg.Min || v > rg.Max) {
			exits = true
		}
	}
	if !exits {
		return Inside
	}
	r.obs = append(r.obs, o)
	if r.pending != nil {
		return Held
	}
	return Accepted
}

// Request buffers an operator request.
func (r *Replanner) Request(q Request) Ack {
	if r.seenReq[q.ID] {
		return Duplicate
	}
	r.seenReq[q.ID] = true
	r.reqs = append(r.reqs, q)
	if r.pending != nil {
		return Held
	}
	return Accepted
}

// ChangeMembership buffers a membership change.
func (r *Replanner) ChangeMembership(m Membership) Ack {
	if m.Step < r.cur.StartStep {
		return Late
	}
	if !r.cfg.Elastic {
		return Ignored
	}
	if m.World == r.world() {
		return Inside
	}
	r.mem = append(r.mem, m)
	if r.pending != nil {
		return Held
	}
	return Accepted
}

// envelope and world are those of the latest decided epoch.
func (r *Replanner) envelope() Envelope {
	if r.pending != nil {
		return r.pending.Envelope
	}
	return r.cur.Envelope
}

func (r *Replanner) world() uint64 {
	if r.pending != nil {
		return r.pending.World
	}
	return r.cur.World
}

// Decide folds the buffered events of steps ≤ step into the decision for
// the safepoint after step. A Replan decision becomes pending; the
// caller commits it and calls Applied once it is in effect.
func (r *Replanner) Decide(step uint64) Decision {
	if r.pending != nil {
		return Decision{Kind: None, Reasons: []string{fmt.Sprintf("epoch %d is pending (boundary %d)", r.pending.Epoch, r.pending.StartStep)}}
	}
	next := r.cur
	next.Epoch, next.StartStep = r.cur.Epoch+1, step+1
	next.Envelope = maps.Clone(r.cur.Envelope)
	var reasons []string
	var aborts []string
	used := 0
	// Observations: the largest value per dimension, and the smallest.
	hi, lo := map[string]uint64{}, map[string]uint64{}
	var keep []Observation
	for _, o := range r.obs {
		if o.Step > step {
			keep = append(keep, o)
			continue
		}
		used++
		for d, v := range o.Dims {
			if _, ok := next.Envelope[d]; !ok {
				continue
			}
			hi[d] = max(hi[d], v)
			if cur, ok := lo[d]; !ok || v < cur {
				lo[d] = v
			}
		}
	}
	r.obs = keep
	for _, d := range slices.Sorted(maps.Keys(hi)) {
		rg := next.Envelope[d]
		if hi[d] > rg.Max {
			if r.cfg.Policy == Abort {
				aborts = append(aborts, fmt.Sprintf("%s=%d exceeds the envelope [%d,%d] (policy abort)", d, hi[d], rg.Min, rg.Max))
				continue
			}
			grown, ok := r.grow(d, hi[d])
			if !ok {
				aborts = append(aborts, fmt.Sprintf("%s=%d exceeds %s", d, hi[d], r.ceiling(d)))
				continue
			}
			reasons = append(reasons, fmt.Sprintf("%s=%d exceeds [%d,%d]: grown to %d", d, hi[d], rg.Min, rg.Max, grown))
			rg.Max = grown
		}
		if lo[d] < rg.Min {
			if r.cfg.Policy == Abort {
				aborts = append(aborts, fmt.Sprintf("%s=%d is below the envelope [%d,%d] (policy abort)", d, lo[d], rg.Min, rg.Max))
				continue
			}
			reasons = append(reasons, fmt.Sprintf("%s=%d is below [%d,%d]: lowered to %d", d, lo[d], rg.Min, rg.Max, lo[d]))
			rg.Min = lo[d]
		}
		next.Envelope[d] = rg
	}
	// Operator requests, in id order; a later one overrides an earlier
	// one's fields.
	var keepReq []Request
	var reqs []Request
	for _, q := range r.reqs {
		if q.Step > step {
			keepReq = append(keepReq, q)
		} else {
			reqs = append(reqs, q)
		}
	}
	r.reqs = keepReq
	slices.SortFunc(reqs, func(a, b Request) int { return strings.Compare(a.ID, b.ID) })
	var ids []string
	for _, q := range reqs {
		used++
		ids = append(ids, q.ID)
		reasons = append(reasons, fmt.Sprintf("operator %s: %s", q.ID, q.Reason))
		if q.ArenaConfigHash != nil {
			next.ArenaConfigHash = *q.ArenaConfigHash
		}
		if q.Strategy != "" {
			next.Strategy = q.Strategy
		}
		for d, rg := range q.Envelope {
			next.Envelope[d] = rg
		}
	}
	// Membership: the latest world size wins (by step, then world).
	var keepMem, mems []Membership
	for _, m := range r.mem {
		if m.Step > step {
			keepMem = append(keepMem, m)
		} else {
			mems = append(mems, m)
		}
	}
	r.mem = keepMem
	if len(mems) > 0 {
		slices.SortFunc(mems, func(a, b Membership) int {
			if a.Step != b.Step {
				return int(a.Step) - int(b.Step)
			}
			return int(a.World) - int(b.World)
		})
		m := mems[len(mems)-1]
		used += len(mems)
		reasons = append(reasons, fmt.Sprintf("world size %d → %d: %s", next.World, m.World, m.Reason))
		next.World = m.World
	}
	if len(aborts) > 0 {
		slices.Sort(aborts)
		return Decision{Kind: AbortJob, Reasons: aborts}
	}
	if used == 0 || next.key() == r.cur.key() {
		d := Decision{Kind: None}
		if used > 0 {
			d.Reasons = []string{"the requested changes leave the plan as it is"}
		}
		return d
	}
	slices.Sort(reasons)
	d := Decision{Kind: Replan, Next: next, Reasons: reasons, Requests: ids}
	d.Plan, d.Cached = r.cache[next.key()]
	p := next
	r.pending = &p
	return d
}

// grow returns the size dimension d grows to for value v.
func (r *Replanner) grow(d string, v uint64) (uint64, bool) {
	limit := r.cfg.Limit[d]
	if bs, ok := r.cfg.Buckets[d]; ok {
		for _, b := range bs {
			if b >= v && (limit == 0 || b <= limit) {
				return b, true
			}
		}
		return 0, false
	}
	g := uint64(1)
	if v > 1 {
		if bits.Len64(v-1) >= 64 {
			return 0, false
		}
		g = 1 << bits.Len64(v-1)
	}
	if limit != 0 && g > limit {
		if v <= limit {
			return limit, true
		}
		return 0, false
	}
	return g, true
}

// ceiling describes the most dimension d may grow to.
func (r *Replanner) ceiling(d string) string {
	if bs := r.cfg.Buckets[d]; len(bs) > 0 {
		return fmt.Sprintf("every declared bucket (the largest is %d)", bs[len(bs)-1])
	}
	return fmt.Sprintf("the limit %d", r.cfg.Limit[d])
}

// Applied records that the pending epoch is in effect (committed and
// agreed); events held for it are decided from now on.
func (r *Replanner) Applied() {
	if r.pending == nil {
		return
	}
	r.cur = *r.pending
	r.pending = nil
	// Observations of steps before the new epoch are late now.
	var keep []Observation
	for _, o := range r.obs {
		if o.Step >= r.cur.StartStep {
			keep = append(keep, o)
		}
	}
	r.obs = keep
}

// SetPending records a decided epoch that is not in effect yet (a
// replanner rebuilt by a new leader while an epoch awaits agreement).
func (r *Replanner) SetPending(e Epoch) { p := e; r.pending = &p }

// Cancel drops the pending epoch (it was not agreed); the current epoch
// stays in effect.
func (r *Replanner) Cancel() { r.pending = nil }
