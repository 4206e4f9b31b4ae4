package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/localcluster"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/worker"
)

// startLocal starts a local cluster for the test, and a context that ends
// with it (a minute at most).
func startLocal(t *testing.T) (*localcluster.Local, context.Context) {
	t.Helper()
	l, err := localcluster.Start(localcluster.Options{Dir: t.TempDir(), ShrinkAfter: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return l, ctx
}

// recorder is the safety recorder: every step any worker ran, checked at
// the end against the committed outcomes.
type recorder struct {
	mu     sync.Mutex
	events []worker.Event
}

func (r *recorder) record(e worker.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// check fails the test if a step ran under an epoch whose committed
// outcome is not "agreed" on the given node state.
func (r *recorder) check(t *testing.T, s *api.State) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		j := s.Jobs[e.Job]
		if j == nil || e.Epoch >= uint64(len(j.Epochs)) || j.Epochs[e.Epoch].Outcome == nil || !j.Epochs[e.Epoch].Outcome.Agreed {
			t.Errorf("SAFETY: %s rank %d ran step %d under epoch %d, which is not committed as agreed", e.Job, e.Rank, e.Step, e.Epoch)
		}
		if j != nil && e.Epoch < uint64(len(j.Epochs)) && j.Epochs[e.Epoch].Expected[e.Rank] != e.PlanHash {
			t.Errorf("SAFETY: %s rank %d ran step %d with plan %s, expected %s", e.Job, e.Rank, e.Step, e.PlanHash.Short(), j.Epochs[e.Epoch].Expected[e.Rank].Short())
		}
	}
}

func submission(t *testing.T, name string, world, steps uint64, spec string) *api.SubmitRequest {
	m, err := models.GPT2(models.GPT2Config{Layers: 2, Hidden: 32, Heads: 2, Seq: 8, Context: 8, Batch: 1, Vocab: 64, DType: ir.BF16, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	irJSON, _ := json.Marshal(m)
	return &api.SubmitRequest{Name: name, IR: irJSON, ShardSpec: json.RawMessage(spec), Steps: steps}
}

// slow wraps the arena executor with a pause per step, so a test can act
// between steps.
type slow struct {
	runner.Executor
	pause time.Duration
}

func (s slow) Step(ctx context.Context, step uint64) (runner.StepStats, error) {
	time.Sleep(s.pause)
	return s.Executor.Step(ctx, step)
}

type fleet struct {
	t       *testing.T
	l       *localcluster.Local
	rec     *recorder
	job     string
	mu      sync.Mutex
	results map[string]error
	ranks   map[string][]uint64 // per identity, the rank of each run
	cancel  map[string]context.CancelFunc
	conns   map[string]func()
	wg      sync.WaitGroup
}

func (f *fleet) start(identity string, adjust func(*planner.Options)) {
	nc, tr, err := f.l.WorkerTransport(identity)
	if err != nil {
		f.t.Fatal(err)
	}
	rv, cli, err := f.l.Rendezvous(2)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.mu.Lock()
	f.cancel[identity] = cancel
	f.conns[identity] = func() { cli.Close(); nc.Close() }
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer cli.Close()
		defer nc.Close()
		res, err := worker.Run(ctx, worker.Config{
			Identity: identity, Job: f.job, Coordinator: f.l.ReadClient(), Transport: tr, Rendezvous: rv,
			AdjustOptions: adjust, OnStep: f.rec.record, Poll: 20 * time.Millisecond, Standby: 30 * time.Second,
			Executor: func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
				x, err := runner.NewArenaExecutor(g, p, 0)
				return slow{x, 40 * time.Millisecond}, err
			},
		})
		f.t.Logf("worker %s: rank %d steps %d..%d (%d run), agreement %s, err %v", identity, res.Rank, res.FirstStep, res.LastStep, res.StepsRun, res.AgreementTime, err)
		f.mu.Lock()
		f.results[identity] = err
		f.ranks[identity] = append(f.ranks[identity], res.Rank)
		f.mu.Unlock()
	}()
}

// stop drains a worker.
func (f *fleet) stop(identity string) {
	f.mu.Lock()
	cancel := f.cancel[identity]
	f.mu.Unlock()
	cancel()
}

// kill cuts a worker off as a crash would: its etcd and NATS connections
// close first (no lease revocation; the lease expires), then it stops.
func (f *fleet) kill(identity string) {
	f.mu.Lock()
	cancel, conns := f.cancel[identity], f.conns[identity]
	f.mu.Unlock()
	conns()
	cancel()
}

func leaderState(t *testing.T, l *localcluster.Local) *api.State {
	t.Helper()
	i, err := l.Coord.Leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Coord.Nodes[i].Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	s, _ := l.Coord.Nodes[i].State()
	return s
}

func waitJob(t *testing.T, l *localcluster.Local, what string, timeout time.Duration, ok func(*api.Job) bool) *api.Job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, n := range l.Coord.Nodes {
			if n == nil || !n.IsLeader() {
				continue
			}
			s, _ := n.State()
			for _, name := range s.Names() {
				if job := s.Jobs[name]; ok(job) {
					return job
				}
			}
		}
		if time.Now().After(deadline) {
			for _, n := range l.Coord.Nodes {
				if n != nil && n.IsLeader() {
					s, _ := n.State()
					for _, name := range s.Names() {
						j := s.Jobs[name]
						t.Logf("job %s: status %s last step %d epochs %d outcome %+v", name, j.Status, j.LastStep, len(j.Epochs), j.Current().Outcome)
					}
				}
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClusterAgreesAndSurvives: 3 coordinators (raft over TCP, bolt
// stores), a real NATS server and a real etcd server, 8 workers. They
// agree and run steps; a worker killed mid-job shows as missing and a
// replacement with its identity resumes its rank; the leader is shut down
// without a transfer and the job continues under the new leader with no
// committed epoch lost; the old leader restarts from its files with the
// state restored; a worker whose plan differs makes the leader commit the
// mismatch and no rank runs that epoch. The safety recorder checks every
// step that ran.
func TestClusterAgreesAndSurvives(t *testing.T) {
	l, ctx := startLocal(t)
	rec := &recorder{}

	const world, steps = 8, 12
	if _, err := l.Client().Submit(ctx, submission(t, "train", world, steps, `{"world_size": 8, "data_parallel": {"degree": 4, "zero_stage": 3}, "tensor_parallel": {"degree": 2}, "preset": "gpt2"}`)); err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, l: l, rec: rec, job: "train", results: map[string]error{}, ranks: map[string][]uint64{}, cancel: map[string]context.CancelFunc{}, conns: map[string]func(){}}
	for i := range world {
		f.start(fmt.Sprintf("w%d", i), nil)
	}
	j := waitJob(t, l, "agreement", 60*time.Second, func(j *api.Job) bool { return j.Status == api.StatusRunning && j.LastStep >= 2 })
	if !j.Epochs[0].Outcome.Agreed {
		t.Fatalf("epoch 0: %+v", j.Epochs[0].Outcome)
	}

	// Kill worker w3 mid-job: once its lease expires its rank shows as
	// missing, and the others stop at the barrier.
	f.kill("w3")
	rv, cli, err := l.Rendezvous(2)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var missing []uint64
	deadline := time.Now().Add(10 * time.Second)
	for len(missing) == 0 && time.Now().Before(deadline) {
		missing, _ = rv.Missing(ctx, "train", world)
		time.Sleep(10 * time.Millisecond)
	}
	if len(missing) != 1 {
		t.Fatalf("missing ranks after killing w3: %v", missing)
	}
	// tmmu status shows it, with its identity and since when.
	var absent []api.Absent
	for deadline := time.Now().Add(10 * time.Second); len(absent) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st, err := l.Client().Status(ctx); err == nil && len(st.Jobs) == 1 {
			absent = st.Jobs[0].Absent
		}
	}
	if len(absent) != 1 || absent[0].Rank != missing[0] || absent[0].Identity != "w3" || absent[0].Since.IsZero() {
		t.Fatalf("status shows absent ranks %+v; rank %d (w3) is missing", absent, missing[0])
	}
	t.Logf("status: rank %d (%s) missing since %s", absent[0].Rank, absent[0].Identity, absent[0].Since.Format(time.TimeOnly))
	stalled := waitJob(t, l, "progress to settle", 5*time.Second, func(j *api.Job) bool { return true }).LastStep
	time.Sleep(300 * time.Millisecond)
	if s := leaderState(t, l).Jobs["train"].LastStep; s > stalled+1 {
		t.Errorf("progress went on from step %d to %d without rank %d", stalled, s, missing[0])
	}
	// The replacement with the same identity gets the same rank back.
	deadline = time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		_, returned := f.results["w3"]
		f.mu.Unlock()
		if returned {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed worker did not return")
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.start("w3", nil)

	// Lose the leader without a transfer.
	li, _ := l.Coord.Leader(10 * time.Second)
	before := leaderState(t, l).Jobs["train"]
	start := time.Now()
	if err := l.StopCoordinator(li); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Coord.Leader(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Client().Status(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: a new leader serves status %s after the leader stopped", time.Since(start))
	after := leaderState(t, l).Jobs["train"]
	if len(after.Epochs) < len(before.Epochs) || after.Epochs[0].Outcome == nil || after.LastStep < before.LastStep {
		t.Fatalf("the new leader lost committed state: before %+v, after %+v", before, after)
	}
	done := waitJob(t, l, "the job to finish", 90*time.Second, func(j *api.Job) bool { return j.Status == api.StatusDone })
	if done.LastStep != steps {
		t.Errorf("finished at step %d, want %d", done.LastStep, steps)
	}
	f.wg.Wait()
	for id, err := range f.results {
		if err != nil { // w3's entry is the replacement's
			t.Errorf("worker %s: %v", id, err)
		}
	}
	if r := f.ranks["w3"]; len(r) != 2 || r[0] != r[1] || r[0] != missing[0] {
		t.Errorf("w3 ran as ranks %v; the missing rank was %d", r, missing[0])
	}
	// The old leader restarts from its bolt files.
	if err := l.RestartCoordinator(li); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		s, _ := l.Coord.Nodes[li].State()
		if j := s.Jobs["train"]; j != nil && j.Status == api.StatusDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted coordinator did not restore the job")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A worker whose arena alignment differs: the mismatch is committed
	// and no rank runs the epoch.
	if _, err := l.Client().Submit(ctx, submission(t, "mismatch", 4, 3, `{"world_size": 4, "data_parallel": {"zero_stage": 1}}`)); err != nil {
		t.Fatal(err)
	}
	g := &fleet{t: t, l: l, rec: rec, job: "mismatch", results: map[string]error{}, ranks: map[string][]uint64{}, cancel: map[string]context.CancelFunc{}, conns: map[string]func(){}}
	for i := range 4 {
		var adjust func(*planner.Options)
		if i == 2 {
			adjust = func(o *planner.Options) {
				o.Arenas = planner.ArenaConfig{"activations": {AlignmentBytes: 4096}}
			}
		}
		g.start(fmt.Sprintf("m%d", i), adjust)
	}
	g.wg.Wait()
	for id, err := range g.results {
		if !errors.Is(err, worker.ErrNotAgreed) {
			t.Errorf("worker %s: %v, want ErrNotAgreed", id, err)
		}
	}
	mj := leaderState(t, l).Jobs["mismatch"]
	o := mj.Epochs[0].Outcome
	if mj.Status != api.StatusFailed || o == nil || o.Agreed || len(o.Mismatches) != 1 || o.Mismatches[0].Expected != mj.Epochs[0].Expected[o.Mismatches[0].Rank] {
		t.Fatalf("mismatch job: %+v, outcome %+v", mj, o)
	}
	t.Logf("committed mismatch: rank %d expected %s got %s; job: %s", o.Mismatches[0].Rank, o.Mismatches[0].Expected.Short(), o.Mismatches[0].Got.Short(), mj.Reason)
	for _, e := range rec.events {
		if e.Job == "mismatch" {
			t.Errorf("SAFETY: rank %d ran step %d of the mismatched job", e.Rank, e.Step)
		}
	}
	rec.check(t, leaderState(t, l))
	t.Logf("safety recorder: %d steps checked", len(rec.events))
}
