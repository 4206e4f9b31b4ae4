package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/localcluster"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/replan"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/worker"
)

// checkBoundaries fails the test if a step ran under an epoch other than
// the one whose range holds it: once epoch e+1 is committed with boundary
// b, no rank runs b or later under e. A rollback epoch abandons the
// timeline before it from its start on: a step there is checked against
// the epochs committed before the rollback.
func (r *recorder) checkBoundaries(t *testing.T, s *api.State) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		j := s.Jobs[e.Job]
		if j == nil {
			continue
		}
		// The epochs as they stood on the event's timeline.
		jj := *j
		for i := e.Epoch + 1; i < uint64(len(j.Epochs)); i++ {
			if rs := j.Epochs[i].Restore; rs != nil && rs.Rollback && j.Epochs[i].StartStep <= e.Step {
				jj.Epochs = j.Epochs[:i]
				break
			}
		}
		if got := jj.EpochFor(e.Step).Epoch; got != e.Epoch {
			t.Errorf("SAFETY: %s rank %d ran step %d under epoch %d; epoch %d holds that step", e.Job, e.Rank, e.Step, e.Epoch, got)
		}
	}
}

// TestReplansAtSafepoints: a GPT-2 job with a dynamic sequence length
// (envelope [1,8], buckets 8, 16, 32) on 4 workers. At the end of step 5
// rank 2 sees sequences of 12 tokens: exactly one replan follows, to the
// 16-token bucket, and every rank switches at the same boundary step
// without a restart. Then an operator asks for the slots strategy: a
// second replan. Step numbering runs on; the history has both epochs with
// their reasons and plan hashes; the safety recorder checks every step.
func TestReplansAtSafepoints(t *testing.T) {
	l, err := localcluster.Start(localcluster.Options{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const world = 4
	cfg, _ := json.Marshal(map[string]any{"layers": 2, "hidden": 32, "heads": 2, "seq": 8, "context": 8, "batch": 1, "vocab": 64, "dtype": "bf16", "train": true})
	// Steps 0: the job runs until the test drains the workers.
	sub := &api.SubmitRequest{Name: "dyn", Steps: 0, ShardSpec: json.RawMessage(`{"world_size": 4, "data_parallel": {"zero_stage": 1}}`),
		Model: &api.ModelSource{Model: "gpt2", Config: cfg, Dims: map[string]api.DimSpec{"seq": {Min: 1, Max: 8, Buckets: []uint64{8, 16, 32}}}}}
	if _, err := l.Client().Submit(ctx, sub); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	var mu sync.Mutex
	results := map[string]worker.Result{}
	var wg sync.WaitGroup
	var opOnce sync.Once
	wctx, drain := context.WithCancel(ctx)
	// On a failure too: the workers end before the cluster closes under
	// them.
	defer wg.Wait()
	defer drain()
	for i := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rank uint64
			res, err := l.RunWorker(wctx, worker.Config{
				Identity: fmt.Sprintf("w%d", i), Job: "dyn",
				Poll: 20 * time.Millisecond,
				OnStep: func(e worker.Event) {
					rank = e.Rank
					rec.record(e)
					// The operator acts once the first replan is in effect.
					if e.Epoch == 1 && e.Step >= l1(l)+3 {
						opOnce.Do(func() {
							go func() {
								out, err := l.Client().Replan(ctx, "dyn", "", &api.ReplanRequest{ID: "op-1", Reason: "try the spec's slot layout", Strategy: planner.Slots})
								if err != nil {
									t.Error(err)
									return
								}
								t.Logf("operator replan: %+v", out)
							}()
						})
					}
				},
				Observe: func(step uint64) map[string]uint64 {
					if rank == 2 && step >= 5 {
						return map[string]uint64{"seq": 12}
					}
					return map[string]uint64{"seq": 8}
				},
				Executor: func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
					x, err := runner.NewArenaExecutor(g, p, 0)
					return slow{x, 20 * time.Millisecond}, err
				},
			}, 5)
			mu.Lock()
			results[fmt.Sprintf("w%d", i)] = res
			mu.Unlock()
			if err != nil {
				t.Errorf("worker w%d: %v", i, err)
			}
		}()
	}
	// Drain once the operator's epoch has run a few steps.
	waitJob(t, l, "the operator's epoch to run", 2*time.Minute, func(j *api.Job) bool {
		return len(j.Epochs) == 3 && j.Epochs[2].Outcome != nil && j.LastStep >= j.Epochs[2].StartStep+3
	})
	drain()
	wg.Wait()
	s := leaderState(t, l)
	j := s.Jobs["dyn"]
	for id, res := range results {
		t.Logf("%s: rank %d, %d replan requests, %d epochs, steps %d..%d", id, res.Rank, res.Replans, res.Epochs, res.FirstStep, res.LastStep)
	}
	if len(j.Epochs) != 3 {
		t.Fatalf("%d epochs, want 3 (submit, the sequence replan, the operator's)", len(j.Epochs))
	}
	for i, e := range j.Epochs {
		_, opts, env := j.Inputs(uint64(i))
		t.Logf("epoch %d from step %d: %s; seq %v, strategy %s, global plan %s, agreed %v", e.Epoch, e.StartStep, e.Reason, env["seq"], opts.Strategy, e.GlobalPlanHash.Short(), e.Outcome != nil && e.Outcome.Agreed)
	}
	if _, _, env := j.Inputs(1); env["seq"] != (ir.DimRange{Min: 1, Max: 16}) {
		t.Errorf("epoch 1 envelope %v, want seq [1,16]", env)
	}
	if _, opts, _ := j.Inputs(2); opts.Strategy != planner.Slots {
		t.Errorf("epoch 2 strategy %s", opts.Strategy)
	}
	// Every rank ran every step from 1 once, switching epochs at the same
	// steps, in one Run (no restart).
	for id, res := range results {
		if res.FirstStep != 1 || res.StepsRun != res.LastStep || res.Epochs != 3 || res.Epoch != 2 {
			t.Errorf("%s: %+v", id, res)
		}
		// The trace records carry the old and new plan hashes.
		if len(res.Switches) != 2 {
			t.Errorf("%s: switches %+v", id, res.Switches)
			continue
		}
		for k, sw := range res.Switches {
			e := j.Epochs[k+1]
			if sw.Epoch != e.Epoch || sw.Step != e.StartStep || sw.New != e.Expected[res.Rank] || sw.Old != j.Epochs[k].Expected[res.Rank] {
				t.Errorf("%s: switch %+v, epoch %d from step %d", id, sw, e.Epoch, e.StartStep)
			}
		}
	}
	switched := map[uint64]map[uint64]bool{} // epoch → first step per rank
	first := map[[2]uint64]uint64{}
	rec.mu.Lock()
	for _, e := range rec.events {
		k := [2]uint64{e.Rank, e.Epoch}
		if f, ok := first[k]; !ok || e.Step < f {
			first[k] = e.Step
		}
	}
	rec.mu.Unlock()
	for k, f := range first {
		if switched[k[1]] == nil {
			switched[k[1]] = map[uint64]bool{}
		}
		switched[k[1]][f] = true
	}
	for e, firsts := range switched {
		if len(firsts) != 1 || !firsts[j.Epochs[e].StartStep] {
			t.Errorf("epoch %d: ranks started it at steps %v, boundary %d", e, firsts, j.Epochs[e].StartStep)
		}
	}
	rec.check(t, s)
	rec.checkBoundaries(t, s)
	t.Logf("safety recorder: %d steps checked", len(rec.events))
}

