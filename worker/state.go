package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/recovery"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/transport"
)

// recoveryEpoch is what the decisions need of epoch e.
func recoveryEpoch(job *api.Job, e *api.Epoch) recovery.Epoch {
	spec, _ := job.World(e.Epoch)
	re := recovery.Epoch{Epoch: e.Epoch, StartStep: e.StartStep, World: spec.WorldSize, Agreed: e.Outcome != nil && e.Outcome.Agreed}
	if e.Restore != nil {
		re.Restore = &recovery.Restore{Step: e.Restore.Step, Rollback: e.Restore.Rollback}
	}
	return re
}

// holdState brings the state step needs into p's executor, as
// recovery.Prepare decides; it says whether p's executor holds it.
func (w *run) holdState(ctx context.Context, job *api.Job, p *epochPlan, step uint64) (bool, error) {
	if w.holder == nil && p.exec == nil {
		// Holding nothing: build the epoch's executor first, which says
		// whether there is model state to hold at all.
		if err := w.become(p, step, nil); err != nil {
			return false, err
		}
	}
	e := &job.Epochs[p.epoch]
	started := p.put > 0 || p.barrier.reported(p.rank, w.cfg.Identity)
	if !started && e.Restore != nil && step > e.StartStep {
		// Whether a rank may be past the epoch's first step hangs on
		// this rank's own reports: read what is stored, in case an
		// earlier process of this identity made some.
		stored, err := w.cfg.Transport.Steps(ctx, w.cfg.Job, p.epoch)
		if err != nil {
			return false, transient(err)
		}
		for _, r := range stored {
			started = started || r.Rank == p.rank && r.Identity == w.cfg.Identity
		}
	}
	a := recovery.Prepare(step, recoveryEpoch(job, e), w.hold, started,
		func(s uint64) bool { return job.Checkpoint(s) != nil },
		func(s uint64) bool { return w.wrote(job, s) })
	switch a.Kind {
	case recovery.Ready:
		return true, nil
	case recovery.Rewind:
		w.log.Info("going back to the epoch's first step", "epoch", p.epoch, "from", step, "to", a.Step+1, "reason", a.Reason)
		return false, &skipTo{step: a.Step + 1}
	case recovery.AskRollback:
		w.ask(p, recovery.Stateless, step, a.Reason)
		return false, nil
	case recovery.Wait:
		if a.Checkpoint && w.holder != nil {
			if err := w.checkpoint(ctx, w.holder, a.Step, w.statsOf(a.Step)); err != nil {
				return false, err
			}
		}
		return false, nil
	case recovery.Carry:
		if a.Checkpoint {
			if err := w.checkpoint(ctx, w.holder, step-1, w.statsOf(step-1)); err != nil {
				return false, err
			}
		}
		if err := w.become(p, step, w.holder); err != nil {
			return false, err
		}
	case recovery.Init:
		if p.exec == nil || !p.fresh {
			if err := w.become(p, step, nil); err != nil {
				return false, err
			}
		}
		w.log.Info("starting from the initial state", "epoch", p.epoch, "step", step, "reason", a.Reason)
	case recovery.Load:
		if b, bad := w.bad[a.Step]; bad {
			w.ask(p, b.kind, a.Step, b.reason)
			return false, nil
		}
		if p.exec == nil {
			if err := w.become(p, step, nil); err != nil {
				return false, err
			}
		}
		if err := w.restore(ctx, job, p, a.Step); err != nil {
			return false, err
		}
	}
	p.fresh = false
	w.hold = recovery.Holding{Valid: true, Step: step - 1, Epoch: p.epoch, Stateless: w.hold.Stateless}
	w.holder = p
	return true, nil
}

// statsOf returns the stats of step when it was the last step run.
func (w *run) statsOf(step uint64) runner.StepStats {
	if w.lastStep == step {
		return w.last
	}
	return runner.StepStats{}
}

