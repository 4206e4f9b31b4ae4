package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/replan"
	"github.com/tmmu/tmmu/shard"
	"github.com/tmmu/tmmu/transport"
)

// replanEvent is a worker's envelope exit or an operator's request, for
// the agreement loop.
type replanEvent struct {
	job    string
	worker *transport.ReplanRequest
	op     *api.ReplanRequest
	reply  chan replyOrErr
}

type replyOrErr struct {
	r   api.ReplanReply
	err error
}

// jobReplans is the leader's replan state of one job.
type jobReplans struct {
	r      *replan.Replanner
	epochs int // epochs of the job when r was last in step with it
	sub    *nats.Subscription
	// plans remembers the rank plan hashes by global plan hash, so a
	// return to a key seen before commits the same plans without
	// planning again.
	plans  map[ir.Hash][]ir.Hash
	arenas map[ir.Hash]planner.ArenaConfig
}

// OperatorReplan hands an operator's replan request to the leader's
// agreement loop and waits for its decision.
func (n *Node) OperatorReplan(job string, req *api.ReplanRequest, timeout time.Duration) (api.ReplanReply, error) {
	if !n.IsLeader() {
		return api.ReplanReply{}, ErrNotLeader
	}
	if strings.TrimSpace(req.Reason) == "" {
		return api.ReplanReply{}, errors.New("coord: a replan request needs a reason")
	}
	if req.ID == "" {
		req.ID = fmt.Sprintf("op-%d", time.Now().UnixNano())
	}
	ev := replanEvent{job: job, op: req, reply: make(chan replyOrErr, 1)}
	select {
	case n.replans <- ev:
	case <-time.After(timeout):
		return api.ReplanReply{}, errors.New("coord: the agreement loop is not running on the leader")
	}
	select {
	case r := <-ev.reply:
		return r.r, r.err
	case <-time.After(timeout):
		return api.ReplanReply{}, errors.New("coord: no replan decision in time")
	}
}

func replanEpoch(j *api.Job, i uint64) replan.Epoch {
	_, opts, env := j.Inputs(i)
	return replan.Epoch{Epoch: j.Epochs[i].Epoch, StartStep: j.Epochs[i].StartStep, Envelope: replan.Envelope(maps.Clone(env)),
		World: j.Spec.ShardSpec.WorldSize, Mode: string(opts.Mode), Strategy: string(opts.Strategy), ArenaConfigHash: arenaHash(opts.Arenas)}
}

func arenaHash(c planner.ArenaConfig) ir.Hash {
	r, err := c.Resolve()
	if err != nil {
		return ir.Hash{}
	}
	return r.Hash()
}

// syncReplans keeps a replanner per live job in step with the committed
// state. Called from sync with a.mu held.
func (a *agreement) syncReplans(s *api.State) {
	for _, name := range s.Names() {
		j := s.Jobs[name]
		jr := a.replans[name]
		if j.Status == api.StatusDone || j.Status == api.StatusFailed {
			if jr != nil {
				jr.sub.Unsubscribe()
				delete(a.replans, name)
			}
			continue
		}
		last := uint64(len(j.Epochs) - 1)
		agreed := j.Current().Outcome != nil && j.Current().Outcome.Agreed
		switch {
		case jr == nil || jr.epochs != len(j.Epochs) && !(jr.epochs+1 == len(j.Epochs) && jr.hasPending()):
			// New to this leader, or epochs it did not decide.
			cur := last
			if !agreed && last > 0 {
				cur = last - 1
			}
			r := replan.New(j.Spec.Source.ReplanConfig(j.Spec.ReplanPolicy, j.Spec.Elastic), replanEpoch(j, cur))
			if cur != last {
				r.SetPending(replanEpoch(j, last))
			}
			if jr == nil {
				jr = &jobReplans{plans: map[ir.Hash][]ir.Hash{}, arenas: map[ir.Hash]planner.ArenaConfig{}}
				sub, err := a.t.SubscribeReplanRequests(name, func(q transport.ReplanRequest) {
					select {
					case a.n.replans <- replanEvent{job: q.Job, worker: &q}:
					default: // the loop is busy; the rank asks again
					}
				})
				if err != nil {
					a.n.log.Warn("subscribing to replan requests", "job", name, "err", err)
					continue
				}
				jr.sub = sub
				a.replans[name] = jr
			}
			for _, e := range j.Epochs {
				r.Seen(e.Requests...)
			}
			jr.r, jr.epochs = r, len(j.Epochs)
			jr.r.Remember(replanEpoch(j, last), j.Current().GlobalPlanHash)
			jr.plans[j.Current().GlobalPlanHash] = j.Current().Expected
		case jr.epochs+1 == len(j.Epochs):
			jr.epochs = len(j.Epochs) // the epoch this leader decided is committed
		}
		if agreed && jr.hasPending() {
			jr.r.Applied()
		}
	}
}

