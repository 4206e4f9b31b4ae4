package coord

import (
	"context"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/shard"
	"github.com/tmmu/tmmu/transport"
)

// resize carries out planResize for elastic job j: it reads the
// rendezvous, plans every rank of the new world and commits its epoch.
func (a *agreement) resize(ctx context.Context, j *api.Job) error {
	if !resizable(j) {
		return nil // no rendezvous read for a job that cannot resize now
	}
	cur := j.Current()
	present, err := a.rv.Members(ctx, j.Spec.Name, j.Spec.ShardSpec.WorldSize) // the rendezvous' numbering
	if err != nil {
		return err
	}
	r, err := planResize(j, present, a.n.absentOf(j.Spec.Name), time.Now(), a.shrinkAfter)
	if r == nil || err != nil {
		return err
	}
	rs, err := r.spec.Resolve()
	if err != nil {
		return err
	}
	model, opts, _ := j.Inputs(cur.Epoch)
	m, err := a.n.decodeModel(ctx, model)
	if err != nil {
		return err
	}
	gp, _, err := shard.PlanRanks(m, rs, lend(opts))
	if err != nil {
		return err
	}
	e := &api.Epoch{Epoch: cur.Epoch + 1, StartStep: r.boundary, GlobalPlanHash: gp.Hash, IRHash: gp.IRHash, ShardSpec: rs, Members: r.members,
		Reason: r.reason, CommittedAt: time.Now().UnixNano(), Restore: r.restore}
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
