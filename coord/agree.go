package coord

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/datastore"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/transport"
)

// RunAgreement carries out the leader's side of the agreement protocol
// until ctx ends. It runs on every node and acts only while the node
// leads:
//
//   - for the current epoch of every job still agreeing, it watches the
//     plan-hash reports (transport.WatchReports, which replays the
//     reports already stored, so a new leader picks up where the old one
//     stopped), tallies them against the committed expected hashes and,
//     once every rank reported, commits the outcome through raft and
//     publishes it;
//   - for every running job, it watches the ranks' progress (the
//     transport's progress bucket, which also replays after a failover)
//     and commits the highest step every rank finished.
//
// Leadership lost, it stops its watchers; commands are idempotent, so a
// commit that raced a leadership change is harmless.
//
//   - for every live job, it watches the checkpoint reports and commits
//     each checkpoint once every rank of the world reported it, collects
//     the objects no kept checkpoint needs, and decides the ranks'
//     recovery requests (package recovery: roll back, drop a corrupt
//     checkpoint, pause, fail);
//   - it announces a job's changes of status (cancelled, paused, done,
//     deleted) so that its workers fetch it, and cleans up after deleted
//     jobs.
//
// With a rendezvous client it also tracks which ranks hold no lease (tmmu
// status) and shrinks elastic jobs whose ranks left for good (see resize).
func (n *Node) RunAgreement(ctx context.Context, l Leading) {
	a := &agreement{n: n, t: l.Transport, rv: l.Rendezvous, store: l.Store, shrinkAfter: l.ShrinkAfter,
		watch: map[string]context.CancelFunc{}, replans: map[string]*jobReplans{}, recov: map[string]*nats.Subscription{}, marks: map[string]mark{}}
	if a.shrinkAfter == 0 {
		a.shrinkAfter = DefaultShrinkAfter
	}
	if l.Rendezvous != nil {
		n.rv.Store(l.Rendezvous)
	}
	switch {
	case l.Claims != nil:
		a.claims = &claimCache{c: l.Claims, m: map[claimKey]bool{}}
	case l.Rendezvous != nil:
		a.claims = &claimCache{c: l.Rendezvous, m: map[claimKey]bool{}}
	default:
		n.log.Warn("no etcd: plan reports are not checked against the ranks' claims")
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	defer a.stopAll()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-n.Commits():
		case ev := <-n.replans:
			if !n.IsLeader() {
				if ev.reply != nil {
					ev.reply <- replyOrErr{err: ErrNotLeader}
				}
				continue
			}
			a.sync(ctx)
			a.handleReplan(ev)
		case q := <-n.recovers:
			if !n.IsLeader() {
				continue
			}
			a.sync(ctx)
			a.handleRecovery(q)
		}
		if s, _ := n.applied(); s != nil {
			a.trackAbsent(ctx, s) // on every node: any node answers tmmu status
		}
		a.openStores(ctx, l.Store) // on every node: any node serves the data API
		if !n.IsLeader() {
			a.stopAll()
			continue
		}
		if a.store == nil {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			st, err := checkpoint.NewNATSStore(sctx, a.t.JetStream(), checkpoint.NATSConfig{})
			cancel()
			if err != nil {
				n.log.Warn("opening the checkpoint store", "err", err)
				continue
			}
			a.store = st
		}
		a.sync(ctx)
		if s, _ := n.applied(); s != nil {
			a.announceChanges(ctx, s)
			a.checkMembership(ctx, s)
		}
	}
}

// openStores opens, once, the stores the data API needs on every node:
// datasets and weights (datastore.Bucket) and the checkpoints (ckpt, or
// the default checkpoint bucket).
func (a *agreement) openStores(ctx context.Context, ckpt checkpoint.Store) {
	n := a.n
	if n.dataStore.Load() == nil {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := checkpoint.NewNATSStore(sctx, a.t.JetStream(), checkpoint.NATSConfig{Bucket: datastore.Bucket})
		cancel()
		if err != nil {
			n.log.Warn("opening the data store", "err", err)
		} else {
			n.SetDataStore(st)
		}
	}
	if n.ckptStore.Load() == nil {
		if ckpt == nil {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			st, err := checkpoint.NewNATSStore(sctx, a.t.JetStream(), checkpoint.NATSConfig{})
			cancel()
			if err != nil {
				n.log.Warn("opening the checkpoint store", "err", err)
				return
			}
			ckpt = st
		}
		n.SetCheckpointStore(ckpt)
	}
}