// tWriter sends log lines to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// l1 returns the boundary of epoch 1 of job dyn as the leader holds it
// (0 before it exists).
func l1(l *localcluster.Local) uint64 {
	for _, n := range l.Coord.Nodes {
		if n != nil && n.IsLeader() {
			s, _ := n.State()
			if j := s.Jobs["dyn"]; j != nil && len(j.Epochs) > 1 {
				return j.Epochs[1].StartStep
			}
		}
	}
	return 0
}

// TestAbortPolicy: under replan_policy abort, an envelope exit fails the
// job with a named reason at the safepoint and every worker stops with
// ErrAborted; no step runs past the committed failure's horizon.
func TestAbortPolicy(t *testing.T) {
	l, ctx := startLocal(t)
	cfg, _ := json.Marshal(map[string]any{"layers": 1, "hidden": 32, "heads": 2, "seq": 8, "context": 8, "batch": 1, "vocab": 64, "dtype": "bf16", "train": true})
	if _, err := l.Client().Submit(ctx, &api.SubmitRequest{Name: "strict", Steps: 0, ReplanPolicy: replan.Abort,
		ShardSpec: json.RawMessage(`{"world_size": 2}`),
		Model:     &api.ModelSource{Model: "gpt2", Config: cfg, Dims: map[string]api.DimSpec{"seq": {Min: 1, Max: 8}}}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = l.RunWorker(ctx, worker.Config{Identity: fmt.Sprint("s", i), Job: "strict",
				Executor: func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
					x, err := runner.NewArenaExecutor(g, p, 0)
					return slow{x, 10 * time.Millisecond}, err
				},
				Observe: func(step uint64) map[string]uint64 {
					if step == 4 {
						return map[string]uint64{"seq": 9}
					}
					return nil
				}}, 5)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, worker.ErrAborted) {
			t.Errorf("worker s%d: %v, want ErrAborted", i, err)
		}
	}
	j := leaderState(t, l).Jobs["strict"]
	if j.Status != api.StatusFailed || !strings.Contains(j.Reason, "seq=9 exceeds the envelope [1,8] (policy abort)") || len(j.Epochs) != 1 {
		t.Fatalf("job: %s, %q, %d epochs", j.Status, j.Reason, len(j.Epochs))
	}
	t.Logf("job failed: %s (last step %d)", j.Reason, j.LastStep)
}