// wrote reports whether this worker stored its shard of the checkpoint
// of step in the job's current timeline.
func (w *run) wrote(job *api.Job, step uint64) bool {
	w.ckptMu.Lock()
	defer w.ckptMu.Unlock()
	sw, ok := w.written[step]
	return ok && sw.epoch == job.EpochFor(step).Epoch
}

// ask publishes a recovery request, at most once per poll interval for
// the same kind and step.
func (w *run) ask(p *epochPlan, kind recovery.RequestKind, step uint64, detail string) {
	w.askFor(p.epoch, p.rank, kind, step, detail)
}

func (w *run) askFor(epoch, rank uint64, kind recovery.RequestKind, step uint64, detail string) {
	w.askMu.Lock()
	defer w.askMu.Unlock()
	key := fmt.Sprintf("%s/%d/%d", kind, epoch, step)
	if t, ok := w.asked[key]; ok && time.Since(t) < w.cfg.Poll {
		return
	}
	if len(detail) > transport.MaxReasonLen {
		detail = detail[:transport.MaxReasonLen]
	}
	q := transport.RecoveryRequest{Job: w.cfg.Job, Kind: string(kind), Epoch: epoch, Rank: rank, Identity: w.cfg.Identity, Step: step, Detail: detail, ClaimRevision: w.claimRevision()}
	if err := w.cfg.Transport.PublishRecovery(q); err != nil {
		w.log.Warn("asking the leader", "kind", kind, "err", err)
		return
	}
	if _, ok := w.asked[key]; !ok {
		w.log.Warn("asking the leader for help", "kind", kind, "epoch", epoch, "step", step, "detail", detail)
		if kind == recovery.Stateless {
			w.mu.Lock()
			w.res.Rollbacks++
			w.mu.Unlock()
		}
	}
	w.asked[key] = time.Now()
}

// become makes p the running epoch: its executor is built fresh (the
// initial state), and from holds the state to carry into it (nil:
// none). Older epochs' executors are released: their last step ran.
func (w *run) become(p *epochPlan, step uint64, from *epochPlan) error {
	if p.exec != nil {
		// A fresh start in an epoch that ran before (a step abandoned
		// halfway): start over from a new executor. (from is always an
		// earlier epoch.)
		closeExecutor(p.exec)
		p.exec = nil
	}
	if !w.started {
		w.res.AgreementTime = time.Since(p.reported)
		w.started = true
	} else if from != nil {
		sw := Switch{Epoch: p.epoch, Step: step, Old: w.res.PlanHash, New: p.hash}
		w.res.Switches = append(w.res.Switches, sw)
		w.log.Info("switched plans at a safepoint", "epoch", sw.Epoch, "step", sw.Step, "old_plan_hash", sw.Old.Short(), "new_plan_hash", sw.New.Short())
	}
	exec, err := newExecutor(w.cfg, p.graph, p.plan.Plan)
	if err != nil {
		return err
	}
	if m, ok := exec.(runner.MemoryReporter); ok {
		if r := m.MemoryReport(); r != "" {
			w.log.Info("plan applied to the device", "epoch", p.epoch, "plan_hash", p.hash.Short(), "memory", r)
		}
	}
	if c, ok := exec.(runner.Configurer); ok {
		origin := func(batch uint64) (uint64, uint64, error) {
			j := w.current()
			if j == nil || p.epoch >= uint64(len(j.Epochs)) {
				return 0, 0, fmt.Errorf("worker: the job as last fetched has no epoch %d to start its data stream at", p.epoch)
			}
			world := max(j.WorldSize(p.epoch), 1)
			start := j.Epochs[p.epoch].StartStep
			return start, j.RowsBefore(p.epoch, start, batch/world), nil
		}
		if err := c.Configure(w.data.setup(runner.Setup{DataMode: w.dataMode, Seed: w.seed, Epoch: p.epoch}, origin)); err != nil {
			closeExecutor(exec)
			return err
		}
	}
	_, stateful := exec.(runner.StateCarrier)
	w.hold.Stateless = !stateful
	if from != nil && from.exec != nil {
		if err := carryState(from.exec, exec); err != nil {
			closeExecutor(exec)
			return fmt.Errorf("worker: switching to epoch %d: %w", p.epoch, err)
		}
	}
	w.mu.Lock()
	for _, q := range w.plans {
		if q != p && q.exec != nil {
			closeExecutor(q.exec)
			q.exec = nil
		}
	}
	w.running = p.epoch
	for i := range w.early {
		if i < p.epoch {
			delete(w.early, i)
		}
	}
	w.mu.Unlock()
	p.exec, p.fresh = exec, from == nil
	if w.res.Epochs == 0 || w.res.Epoch != p.epoch {
		w.res.Epochs++
	}
	w.res.Epoch, w.res.PlanHash, w.res.Executor, w.res.Rank = p.epoch, p.hash, exec.Name(), p.rank
	w.res.Model, w.res.Bytes = p.plan.ModelState, p.plan.Plan.Metrics.ReservedBytes
	return nil
}