type agreement struct {
	n     *Node
	t     *transport.Transport
	store checkpoint.Store
	mu    sync.Mutex
	watch map[string]context.CancelFunc // "job/epoch", "job/progress" or "job/checkpoints" → watcher
	wg    sync.WaitGroup
	// replans holds the replan state of each live job (leader only).
	replans map[string]*jobReplans
	// recov holds each live job's subscription to recovery requests.
	recov map[string]*nats.Subscription
	// marks is what was last announced of each job.
	marks map[string]mark
	// rv, when set, lets the leader see which ranks left elastic jobs.
	rv *rendezvous.Client
	// claims checks that a plan report's identity held its rank's claim
	// (nil: not checked).
	claims      *claimCache
	shrinkAfter time.Duration
	lastCheck   time.Time
	lastAbsent  time.Time
}

func (a *agreement) stopAll() {
	a.mu.Lock()
	for k, cancel := range a.watch {
		cancel()
		delete(a.watch, k)
	}
	for k, jr := range a.replans {
		jr.sub.Unsubscribe()
		delete(a.replans, k)
	}
	for k, sub := range a.recov {
		sub.Unsubscribe()
		delete(a.recov, k)
	}
	a.mu.Unlock()
	a.wg.Wait()
	a.marks = map[string]mark{}
}

func (a *agreement) sync(ctx context.Context) {
	s, _ := a.n.State()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, name := range s.Names() {
		j := s.Jobs[name]
		e := j.Current()
		key := name + "/" + strconv.FormatUint(e.Epoch, 10)
		if j.Status == api.StatusAgreeing && e.Outcome == nil {
			if _, ok := a.watch[key]; !ok {
				wctx, cancel := context.WithCancel(ctx)
				a.watch[key] = cancel
				a.wg.Add(1)
				go func() {
					defer a.wg.Done()
					a.agree(wctx, name, *e)
				}()
			}
		}
		live := !j.Final()
		for _, w := range []struct {
			key string
			run func(context.Context)
		}{
			{name + "/progress", func(c context.Context) { a.progress(c, name) }},
			{name + "/checkpoints", func(c context.Context) { a.watchCheckpoints(c, name) }},
		} {
			if _, ok := a.watch[w.key]; live && !ok {
				wctx, cancel := context.WithCancel(ctx)
				a.watch[w.key] = cancel
				a.wg.Add(1)
				go func() {
					defer a.wg.Done()
					w.run(wctx)
				}()
			} else if ok && !live {
				a.watch[w.key]()
				delete(a.watch, w.key)
			}
		}
		if sub, ok := a.recov[name]; live && !ok {
			sub, err := a.t.SubscribeRecovery(name, func(q transport.RecoveryRequest) {
				select {
				case a.n.recovers <- q:
				default: // the loop is busy; the rank asks again
				}
			})
			if err != nil {
				a.n.log.Warn("subscribing to recovery requests", "job", name, "err", err)
			} else {
				a.recov[name] = sub
			}
		} else if ok && !live {
			sub.Unsubscribe()
			delete(a.recov, name)
		}
	}
	for name, sub := range a.recov {
		if s.Jobs[name] == nil {
			sub.Unsubscribe()
			delete(a.recov, name)
		}
	}
	for key, cancel := range a.watch {
		if job, _, _ := strings.Cut(key, "/"); s.Jobs[job] == nil {
			cancel()
			delete(a.watch, key)
		}
	}
	a.syncReplans(s)
}

