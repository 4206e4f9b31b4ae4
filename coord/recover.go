package coord

import (
	"context"
	"slices"
	"time"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/recovery"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/transport"
)

// Leading is what the leader's loops use besides raft (RunAgreement).
type Leading struct {
	Transport *transport.Transport
	// Rendezvous, when set, lets the leader see which ranks hold their
	// etcd lease (tmmu status shows the missing ones) and shrink elastic
	// jobs whose ranks left for good.
	Rendezvous *rendezvous.Client
	// Store holds the checkpoints; nil means the JetStream object store
	// bucket checkpoint.DefaultBucket on Transport's connection. The
	// leader deletes what no kept checkpoint needs.
	Store checkpoint.Store
	// ShrinkAfter is how long a rank of an elastic job must have been
	// missing before the job shrinks without it (default
	// DefaultShrinkAfter): a rank whose lease lapsed while etcd
	// restarted claims it again well within that.
	ShrinkAfter time.Duration
	// Claims checks that a plan report's identity held its rank's etcd
	// claim at the revision the report names; nil means Rendezvous does.
	// With neither, reports are not bound to claims (an unsecured
	// cluster, logged as such).
	Claims ClaimChecker
}

// DefaultShrinkAfter is Leading.ShrinkAfter's default.
const DefaultShrinkAfter = 10 * time.Second

// recoveryJob is what package recovery's decisions need of j.
func recoveryJob(j *api.Job) recovery.Job {
	rj := recovery.Job{LastStep: j.LastStep, Final: j.Final(), Paused: j.Paused != ""}
	for i := range j.Epochs {
		e := &j.Epochs[i]
		re := recovery.Epoch{Epoch: e.Epoch, StartStep: e.StartStep, World: j.WorldSize(e.Epoch), Agreed: e.Outcome != nil && e.Outcome.Agreed}
		if e.Restore != nil {
			re.Restore = &recovery.Restore{Step: e.Restore.Step, Rollback: e.Restore.Rollback}
		}
		rj.Epochs = append(rj.Epochs, re)
	}
	for _, k := range j.Checkpoints {
		rj.Checkpoints = append(rj.Checkpoints, recovery.Manifest{Step: k.Step, Epoch: k.Epoch, World: k.World})
	}
	return rj
}

// watchCheckpoints tallies the checkpoint reports of one job and commits
// each complete checkpoint, then announces it and collects garbage. A
// new leader replays the stored reports, so a checkpoint completed
// during a failover is committed by the next leader.
func (a *agreement) watchCheckpoints(ctx context.Context, job string) {
	defer a.forgetKey(job + "/checkpoints")
	ch, err := a.t.WatchCheckpoints(ctx, job)
	if err != nil {
		a.n.log.Warn("watching checkpoint reports", "job", job, "err", err)
		return
	}
	var tally recovery.Tally
	for r := range ch {
		s, _ := a.n.applied()
		j := s.Jobs[job]
		if j == nil {
			return
		}
		if ok, _ := j.HolderOf(r.Epoch, r.Rank, r.Identity); !ok {
			// (Undecided too: a checkpoint's step ran under an agreed
			// epoch, and the leader applied every outcome committed
			// before it led before it started watching (State's
			// barrier); it commits the later ones itself.)
			a.forged(ForgedCheckpoint, job, r.Epoch, r.Rank, r.Identity, "not the rank's holder under the epoch")
			continue
		}
		rj := recoveryJob(j)
		shards, ok := tally.Add(&rj, recovery.Report{Step: r.Step, Epoch: r.Epoch, Rank: r.Rank, Identity: r.Identity, Digest: r.Digest, State: r.StateHash, Bytes: r.Bytes, Nanos: r.Nanos})
		if !ok {
			continue
		}
		k := &api.Checkpoint{Step: r.Step, Epoch: r.Epoch, World: uint64(len(shards)), CommittedAt: time.Now().UnixNano()}
		for _, sh := range shards {
			k.Shards = append(k.Shards, api.CheckpointShard{Rank: sh.Rank, Identity: sh.Identity, Digest: sh.Digest, StateHash: sh.State, Bytes: sh.Bytes})
			k.Bytes += sh.Bytes
			k.WriteNanos = max(k.WriteNanos, sh.Nanos)
		}
		if _, err := a.n.Apply(&api.Command{Kind: api.CmdCheckpoint, Job: job, Checkpoint: k}, 5*time.Second); err != nil {
			// The reports stay stored: the watch starts over (on this
			// node if it still leads, else on the next leader).
			a.n.log.Warn("committing a checkpoint", "job", job, "step", k.Step, "err", err)
			return
		}
		a.n.metrics.checkpoints.Inc()
		a.n.metrics.checkpointBytes.Set(float64(k.Bytes))
		a.n.metrics.checkpointWrite.Observe(float64(k.WriteNanos) / 1e9)
		a.n.log.Info("checkpoint committed", "job", job, "step", k.Step, "epoch", k.Epoch, "world", k.World, "bytes", k.Bytes)
		a.announce(j, transport.Announcement{Job: job, Epoch: k.Epoch, Kind: transport.KindCheckpoint, StartStep: k.Step})
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := a.t.ForgetCheckpoint(cctx, job, k.Step); err != nil {
			a.n.log.Debug("forgetting checkpoint reports", "job", job, "err", err)
		}
		if s, _ := a.n.applied(); s.Jobs[job] != nil {
			a.collect(cctx, job, s.Jobs[job])
		}
		cancel()
	}
}

