package coord

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/shard"
	"github.com/tmmu/tmmu/transport"
)

// The leader's decisions, apart from the loops that carry them out: each
// takes the committed job and what the leader observed, and returns what
// to do. They read no clock and do no I/O, so the scenarios in testdata
// (decide_test.go) drive them step by step.

// stepBook is the leader's record of a job's step reports: per identity,
// the latest that counts, and the reports it cannot judge yet (their
// epoch's holders are not known on this node, which trails the log).
type stepBook struct {
	latest    map[string]stepRec
	undecided map[string]transport.StepDone
}

type stepRec struct {
	rank, step, epoch uint64
	losses            []transport.StepLoss
	val               *transport.StepLoss
}

func newStepBook() *stepBook {
	return &stepBook{latest: map[string]stepRec{}, undecided: map[string]transport.StepDone{}}
}

// take records report d (nil on a tick) and judges every report waiting
// for j's holders (j nil: the job is not known here yet). It returns the
// reports refused because their sender is not the rank's holder under
// their epoch (Job.HolderOf), by identity.
func (b *stepBook) take(j *api.Job, d *transport.StepDone) (forged []transport.StepDone) {
	if d != nil {
		b.undecided[d.Identity] = *d
	}
	if j == nil {
		return nil
	}
	for id, d := range b.undecided {
		ok, decided := j.HolderOf(d.Epoch, d.Rank, d.Identity)
		if !decided {
			continue
		}
		delete(b.undecided, id)
		if !ok {
			forged = append(forged, d)
			continue
		}
		if r, seen := b.latest[d.Identity]; !seen || d.Epoch > r.epoch || (d.Epoch == r.epoch && d.Step > r.step) {
			b.latest[d.Identity] = stepRec{d.Rank, d.Step, d.Epoch, d.Losses, d.Val}
		}
	}
	slices.SortFunc(forged, func(x, y transport.StepDone) int { return cmp.Compare(x.Identity, y.Identity) })
	return forged
}

// low returns the progress to commit for j: the highest step every rank
// that counts has finished, and whether it is past the committed one. By
// rank, or, once an elastic job names its ranks, by identity over those
// that run the next step and every epoch after it. Only reports of the
// job's current timeline (epochs from the last rollback on) count.
func (b *stepBook) low(j *api.Job) (uint64, bool) {
	if j == nil || j.Final() {
		return 0, false
	}
	committed, timeline := j.LastStep, j.Timeline()
	stepOf := func(r stepRec) uint64 {
		if r.epoch < timeline {
			return 0 // an abandoned timeline's
		}
		return r.step
	}
	last := uint64(len(j.Epochs) - 1)
	spec, members := j.World(last)
	var low uint64
	if members != nil {
		// The identities that run both the next step (under its epoch)
		// and the epochs after it: a lost rank stops counting once an
		// epoch leaves it out, a returning one starts when its epoch
		// runs.
		low = ^uint64(0)
		for _, id := range members {
			in := true
			for k := j.EpochFor(committed + 1).Epoch; k < last; k++ {
				if _, m := j.World(k); m != nil && !slices.Contains(m, id) {
					in = false
				}
			}
			if in {
				low = min(low, stepOf(b.latest[id]))
			}
		}
	} else {
		perRank := make([]uint64, spec.WorldSize)
		for _, r := range b.latest {
			if r.rank < spec.WorldSize {
				perRank[r.rank] = max(perRank[r.rank], stepOf(r))
			}
		}
		low = slices.Min(perRank)
	}
	return low, low > committed
}

// losses returns, for progress committed up to step low, the ranks'
// mean training loss of step low when every rank of the current world
// reported one, and their mean validation loss of the newest step they
// all report a validation of (nil when they do not agree yet). Each
// rank's latest report from the current timeline counts.
func (b *stepBook) losses(j *api.Job, low uint64) (loss, val *api.StepLoss) {
	if j == nil {
		return nil, nil
	}
	spec, _ := j.World(uint64(len(j.Epochs) - 1))
	timeline := j.Timeline()
	per := make([]*stepRec, spec.WorldSize)
	for id := range b.latest {
		r := b.latest[id]
		if r.epoch < timeline || r.rank >= spec.WorldSize {
			continue
		}
		if p := per[r.rank]; p == nil || r.epoch > p.epoch || r.epoch == p.epoch && r.step > p.step {
			per[r.rank] = &r
		}
	}
	sum, vsum := 0.0, 0.0
	haveLoss, haveVal := true, true
	var vstep uint64
	for i, r := range per {
		if r == nil {
			return nil, nil
		}
		k := slices.IndexFunc(r.losses, func(l transport.StepLoss) bool { return l.Step == low })
		if k < 0 {
			haveLoss = false
		} else {
			sum += r.losses[k].Loss
		}
		if r.val == nil || (i > 0 && r.val.Step != vstep) {
			haveVal = false
		} else {
			vstep = r.val.Step
			vsum += r.val.Loss
		}
	}
	n := float64(len(per))
	if n == 0 {
		return nil, nil
	}
	if haveLoss {
		loss = &api.StepLoss{Step: low, Loss: sum / n}
	}
	if haveVal && vstep <= low {
		val = &api.StepLoss{Step: vstep, Loss: vsum / n}
	}
	return loss, val
}