// TestElasticJobShrinks: an elastic job on 4 workers loses one for good
// (its connections cut; its lease expires). The leader replans for the 3
// that remain: world 3, the data-parallel group of 3, a boundary fenced
// from the stored step reports. The survivors switch in the same process
// and the job runs on. Then the lost worker comes back with its identity:
// it waits outside the world until the leader grows it back to 4 ranks,
// and rejoins at that epoch's boundary. The safety recorder checks every
// step.
func TestElasticJobShrinks(t *testing.T) {
	l, ctx := startLocal(t)
	sub := submission(t, "elastic", 4, 0, `{"world_size": 4, "data_parallel": {"zero_stage": 1}}`)
	sub.Elastic = true
	if _, err := l.Client().Submit(ctx, sub); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	f := &fleet{t: t, l: l, rec: rec, job: "elastic", results: map[string]error{}, ranks: map[string][]uint64{}, cancel: map[string]context.CancelFunc{}, conns: map[string]func(){}}
	for i := range 4 {
		f.start(fmt.Sprintf("e%d", i), nil)
	}
	waitJob(t, l, "steps", 60*time.Second, func(j *api.Job) bool { return j.Spec.Name == "elastic" && j.LastStep >= 4 })
	f.kill("e1")
	j := waitJob(t, l, "the shrink to run", 90*time.Second, func(j *api.Job) bool {
		return j.Spec.Name == "elastic" && len(j.Epochs) == 2 && j.Epochs[1].Outcome != nil && j.LastStep >= j.Epochs[1].StartStep+3
	})
	e := j.Epochs[1]
	t.Logf("epoch 1 from step %d: %s; members %v", e.StartStep, e.Reason, e.Members)
	if e.ShardSpec == nil || e.ShardSpec.WorldSize != 3 || e.ShardSpec.DataParallel.Degree != 3 || len(e.Members) != 3 || slices.Contains(e.Members, "e1") {
		t.Fatalf("epoch 1: spec %+v members %v", e.ShardSpec, e.Members)
	}
	// e1 comes back with the same identity: it waits outside the world
	// until the leader grows it back to 4 ranks.
	f.start("e1", nil)
	j = waitJob(t, l, "the world to grow back", 90*time.Second, func(j *api.Job) bool {
		return j.Spec.Name == "elastic" && len(j.Epochs) == 3 && j.Epochs[2].Outcome != nil && j.LastStep >= j.Epochs[2].StartStep+3
	})
	g := j.Epochs[2]
	t.Logf("epoch 2 from step %d: %s; members %v", g.StartStep, g.Reason, g.Members)
	if g.ShardSpec == nil || g.ShardSpec.WorldSize != 4 || len(g.Members) != 4 || !slices.Contains(g.Members, "e1") {
		t.Fatalf("epoch 2: spec %+v members %v", g.ShardSpec, g.Members)
	}
	for _, id := range []string{"e0", "e1", "e2", "e3"} {
		f.stop(id)
	}
	f.wg.Wait()
	s := leaderState(t, l)
	rec.check(t, s)
	rec.checkBoundaries(t, s)
	rejoined := uint64(0)
	rec.mu.Lock()
	for _, ev := range rec.events {
		if ev.Identity == "e1" && ev.Epoch == 2 && (rejoined == 0 || ev.Step < rejoined) {
			rejoined = ev.Step
		}
		if ev.Identity == "e1" && ev.Epoch == 1 {
			t.Errorf("e1 ran step %d under epoch 1, which left it out", ev.Step)
		}
	}
	rec.mu.Unlock()
	if rejoined != g.StartStep {
		t.Errorf("e1 rejoined at step %d, boundary %d", rejoined, g.StartStep)
	}
	first := map[string]uint64{}
	rec.mu.Lock()
	for _, ev := range rec.events {
		if ev.Epoch == 1 {
			if f, ok := first[ev.Identity]; !ok || ev.Step < f {
				first[ev.Identity] = ev.Step
			}
		}
	}
	rec.mu.Unlock()
	if len(first) != 3 || first["e1"] != 0 {
		t.Fatalf("ranks under epoch 1: %v", first)
	}
	for id, st := range first {
		if st != e.StartStep {
			t.Errorf("%s started epoch 1 at step %d, boundary %d", id, st, e.StartStep)
		}
	}
	t.Logf("safety recorder: %d steps checked", len(rec.events))
}