// collect deletes the job's stored objects that no kept checkpoint needs
// (recovery.Garbage): older checkpoints, partial ones, dropped ones.
func (a *agreement) collect(ctx context.Context, job string, j *api.Job) {
	objs, err := a.store.List(ctx, checkpoint.JobPrefix(job))
	if err != nil {
		a.n.log.Warn("listing checkpoint objects", "job", job, "err", err)
		return
	}
	var in []recovery.Object
	for _, o := range objs {
		if _, step, rank, d, err := checkpoint.ParseName(o.Name); err == nil {
			in = append(in, recovery.Object{Name: o.Name, Step: step, Rank: rank, Digest: d})
		}
	}
	var kept []recovery.Kept
	for _, k := range j.Checkpoints {
		kk := recovery.Kept{Step: k.Step}
		for _, sh := range k.Shards {
			kk.Digests = append(kk.Digests, sh.Digest)
		}
		kept = append(kept, kk)
	}
	steps := map[uint64]bool{}
	for _, name := range recovery.Garbage(in, kept) {
		if err := a.store.Delete(ctx, name); err != nil {
			a.n.log.Warn("deleting a checkpoint object", "object", name, "err", err)
			continue
		}
		if _, step, _, _, err := checkpoint.ParseName(name); err == nil {
			steps[step] = true
		}
		a.n.metrics.collected.Inc()
	}
	for step := range steps {
		a.t.ForgetCheckpoint(ctx, job, step) // partial ones' reports
	}
}

// handleRecovery decides a rank's recovery request (recovery.Decide) and
// commits the decision.
func (a *agreement) handleRecovery(q transport.RecoveryRequest) {
	s, _ := a.n.State()
	j := s.Jobs[q.Job]
	if j == nil {
		return
	}
	if ok, decided := j.HolderOf(q.Epoch, q.Rank, q.Identity); !ok {
		if decided {
			a.forged(ForgedRecovery, q.Job, q.Epoch, q.Rank, q.Identity, "not the rank's holder under the epoch")
		}
		return // undecided: the rank asks again
	}
	d := recovery.Decide(recoveryJob(j), recovery.Request{Kind: recovery.RequestKind(q.Kind), Rank: q.Rank, Identity: q.Identity, Epoch: q.Epoch, Step: q.Step, Detail: q.Detail})
	a.n.metrics.recoveries.WithLabelValues(q.Kind, string(d.Kind)).Inc()
	switch d.Kind {
	case recovery.None:
		a.n.log.Debug("recovery request", "job", q.Job, "kind", q.Kind, "rank", q.Rank, "step", q.Step, "decision", d.Reason)
		return
	case recovery.Rollback:
		cur := j.Current()
		next := &api.Epoch{Epoch: cur.Epoch + 1, StartStep: d.To + 1, Reason: d.Reason, GlobalPlanHash: cur.GlobalPlanHash, IRHash: cur.IRHash,
			Expected: slices.Clone(cur.Expected), Restore: &api.Restore{Step: d.To, Rollback: true}, CommittedAt: time.Now().UnixNano()}
		c := &api.Command{Kind: api.CmdEpoch, Job: q.Job, New: next}
		if d.Drop != nil {
			c.Drop = &d.Drop.Step
		}
		if _, err := a.n.Apply(c, 10*time.Second); err != nil {
			a.n.log.Warn("committing a rollback", "job", q.Job, "err", err)
			return
		}
		a.n.log.Warn("rollback committed", "job", q.Job, "epoch", next.Epoch, "to_step", d.To, "reason", d.Reason)
		a.announce(j, transport.Announcement{Job: q.Job, Epoch: next.Epoch, Kind: transport.KindEpoch, StartStep: next.StartStep, Reason: trim(d.Reason)})
	case recovery.Pause:
		if _, err := a.n.Apply(&api.Command{Kind: api.CmdPause, Job: q.Job, Reason: d.Reason, Step: q.Step}, 5*time.Second); err != nil {
			a.n.log.Warn("pausing a job", "job", q.Job, "err", err)
			return
		}
		a.n.log.Warn("job paused", "job", q.Job, "reason", d.Reason)
	case recovery.Fail:
		if _, err := a.n.Apply(&api.Command{Kind: api.CmdFail, Job: q.Job, Reason: d.Reason}, 5*time.Second); err != nil {
			a.n.log.Warn("failing a job", "job", q.Job, "err", err)
			return
		}
		a.n.log.Error("job failed", "job", q.Job, "reason", d.Reason)
		a.announce(j, transport.Announcement{Job: q.Job, Epoch: j.Current().Epoch, Kind: transport.KindAbort, Reason: trim(d.Reason)})
	}
}