// agree tallies one epoch's reports and commits the outcome. A report
// counts only from the identity that held its rank (bindPlan): others are
// dropped and counted as forged; one whose claim etcd cannot confirm yet
// is checked again every second.
func (a *agreement) agree(ctx context.Context, job string, e api.Epoch) {
	start := time.Now()
	ch, err := a.t.WatchReports(ctx, job, e.Epoch)
	if err != nil {
		a.n.log.Warn("watching plan reports", "job", job, "epoch", e.Epoch, "err", err)
		a.forget(job, e.Epoch)
		return
	}
	tally := transport.NewTally(job, e.Epoch, e.Expected)
	var members []string // the epoch's ranks' identities, for an elastic world
	if s, _ := a.n.applied(); s.Jobs[job] != nil {
		_, members = s.Jobs[job].World(e.Epoch)
	}
	var unsure []transport.PlanReport // etcd could not tell yet
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	add := func(r transport.PlanReport) {
		ok, why, err := a.bindPlan(ctx, members, r)
		switch {
		case err != nil:
			unsure = append(unsure, r)
		case !ok:
			a.forged(ForgedPlan, job, r.Epoch, r.Rank, r.Identity, why)
		case tally.Add(r) == transport.IdentityTaken:
			a.forged(ForgedPlan, job, r.Epoch, r.Rank, r.Identity, "the identity already reported for another rank")
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r, ok := <-ch:
			if !ok {
				return
			}
			add(r)
		case <-retry.C:
			again := unsure
			unsure = nil
			for _, r := range again {
				add(r)
			}
		}
		if !tally.Done() {
			continue
		}
		o := tally.Outcome()
		o.StartStep = e.StartStep
		out := &api.Outcome{Agreed: o.Agreed, Missing: o.Missing, Reason: o.Reason, At: time.Now().UnixNano(), Holders: o.Holders}
		for _, m := range o.Mismatches {
			out.Mismatches = append(out.Mismatches, api.Mismatch{Rank: m.Rank, Expected: m.Expected, Got: m.Got})
		}
		if _, err := a.n.Apply(&api.Command{Kind: api.CmdOutcome, Job: job, Epoch: e.Epoch, Outcome: out}, 5*time.Second); err != nil {
			a.n.log.Warn("committing an outcome", "job", job, "epoch", e.Epoch, "err", err)
			a.forget(job, e.Epoch) // retried on the next sync if still leader
			return
		}
		a.n.metrics.agreement.Observe(time.Since(start).Seconds())
		a.n.metrics.outcomes.WithLabelValues(strconv.FormatBool(o.Agreed)).Inc()
		if s, _ := a.n.applied(); s.Jobs[job] != nil {
			o.Incarnation = s.Jobs[job].Incarnation()
		}
		if err := a.t.PublishOutcome(o); err != nil {
			a.n.log.Warn("publishing an outcome", "job", job, "epoch", e.Epoch, "err", err)
		}
		return
	}
}

func (a *agreement) forget(job string, epoch uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := job + "/" + strconv.FormatUint(epoch, 10)
	if cancel, ok := a.watch[key]; ok {
		cancel()
		delete(a.watch, key)
	}
}

// progress commits the highest step every rank of a job has finished:
// by rank, or, once an elastic job names its ranks, by identity over the
// ranks that run the next step and every epoch after it. Only reports of
// the job's current timeline count (epochs from the last rollback on),
// and only from the rank's holder under the report's epoch (Job.HolderOf):
// others are dropped and counted as forged. It re-evaluates on every
// record and on a tick, since a new epoch can change who counts.
func (a *agreement) progress(ctx context.Context, job string) {
	ch, err := a.t.WatchProgress(ctx, job)
	if err != nil {
		a.n.log.Warn("watching progress", "job", job, "err", err)
		a.forgetKey(job + "/progress")
		return
	}
	book := newStepBook()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var got *transport.StepDone
		select {
		case <-ctx.Done():
			return
		case d, ok := <-ch:
			if !ok {
				a.forgetKey(job + "/progress")
				return
			}
			got = &d
		case <-tick.C:
		}
		s, _ := a.n.applied()
		j := s.Jobs[job]
		for _, d := range book.take(j, got) {
			a.forged(ForgedProgress, job, d.Epoch, d.Rank, d.Identity, "not the rank's holder under the epoch")
		}
		low, ok := book.low(j)
		if !ok {
			continue
		}
		timeline := j.Timeline()
		loss, val := book.losses(j, low)
		if _, err := a.n.Apply(&api.Command{Kind: api.CmdProgress, Job: job, Step: low, Epoch: timeline, Loss: loss, Val: val}, 5*time.Second); err != nil {
			a.n.log.Debug("committing progress", "job", job, "step", low, "err", err)
			continue
		}
		// Tell the ranks how far they may run now.
		if s, _ := a.n.applied(); s.Jobs[job] != nil {
			j := s.Jobs[job]
			e := j.EpochFor(j.LastStep + 1)
			a.announce(j, transport.Announcement{Job: job, Epoch: e.Epoch, Kind: transport.KindGrant, StartStep: j.Horizon(e.Epoch)})
		}
	}
}