// checkpoint takes this rank's shard of the state after step, which p's
// executor holds, and queues it for the writer, which stores and reports
// it while the steps go on. At most one shard waits behind the one being
// written: a worker that checkpoints faster than the store takes them
// waits here. A full store pauses the job: the writer tells the leader
// and retries until the shard is stored.
func (w *run) checkpoint(ctx context.Context, p *epochPlan, step uint64, stats runner.StepStats) error {
	w.ckptMu.Lock()
	sw, ok := w.written[step]
	w.ckptMu.Unlock()
	if ok && sw.epoch == p.epoch {
		return nil
	}
	t := time.Now()
	s := &checkpoint.Shard{Step: step, Rank: p.rank, World: p.world, Seed: w.seed, DataDigest: w.data.digest()}
	if x, ok := p.exec.(runner.StateCarrier); ok {
		st, err := x.Export()
		if err != nil {
			return fmt.Errorf("worker: checkpoint of step %d: %w", step, err)
		}
		layout, err := w.layout(ctx, p)
		if err != nil {
			return err
		}
		if s.Tensors, err = checkpoint.FromState(layout, st.Tensors); err != nil {
			return err
		}
		s.OptimizerStep = st.OptimizerStep
		h, err := x.HashOf(st)
		if err != nil {
			return err
		}
		if s.StateHash, err = ir.ParseHash(h); err != nil {
			return err
		}
	}
	w.ckptMu.Lock()
	w.written[step] = shardWritten{epoch: p.epoch}
	w.ckptMu.Unlock()
	pending := shardJob{shard: s, epoch: p.epoch, rank: p.rank, stats: stats, began: t, every: w.current().Spec.Every()}
	w.startWriter()
	select {
	case w.queue <- pending:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shardJob is a shard for the writer.
type shardJob struct {
	shard       *checkpoint.Shard
	epoch, rank uint64
	stats       runner.StepStats
	began       time.Time
	every       uint64
}

// startWriter starts the checkpoint writer once per run.
func (w *run) startWriter() {
	w.writerOnce.Do(func() {
		w.watches.Add(1)
		go func() {
			defer w.watches.Done()
			for {
				select {
				case <-w.watchCtx.Done():
					return
				case j := <-w.queue:
					if err := w.write(w.watchCtx, j); err != nil && w.watchCtx.Err() == nil {
						w.log.Error("storing a checkpoint", "step", j.shard.Step, "err", err)
					}
				}
			}
		}()
	})
}

// write encodes, stores and reports one shard.
func (w *run) write(ctx context.Context, j shardJob) error {
	s, step := j.shard, j.shard.Step
	data, digest, err := checkpoint.Encode(s)
	if err != nil {
		return err
	}
	name := checkpoint.ObjectName(w.cfg.Job, step, j.rank, digest)
	var since time.Time
	for try := 0; ; try++ {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(len(data)/10e6)*time.Second)
		err = w.store.Put(actx, name, data)
		cancel()
		if err == nil {
			w.waited("storing a checkpoint", try)
			break
		}
		if errors.Is(err, checkpoint.ErrStoreFull) {
			w.askFor(j.epoch, j.rank, recovery.StoreFull, step, err.Error())
		} else if errors.Is(err, nats.ErrConnectionClosed) {
			return err
		}
		w.waiting("storing a checkpoint", fmt.Errorf("step %d: %w", step, err), try, &since)
		if err := backoff(ctx, try); err != nil {
			return err
		}
	}
	took := time.Since(j.began)
	// The shard is logged before it is reported: once reported it can be
	// committed, and a worker killed while the report is in flight must
	// still have logged what it committed to.
	attrs := []any{"step", step, "epoch", j.epoch, "digest", digest.Short(), "state_hash", s.StateHash.Short(), "bytes", len(data), "took", took.Round(time.Microsecond)}
	if j.stats.HasLoss {
		attrs = append(attrs, "loss", j.stats.Loss)
	}
	w.log.Info("checkpoint stored", attrs...)
	r := transport.CheckpointReport{Job: w.cfg.Job, Step: step, Epoch: j.epoch, Rank: j.rank, Identity: w.cfg.Identity,
		Digest: digest, StateHash: s.StateHash, Bytes: uint64(len(data)), Nanos: took.Nanoseconds(), ClaimRevision: w.claimRevision()}
	if err := w.retry(ctx, "reporting a checkpoint", func(c context.Context) error { return w.cfg.Transport.PutCheckpoint(c, r) }); err != nil {
		return err
	}
	w.ckptMu.Lock()
	for k, sw := range w.written {
		if k != step && sw.digest != (ir.Hash{}) {
			sw.data = nil // only the latest is kept in memory
			w.written[k] = sw
		}
		if k+4*j.every < step {
			delete(w.written, k)
		}
	}
	w.written[step] = shardWritten{epoch: j.epoch, digest: digest, data: data}
	w.ckptMu.Unlock()
	w.mu.Lock()
	w.res.Checkpoints++
	w.mu.Unlock()
	if w.cfg.Stats != nil {
		w.cfg.Stats.Checkpointed(step, uint64(len(data)), took)
	}
	return nil
}

// layout is the slices of the persistent tensors p's rank holds.
func (w *run) layout(ctx context.Context, p *epochPlan) ([]checkpoint.Slice, error) {
	global, err := w.model(ctx, w.current(), p.epoch)
	if err != nil {
		return nil, err
	}
	return checkpoint.Layout(p.graph, global, p.rank, p.world)
}

// restore loads the committed checkpoint of step into p's (fresh)
// executor: its shard of the same world from memory or the store, or
// every shard of another world, recut. Each object is checked against
// its digest; then the executor must seal exactly the state it was given,
// and — same world — the state hash the checkpoint recorded. A corrupt
// object is reported (the leader drops the checkpoint and rolls back to
// the one before); a state that does not match fails the job.
func (w *run) restore(ctx context.Context, job *api.Job, p *epochPlan, step uint64) error {
	x, ok := p.exec.(runner.StateCarrier)
	if !ok {
		return nil // nothing to restore into
	}
	// The job as polled lists checkpoints without their shards.
	full, err := w.cfg.Coordinator.Job(ctx, w.cfg.Job)
	if err != nil {
		return transient(err)
	}
	m := full.Checkpoint(step)
	if m == nil || uint64(len(m.Shards)) != m.World {
		return transient(fmt.Errorf("worker: the checkpoint of step %d is no longer kept", step))
	}
	t := time.Now()
	var sources []*checkpoint.Shard
	var bytes uint64
	same := m.World == p.world
	for _, sh := range m.Shards {
		if same && sh.Rank != p.rank {
			continue
		}
		data, err := w.object(ctx, job.Spec.Name, m, sh)
		if err != nil {
			return err
		}
		bytes += uint64(len(data))
		s, err := checkpoint.Decode(data, sh.Digest)
		if err != nil {
			w.bad[step] = badCheckpoint{recovery.Corrupt, fmt.Sprintf("rank %d's object %s: %v", sh.Rank, sh.Digest.Short(), err)}
			w.ask(p, recovery.Corrupt, step, w.bad[step].reason)
			return transient(err)
		}
		sources = append(sources, s)
	}
	layout, err := w.layout(ctx, p)
	if err != nil {
		return err
	}
	words, err := checkpoint.Recut(sources, layout)
	if err != nil {
		w.bad[step] = badCheckpoint{recovery.Corrupt, err.Error()}
		w.ask(p, recovery.Corrupt, step, err.Error())
		return transient(err)
	}
	st := runner.State{Tensors: words, OptimizerStep: sources[0].OptimizerStep}
	want, err := x.HashOf(st)
	if err != nil {
		return err
	}
	if err := x.Import(st); err != nil {
		return err
	}
	got, err := x.StateHash()
	if err != nil {
		return err
	}
	mismatch := ""
	switch {
	case got != want:
		mismatch = fmt.Sprintf("the executor seals %.12s after loading a state that seals %.12s", got, want)
	case same && !m.Shards[p.rank].StateHash.IsZero() && want != m.Shards[p.rank].StateHash.String():
		mismatch = fmt.Sprintf("the restored state seals %.12s, the checkpoint says %s", want, m.Shards[p.rank].StateHash.Short())
	}
	if mismatch != "" {
		w.bad[step] = badCheckpoint{recovery.Mismatch, mismatch}
		w.ask(p, recovery.Mismatch, step, mismatch)
		return transient(failure.New(failure.RestoreMismatch, "tmmu.worker", mismatch, "step", step, "rank", p.rank))
	}
	took := time.Since(t)
	w.res.Restores++
	if w.cfg.Stats != nil {
		w.cfg.Stats.Restored(step, bytes, took)
	}
	how := "its shard"
	if !same {
		how = fmt.Sprintf("%d shards of a world of %d, recut for %d", len(sources), m.World, p.world)
	}
	w.log.Info("restored a checkpoint", "step", step, "epoch", p.epoch, "from", how, "state_hash", got[:12], "bytes", bytes, "took", took.Round(time.Microsecond))
	return nil
}

// object returns a checkpoint's object: from memory when this worker
// wrote it last, else from the store (retrying what may pass; a missing
// object counts as corrupt).
func (w *run) object(ctx context.Context, job string, m *api.Checkpoint, sh api.CheckpointShard) ([]byte, error) {
	w.ckptMu.Lock()
	wr, ok := w.written[m.Step]
	w.ckptMu.Unlock()
	if ok && wr.digest == sh.Digest && wr.data != nil {
		return wr.data, nil
	}
	name := checkpoint.ObjectName(job, m.Step, sh.Rank, sh.Digest)
	var data []byte
	// A large object takes its time: 30 s, and a second per 10 MB.
	attempt := 30*time.Second + time.Duration(sh.Bytes/10e6)*time.Second
	err := w.retryFor(ctx, "reading a checkpoint", attempt, func(c context.Context) error {
		var err error
		data, err = w.store.Get(c, name)
		if errors.Is(err, checkpoint.ErrNotFound) || errors.Is(err, failure.CheckpointCorrupt) {
			return nil // not transient: reported below
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if data == nil {
		// A missing object: the checkpoint cannot be restored, like a
		// corrupt one.
		return []byte{}, nil
	}
	return data, nil
}

// carryState moves the model state from the executor of the epoch before
// into the new one, when both hold state (the computing executors).
func carryState(from, to runner.Executor) error {
	src, ok1 := from.(runner.StateCarrier)
	dst, ok2 := to.(runner.StateCarrier)
	if !ok1 || !ok2 {
		return nil
	}
	state, err := src.Export()
	if err != nil {
		return err
	}
	return dst.Import(state)
}
