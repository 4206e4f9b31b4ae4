package coord

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/shard"
	"github.com/tmmu/tmmu/transport"
)

// resize replans an elastic job whose current epoch lost ranks for good
// (their rendezvous leases gone for ShrinkAfter) for the ranks still
// present, or, when every rank is live and lost ranks came back, for the
// larger world (whole tensor × pipeline groups only).
//
// A shrink rolls the job back to its last committed checkpoint: the lost
// ranks' shards of the state after it exist only there. The new world
// restores it, recut for its size (package checkpoint), and runs the
// steps after it again. A growth starts at a boundary past the horizon,
// from the checkpoint the old world writes just before it. The new epoch
// keeps the tensor and pipeline degrees and gives the data-parallel group
// the rest; its ranks are the live identities in their old rank order.
func (a *agreement) resize(ctx context.Context, j *api.Job) error {
	cur := j.Current()
	if j.Status != api.StatusRunning || cur.Outcome == nil || !cur.Outcome.Agreed {
		return nil
	}
	spec, members := j.World(cur.Epoch)
	world := j.Spec.ShardSpec.WorldSize // the rendezvous' numbering
	present, err := a.rv.Members(ctx, j.Spec.Name, world)
	if err != nil {
		return err
	}
	if members == nil {
		members = make([]string, spec.WorldSize)
		for _, m := range present {
			if m.Rank < spec.WorldSize {
				members[m.Rank] = m.Identity
			}
		}
	}
	// A rank counts as gone once the leader has seen its lease missing
	// for shrinkAfter: one that lost it while etcd restarted claims it
	// again well before.
	live := map[string]bool{}
	for _, m := range present {
		if m.Present {
			live[m.Identity] = true
		}
	}
	longGone := map[string]bool{}
	for _, x := range a.n.absentOf(j.Spec.Name) {
		if time.Since(x.Since) >= a.shrinkAfter {
			longGone[x.Identity] = true
		}
	}
	for _, id := range members {
		if !live[id] && !longGone[id] {
			live[id] = true // missing, not for long enough yet
		}
	}
	var keep, gone []string
	var lost []uint64
	inEpoch := map[string]bool{}
	for r, id := range members {
		inEpoch[id] = true
		if live[id] {
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
	boundary := cur.StartStep
	var restore *api.Restore
	var reason string
	switch {
	case len(gone) > 0 && len(keep) > 0:
		if uint64(len(keep))%group != 0 {
			return fmt.Errorf("coord: job %q kept %d ranks, not a multiple of tensor × pipeline %d: it waits for ranks to return", j.Spec.Name, len(keep), group)
		}
		restore = &api.Restore{Rollback: true}
		from := "the initial state"
		if k := j.LastCheckpoint(); k != nil {
			restore.Step = k.Step
			from = fmt.Sprintf("the checkpoint of step %d", k.Step)
		}
		boundary = restore.Step + 1
		reason = fmt.Sprintf("ranks %v (%s) left: world %d → %d, restoring %s", lost, strings.Join(gone, ", "), spec.WorldSize, len(keep), from)
	case len(gone) == 0 && len(back) > 0:
		// Growth: every rank of the world is live and stepping, so the
		// usual boundary past the horizon is reachable.
		n := (uint64(len(keep)+len(back)) / group) * group
		if n <= uint64(len(keep)) {
			return nil // not enough returned ranks for a whole group yet
		}
		back = back[:n-uint64(len(keep))]
		keep = append(keep, back...)
		restore = &api.Restore{} // at the boundary, from the old world's checkpoint there
		reason = fmt.Sprintf("%s came back: world %d → %d, from the checkpoint at the boundary", strings.Join(back, ", "), spec.WorldSize, len(keep))
	default:
		return nil
	}
	next := *spec
	next.WorldSize = uint64(len(keep))
	next.DataParallel.Degree = next.WorldSize / group
	rs, err := next.Resolve()
	if err != nil {
		return err
	}
	model, opts, _ := j.Inputs(cur.Epoch)
	m, err := a.n.decodeModel(ctx, model)
	if err != nil {
		return err
	}
	gp, _, err := shard.PlanRanks(m, rs, opts)
	if err != nil {
		return err
	}
	e := &api.Epoch{Epoch: cur.Epoch + 1, StartStep: boundary, GlobalPlanHash: gp.Hash, IRHash: gp.IRHash, ShardSpec: rs, Members: keep,
		Reason: reason, CommittedAt: time.Now().UnixNano(), Restore: restore}
	for _, r := range gp.Ranks {
		e.Expected = append(e.Expected, r.PlanHash)
	}
	if _, err := a.n.Apply(&api.Command{Kind: api.CmdEpoch, Job: j.Spec.Name, New: e}, 10*time.Second); err != nil {
		return err
	}
	a.announce(j, transport.Announcement{Job: j.Spec.Name, Epoch: e.Epoch, Kind: transport.KindEpoch, StartStep: e.StartStep, Reason: trim(e.Reason)})
	return nil
}

// checkMembership runs resize for every elastic job, at most every
// interval.
func (a *agreement) checkMembership(ctx context.Context, s *api.State) {
	if a.rv == nil || time.Since(a.lastCheck) < 200*time.Millisecond {
		return
	}
	a.lastCheck = time.Now()
	for _, name := range s.Names() {
		if j := s.Jobs[name]; j.Spec.Elastic {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := a.resize(cctx, j); err != nil {
				a.n.log.Warn("checking an elastic job's ranks", "job", name, "err", err)
			}
			cancel()
		}
	}
}