func (jr *jobReplans) hasPending() bool {
	_, ok := jr.r.Pending()
	return ok
}

// handleReplan feeds one event to its job's replanner and carries out the
// decision.
func (a *agreement) handleReplan(ev replanEvent) {
	reply := func(r api.ReplanReply, err error) {
		if ev.reply != nil {
			ev.reply <- replyOrErr{r, err}
		} else if err != nil {
			a.n.log.Warn("acting on a replan request", "job", ev.job, "err", err)
		} else {
			a.n.log.Debug("replan request", "job", ev.job, "rank", ev.worker.Rank, "step", ev.worker.Step, "ack", r.Ack, "decision", r.Decision)
		}
	}
	s, _ := a.n.State()
	j := s.Jobs[ev.job]
	a.mu.Lock()
	jr := a.replans[ev.job]
	a.mu.Unlock()
	if j == nil || jr == nil {
		reply(api.ReplanReply{}, fmt.Errorf("coord: job %q is not running", ev.job))
		return
	}
	var ack replan.Ack
	step := j.LastStep
	if w := ev.worker; w != nil {
		if ok, decided := j.HolderOf(w.Epoch, w.Rank, w.Identity); !ok {
			if decided {
				a.forged(ForgedReplan, ev.job, w.Epoch, w.Rank, w.Identity, "not the rank's holder under the epoch")
			}
			return // undecided: the rank reports its exit again
		}
	}
	if w := ev.worker; w != nil {
		ack = jr.r.Observe(replan.Observation{Rank: w.Rank, Step: w.Step, Dims: w.Dims})
		step = w.Step
	} else {
		q := ev.op
		rq := replan.Request{ID: q.ID, Step: step, Reason: q.Reason, Strategy: string(q.Strategy), Envelope: replan.Envelope(q.Envelope)}
		if q.ArenaConfig != nil {
			h := arenaHash(q.ArenaConfig)
			if h.IsZero() {
				reply(api.ReplanReply{}, errors.New("coord: the arena config does not resolve"))
				return
			}
			rq.ArenaConfigHash = &h
			jr.arenas[h] = q.ArenaConfig
		}
		if len(q.Envelope) > 0 && j.Spec.Source == nil {
			reply(api.ReplanReply{}, fmt.Errorf("coord: job %q was submitted as a bare IR; a new envelope needs a model source", ev.job))
			return
		}
		ack = jr.r.Request(rq)
	}
	out := api.ReplanReply{Ack: string(ack), Decision: string(replan.None)}
	if ack == replan.Duplicate && ev.op != nil {
		// A retry: answer with the epoch the request made, if any.
		for _, e := range j.Epochs {
			if slices.Contains(e.Requests, ev.op.ID) {
				out.Decision, out.Epoch, out.Boundary = string(replan.Replan), e.Epoch, e.StartStep
			}
		}
	}
	if ack != replan.Accepted {
		reply(out, nil)
		return
	}
	d := jr.r.Decide(step)
	out.Decision, out.Reasons = string(d.Kind), d.Reasons
	a.n.metrics.replans.WithLabelValues(string(d.Kind)).Inc()
	switch d.Kind {
	case replan.AbortJob:
		reason := "aborted at a safepoint: " + strings.Join(d.Reasons, "; ")
		if _, err := a.n.Apply(&api.Command{Kind: api.CmdFail, Job: ev.job, Reason: reason}, 5*time.Second); err != nil {
			reply(out, err)
			return
		}
		a.announce(j, transport.Announcement{Job: ev.job, Epoch: j.Current().Epoch, Kind: transport.KindAbort, Reason: trim(reason)})
	case replan.Replan:
		e, err := a.commitEpoch(j, jr, d)
		if err != nil {
			jr.r.Cancel()
			reply(out, err)
			return
		}
		out.Epoch, out.Boundary = e.Epoch, e.StartStep
		a.announce(j, transport.Announcement{Job: ev.job, Epoch: e.Epoch, Kind: transport.KindEpoch, StartStep: e.StartStep, Reason: trim(e.Reason)})
	}
	reply(out, nil)
}

