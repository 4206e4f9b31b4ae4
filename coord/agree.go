package coord

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

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
// With a rendezvous client (nil: none) it also shrinks elastic jobs whose
// ranks left for good (see shrink).
func (n *Node) RunAgreement(ctx context.Context, t *transport.Transport, rv *rendezvous.Client) {
	a := &agreement{n: n, t: t, rv: rv, watch: map[string]context.CancelFunc{}, replans: map[string]*jobReplans{}}
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
		}
		if !n.IsLeader() {
			a.stopAll()
			continue
		}
		a.sync(ctx)
		if s, _ := n.applied(); s != nil {
			a.checkMembership(ctx, s)
		}
	}
}

type agreement struct {
	n     *Node
	t     *transport.Transport
	mu    sync.Mutex
	watch map[string]context.CancelFunc // "job/epoch" or "job/progress" → watcher
	wg    sync.WaitGroup
	// replans holds the replan state of each live job (leader only).
	replans map[string]*jobReplans
	// rv, when set, lets the leader see which ranks left elastic jobs.
	rv        *rendezvous.Client
	lastCheck time.Time
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
	a.mu.Unlock()
	a.wg.Wait()
}

func (a *agreement) sync(ctx context.Context) {
	s, _ := a.n.State()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, name := range s.Names() {
		j := s.Jobs[name]
		e := j.Current()
		key := name + "/" + strconv.FormatUint(e.Epoch, 10)
		if j.Status == StatusAgreeing && e.Outcome == nil {
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
		live := j.Status == StatusRunning || j.Status == StatusAgreeing
		pkey := name + "/progress"
		if _, ok := a.watch[pkey]; live && !ok {
			wctx, cancel := context.WithCancel(ctx)
			a.watch[pkey] = cancel
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.progress(wctx, name, j.LastStep)
			}()
		} else if ok && !live {
			a.watch[pkey]()
			delete(a.watch, pkey)
		}
	}
	a.syncReplans(s)
}

// agree tallies one epoch's reports and commits the outcome.
func (a *agreement) agree(ctx context.Context, job string, e Epoch) {
	start := time.Now()
	ch, err := a.t.WatchReports(ctx, job, e.Epoch)
	if err != nil {
		a.n.log.Warn("watching plan reports", "job", job, "epoch", e.Epoch, "err", err)
		a.forget(job, e.Epoch)
		return
	}
	tally := transport.NewTally(job, e.Epoch, e.Expected)
	for r := range ch {
		tally.Add(r)
		if !tally.Done() {
			continue
		}
		o := tally.Outcome()
		o.StartStep = e.StartStep
		out := &Outcome{Agreed: o.Agreed, Missing: o.Missing, Reason: o.Reason, At: time.Now().UnixNano()}
		for _, m := range o.Mismatches {
			out.Mismatches = append(out.Mismatches, Mismatch{Rank: m.Rank, Expected: m.Expected, Got: m.Got})
		}
		if _, err := a.n.Apply(&Command{Kind: CmdOutcome, Job: job, Epoch: e.Epoch, Outcome: out}, 5*time.Second); err != nil {
			a.n.log.Warn("committing an outcome", "job", job, "epoch", e.Epoch, "err", err)
			a.forget(job, e.Epoch) // retried on the next sync if still leader
			return
		}
		a.n.metrics.agreement.Observe(time.Since(start).Seconds())
		a.n.metrics.outcomes.WithLabelValues(strconv.FormatBool(o.Agreed)).Inc()
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
// ranks that run the next step and every epoch after it. It re-evaluates on
// every record and on a tick, since a new epoch can change who counts.
func (a *agreement) progress(ctx context.Context, job string, committed uint64) {
	ch, err := a.t.WatchProgress(ctx, job)
	if err != nil {
		a.n.log.Warn("watching progress", "job", job, "err", err)
		return
	}
	type rec struct{ rank, step uint64 }
	latest := map[string]rec{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-ch:
			if !ok {
				return
			}
			if r, seen := latest[d.Identity]; !seen || d.Step > r.step {
				latest[d.Identity] = rec{d.Rank, d.Step}
			}
		case <-tick.C:
		}
		s, _ := a.n.applied()
		j := s.Jobs[job]
		if j == nil {
			continue
		}
		last := uint64(len(j.Epochs) - 1)
		spec, members := j.World(last)
		var low uint64
		if members != nil {
			// The identities that run both the next step (under its
			// epoch) and the epochs after it: a lost rank stops counting
			// once an epoch leaves it out, a returning one starts when
			// its epoch runs.
			low = ^uint64(0)
			for _, id := range members {
				in := true
				for k := j.EpochFor(committed + 1).Epoch; k < last; k++ {
					if _, m := j.World(k); m != nil && !slices.Contains(m, id) {
						in = false
					}
				}
				if in {
					low = min(low, latest[id].step)
				}
			}
		} else {
			perRank := make([]uint64, spec.WorldSize)
			for _, r := range latest {
				if r.rank < spec.WorldSize {
					perRank[r.rank] = max(perRank[r.rank], r.step)
				}
			}
			low = slices.Min(perRank)
		}
		if low <= committed {
			continue
		}
		if _, err := a.n.Apply(&Command{Kind: CmdProgress, Job: job, Step: low}, 5*time.Second); err != nil {
			a.n.log.Debug("committing progress", "job", job, "step", low, "err", err)
			continue
		}
		committed = low
		// Tell the ranks how far they may run now.
		if s, _ := a.n.applied(); s.Jobs[job] != nil {
			j := s.Jobs[job]
			e := j.EpochFor(low + 1)
			a.t.PublishAnnouncement(transport.Announcement{Job: job, Epoch: e.Epoch, Kind: transport.KindGrant, StartStep: j.Horizon(e.Epoch)})
		}
	}
}