// absentNow returns a job's ranks without a lease (Present false among
// the rendezvous' members ms), each since when it was first seen so: the
// time in prev for a rank still missing under the same identity, now for
// the others.
func absentNow(prev []api.Absent, ms []rendezvous.Member, now time.Time) []api.Absent {
	seen := make(map[uint64]api.Absent, len(prev))
	for _, p := range prev {
		seen[p.Rank] = p
	}
	var out []api.Absent
	for _, m := range ms {
		if m.Present {
			continue
		}
		x := api.Absent{Rank: m.Rank, Identity: m.Identity, Since: now}
		if p, ok := seen[m.Rank]; ok && p.Identity == m.Identity {
			x.Since = p.Since
		}
		out = append(out, x)
	}
	return out
}

// resizable reports whether j's world may change now: it runs under an
// agreed current epoch.
func resizable(j *api.Job) bool {
	cur := j.Current()
	return j.Status == api.StatusRunning && cur.Outcome != nil && cur.Outcome.Agreed
}

// resizing is an elastic job's next world, as planResize decides it.
type resizing struct {
	spec     shard.Spec // unresolved: the current spec with the new sizes
	members  []string   // the new world's identities in rank order
	boundary uint64     // its first step
	restore  *api.Restore
	reason   string
}

// planResize decides whether elastic job j changes its world, from the
// rendezvous' members (present), the ranks the leader has seen without a
// lease and since when (absent), at now: nil when it keeps its world.
//
// A rank counts as gone once it has been absent for after (one that lost
// its lease while etcd restarted claims it again well before). With ranks
// gone and some kept, the world shrinks to the kept ones, rolling back to
// the last committed checkpoint: the lost ranks' shards of the state
// after it exist only there. With none gone and identities back that
// hold a rendezvous rank outside the world, it grows by whole tensor ×
// pipeline groups from a boundary past the horizon (the caller's
// boundary: the current epoch's start, raised by the epoch's commit). The
// new world keeps the tensor and pipeline degrees and gives the
// data-parallel group the rest; its ranks are the live identities in
// their old rank order, then those back in rendezvous order.
func planResize(j *api.Job, present []rendezvous.Member, absent []api.Absent, now time.Time, after time.Duration) (*resizing, error) {
	if !resizable(j) {
		return nil, nil
	}
	cur := j.Current()
	spec, members := j.World(cur.Epoch)
	if members == nil {
		members = make([]string, spec.WorldSize)
		for _, m := range present {
			if m.Rank < spec.WorldSize {
				members[m.Rank] = m.Identity
			}
		}
	}
	live := map[string]bool{}
	for _, m := range present {
		if m.Present {
			live[m.Identity] = true
		}
	}
	longGone := map[string]bool{}
	for _, x := range absent {
		if now.Sub(x.Since) >= after {
			longGone[x.Identity] = true
		}
	}
	var keep, gone []string
	var lost []uint64
	inEpoch := map[string]bool{}
	for r, id := range members {
		inEpoch[id] = true
		if live[id] || !longGone[id] {
			keep = append(keep, id)
		} else {
			gone = append(gone, id)
			lost = append(lost, uint64(r))
		}
	}
	// Identities that hold a rendezvous rank but are not in the world:
	// ranks that came back, in rendezvous order.
	var back []string
	for _, m := range present {
		if m.Present && m.Identity != "" && !inEpoch[m.Identity] {
			back = append(back, m.Identity)
		}
	}
	group := spec.TensorParallel.Degree * spec.Stages()
	r := &resizing{boundary: cur.StartStep}
	switch {
	case len(gone) > 0 && len(keep) > 0:
		if uint64(len(keep))%group != 0 {
			return nil, fmt.Errorf("coord: job %q kept %d ranks, not a multiple of tensor × pipeline %d: it waits for ranks to return", j.Spec.Name, len(keep), group)
		}
		r.restore = &api.Restore{Rollback: true}
		from := "the initial state"
		if k := j.LastCheckpoint(); k != nil {
			r.restore.Step = k.Step
			from = fmt.Sprintf("the checkpoint of step %d", k.Step)
		}
		r.boundary = r.restore.Step + 1
		r.reason = fmt.Sprintf("ranks %v (%s) left: world %d → %d, restoring %s", lost, strings.Join(gone, ", "), spec.WorldSize, len(keep), from)
	case len(gone) == 0 && len(back) > 0:
		// Growth: every rank of the world is live and stepping, so the
		// usual boundary past the horizon is reachable.
		n := (uint64(len(keep)+len(back)) / group) * group
		if n <= uint64(len(keep)) {
			return nil, nil // not enough returned ranks for a whole group yet
		}
		back = back[:n-uint64(len(keep))]
		keep = append(keep, back...)
		r.restore = &api.Restore{} // at the boundary, from the old world's checkpoint there
		r.reason = fmt.Sprintf("%s came back: world %d → %d, from the checkpoint at the boundary", strings.Join(back, ", "), spec.WorldSize, len(keep))
	default:
		return nil, nil
	}
	r.members = keep
	r.spec = *spec
	r.spec.WorldSize = uint64(len(keep))
	r.spec.DataParallel.Degree = r.spec.WorldSize / group
	return r, nil
}