func trim(s string) string {
	if len(s) > transport.MaxReasonLen {
		return s[:transport.MaxReasonLen]
	}
	return s
}

// commitEpoch plans every rank for a replan decision and commits the new
// epoch; it returns the epoch as committed (with its boundary).
func (a *agreement) commitEpoch(j *api.Job, jr *jobReplans, d replan.Decision) (*api.Epoch, error) {
	last := uint64(len(j.Epochs) - 1)
	ref, opts, env := j.Inputs(last)
	next := &api.Epoch{Epoch: d.Next.Epoch, StartStep: d.Next.StartStep, Reason: strings.Join(d.Reasons, "; "), CommittedAt: time.Now().UnixNano(), Requests: d.Requests}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var m *ir.Model
	var err error
	if !maps.Equal(map[string]ir.DimRange(d.Next.Envelope), env) {
		if m, err = j.Spec.Source.Generate(d.Next.Envelope); err != nil {
			return nil, err
		}
		model, err := m.EncodeCBOR()
		if err != nil {
			return nil, err
		}
		if next.ModelDigest, err = a.n.putModel(ctx, model); err != nil {
			return nil, err
		}
		next.Envelope = maps.Clone(d.Next.Envelope)
	} else if m, err = a.n.decodeModel(ctx, ref); err != nil {
		return nil, err
	}
	if d.Next.ArenaConfigHash != arenaHash(opts.Arenas) {
		opts.Arenas = jr.arenas[d.Next.ArenaConfigHash]
		next.ArenaConfig = opts.Arenas
	}
	if d.Next.Strategy != string(opts.Strategy) {
		opts.Strategy = planner.Strategy(d.Next.Strategy)
		next.Strategy = opts.Strategy
	}
	next.IRHash = m.IRHash()
	if expected, ok := jr.plans[d.Plan]; d.Cached && ok {
		next.GlobalPlanHash, next.Expected = d.Plan, expected
	} else {
		gp, _, err := shard.PlanRanks(m, &j.Spec.ShardSpec, lend(opts))
		if err != nil {
			return nil, err
		}
		next.GlobalPlanHash = gp.Hash
		for _, r := range gp.Ranks {
			next.Expected = append(next.Expected, r.PlanHash)
		}
		jr.plans[gp.Hash] = next.Expected
	}
	jr.r.Remember(d.Next, next.GlobalPlanHash)
	if _, err := a.n.Apply(&api.Command{Kind: api.CmdEpoch, Job: j.Spec.Name, New: next}, 10*time.Second); err != nil {
		return nil, err
	}
	s, _ := a.n.State()
	committed := s.Jobs[j.Spec.Name].Epochs[next.Epoch]
	return &committed, nil
}