// mark is what the leader last announced of a job.
type mark struct {
	status api.JobStatus
	paused string
	exists bool
}

// announceChanges tells a job's workers when its status or pause changed
// or it was deleted (they fetch it and stop or go on), and cleans up
// after deleted jobs: their reports and checkpoint objects.
func (a *agreement) announceChanges(ctx context.Context, s *api.State) {
	for _, name := range s.Names() {
		j := s.Jobs[name]
		m := mark{status: j.Status, paused: j.Paused, exists: true}
		if old, ok := a.marks[name]; ok && old != m {
			a.announce(j, transport.Announcement{Job: name, Epoch: j.Current().Epoch, Kind: transport.KindHold, Reason: trim(j.Paused)})
		}
		a.marks[name] = m
	}
	for name := range s.Deleted {
		if m, ok := a.marks[name]; ok && !m.exists {
			continue
		}
		a.marks[name] = mark{}
		a.announce(nil, transport.Announcement{Job: name, Kind: transport.KindHold, Reason: "deleted"})
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := a.t.ForgetJob(cctx, name); err != nil {
				a.n.log.Warn("forgetting a deleted job", "job", name, "err", err)
			}
			a.forgetRanks(cctx, name)
			objs, err := a.store.List(cctx, checkpoint.JobPrefix(name))
			if err != nil {
				a.n.log.Warn("listing a deleted job's checkpoints", "job", name, "err", err)
			}
			for _, o := range objs {
				if err := a.store.Delete(cctx, o.Name); err != nil {
					a.n.log.Warn("deleting a deleted job's checkpoint", "object", o.Name, "err", err)
					continue
				}
				a.n.metrics.collected.Inc()
			}
			if s, _ := a.n.applied(); s != nil {
				if err := a.n.collectIRs(cctx, s); err != nil {
					a.n.log.Warn("deleting a deleted job's IR", "job", name, "err", err)
				}
			}
		}()
	}
}

// forgetRanks removes a deleted job's rank reservations from etcd, so a
// job submitted again under the name does not inherit them (an old
// identity reserving a rank outside a smaller world), unless the name
// was submitted again meanwhile.
func (a *agreement) forgetRanks(ctx context.Context, name string) {
	if a.rv == nil {
		return
	}
	if s, _ := a.n.applied(); s == nil || s.Jobs[name] != nil {
		return
	}
	n, err := a.rv.ForgetJob(ctx, name)
	if err != nil {
		a.n.log.Warn("removing a deleted job's rank reservations", "job", name, "err", err)
		return
	}
	a.n.log.Info("removed a deleted job's rank reservations", "job", name, "keys", n)
}

// trackAbsent reads, at most every second, which ranks of each live job
// hold no lease in etcd, and since when (for tmmu status, on every node,
// and the leader's elastic shrinking).
func (a *agreement) trackAbsent(ctx context.Context, s *api.State) {
	if a.rv == nil || time.Since(a.lastAbsent) < time.Second {
		return
	}
	a.lastAbsent = time.Now()
	now := time.Now()
	out := map[string][]api.Absent{}
	problems := map[string][]string{}
	for _, name := range s.Names() {
		j := s.Jobs[name]
		if j.Final() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ms, probs, err := a.rv.Survey(cctx, name, j.Spec.ShardSpec.WorldSize)
		cancel()
		if err != nil {
			out[name], problems[name] = a.n.absentOf(name), a.n.problemsOf(name) // keep what was seen
			continue
		}
		out[name] = absentNow(a.n.absentOf(name), ms, now)
		if len(probs) > 0 {
			problems[name] = probs
			if !slices.Equal(probs, a.n.problemsOf(name)) {
				a.n.log.Warn("malformed rank keys in etcd: their identities cannot claim until released (tmmu rank release)", "job", name, "problems", probs)
			}
		}
	}
	a.n.absentMu.Lock()
	a.n.absent, a.n.problems = out, problems
	a.n.absentMu.Unlock()
}

// problemsOf returns the malformed rendezvous keys of job as this node
// last saw them.
func (n *Node) problemsOf(job string) []string {
	n.absentMu.Lock()
	defer n.absentMu.Unlock()
	return n.problems[job]
}

// absentOf returns the missing ranks of job as this node last saw them.
func (n *Node) absentOf(job string) []api.Absent {
	n.absentMu.Lock()
	defer n.absentMu.Unlock()
	return slices.Clone(n.absent[job])
}

func (a *agreement) forgetKey(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if cancel, ok := a.watch[key]; ok {
		cancel()
		delete(a.watch, key)
	}
}
