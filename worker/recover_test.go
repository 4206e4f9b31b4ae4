package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/localcluster"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/worker"
)

// trainer runs computing workers (the cpu kernels, collectives over NATS)
// against a local cluster, each on its own connections, and can kill one
// as a crash would.
type trainer struct {
	t   *testing.T
	l   *localcluster.Local
	job string
	rec *recorder

	mu      sync.Mutex
	results map[string][]worker.Result // per identity, one per run
	errs    map[string][]error
	kills   map[string]func()
	execs   map[string]runner.Executor // the last executor built per identity
	onStep  func(worker.Event)
	losses  map[[2]uint64]float64 // (epoch, step) → rank 0's loss
	// rankLosses holds every rank's loss by (epoch, step, rank).
	rankLosses map[[3]uint64]float64
	store      checkpoint.Store // nil: the NATS object store
	wg         sync.WaitGroup
}

func newTrainer(t *testing.T, l *localcluster.Local, job string) *trainer {
	return &trainer{t: t, l: l, job: job, rec: &recorder{}, results: map[string][]worker.Result{}, errs: map[string][]error{},
		kills: map[string]func(){}, execs: map[string]runner.Executor{}, losses: map[[2]uint64]float64{}, rankLosses: map[[3]uint64]float64{}}
}

func (tr *trainer) start(identity string) {
	nc, tp, err := tr.l.WorkerTransport(identity)
	if err != nil {
		tr.t.Fatal(err)
	}
	rv, cli, err := tr.l.Rendezvous(2)
	if err != nil {
		tr.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr.mu.Lock()
	tr.kills[identity] = func() { cli.Close(); nc.Close(); cancel() }
	tr.mu.Unlock()
	factory, err := worker.Executors("cpu", tp, tr.job, nil)
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		defer cli.Close()
		defer nc.Close()
		res, err := worker.Run(ctx, worker.Config{Identity: identity, Job: tr.job, Coordinator: tr.l.ReadClient(), Transport: tp, Rendezvous: rv,
			Poll: 50 * time.Millisecond, Standby: time.Minute, Store: tr.store,
			OnStep: func(e worker.Event) {
				tr.rec.record(e)
				if tr.onStep != nil {
					tr.onStep(e)
				}
			},
			AfterStep: func(e worker.Event, st runner.StepStats) {
				if st.HasLoss {
					tr.mu.Lock()
					if e.Rank == 0 {
						tr.losses[[2]uint64{e.Epoch, e.Step}] = st.Loss
					}
					tr.rankLosses[[3]uint64{e.Epoch, e.Step, e.Rank}] = st.Loss
					tr.mu.Unlock()
				}
			},
			Executor: func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
				x, err := factory(g, p)
				if err == nil {
					tr.mu.Lock()
					tr.execs[identity] = x
					tr.mu.Unlock()
				}
				return x, err
			}})
		tr.mu.Lock()
		tr.results[identity] = append(tr.results[identity], res)
		tr.errs[identity] = append(tr.errs[identity], err)
		tr.mu.Unlock()
	}()
}

// kill cuts identity off as a crash would (its etcd and NATS connections
// close; its lease expires) and waits until its run has returned.
func (tr *trainer) kill(identity string) {
	tr.mu.Lock()
	kill, n := tr.kills[identity], len(tr.results[identity])
	tr.mu.Unlock()
	kill()
	for deadline := time.Now().Add(60 * time.Second); ; {
		tr.mu.Lock()
		done := len(tr.results[identity]) > n
		tr.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			tr.t.Fatalf("the killed worker %s did not return:\n%s", identity, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// last returns identity's last run.
func (tr *trainer) last(identity string) (worker.Result, error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	rs, es := tr.results[identity], tr.errs[identity]
	return rs[len(rs)-1], es[len(es)-1]
}

// recoverConfig is the model of the recovery tests: one sample (a row
// of 16 tokens) a rank.
var recoverConfig = models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 16, Context: 16, Batch: 1, Vocab: 32, DType: ir.F32, Train: true}

func recoverSubmission(t *testing.T, name string, world, steps uint64, zero int) *api.SubmitRequest {
	m, err := models.GPT2(recoverConfig)
	if err != nil {
		t.Fatal(err)
	}
	irJSON, _ := json.Marshal(m)
	return &api.SubmitRequest{Name: name, IR: irJSON, Steps: steps, CheckpointEvery: 5, Seed: 11,
		ShardSpec:   json.RawMessage(fmt.Sprintf(`{"world_size": %d, "data_parallel": {"zero_stage": %d}}`, world, zero)),
		ArenaConfig: engine.ExecutableArenas(engine.PortableLimits, nil)}
}

// recoverTokens is the token set the recovery tests that train on data
// store (the same bytes whatever the test: the same digest).
func recoverTokens() []byte { return learnable(6000, int(recoverConfig.Vocab), 21) }

// withData makes sub train on the stored dataset name in shuffled order.
func withData(sub *api.SubmitRequest, name string) *api.SubmitRequest {
	sub.Data = &api.DataSpec{Train: api.DataRef{Name: name}, Order: "shuffled"}
	return sub
}

// TestRestartedWorkerResumesExactly: a 4-rank ZeRO-3 job on the cpu
// kernels, training on a stored dataset in shuffled order, run twice. In the second run one worker is killed after step
// 12 and a new process with its identity starts 2 s later, holding no
// model state: the leader rolls the job back to its checkpoint of step
// 10, every rank restores its shard (verified) and runs the steps after
// it again. Both runs end in the same final checkpoint, bit for bit (the
// digests of every rank's shard and their state hashes), and the
// restarted rank's losses go on from where the job was, not from the
// initial model: the restarted rank continues the sample stream exactly
// (the rows of each step are a function of the seed, the dataset's
// digest, the step and the global batch, not of a rank's history).
func TestRestartedWorkerResumesExactly(t *testing.T) {
	l, ctx := startLocal(t)
	const world, steps = 4, 24
	put(t, ctx, l.Client(), "rtoks", "uint16", recoverTokens())
	run := func(name string, fault bool) *api.Job {
		if _, err := l.Client().Submit(ctx, withData(recoverSubmission(t, name, world, steps, 3), "rtoks")); err != nil {
			t.Fatal(err)
		}
		tr := newTrainer(t, l, name)
		for i := range world {
			tr.start(fmt.Sprintf("%s-w%d", name, i))
		}
		if fault {
			waitJob(t, l, "step 12", 60*time.Second, func(j *api.Job) bool { return j.Spec.Name == name && j.LastStep >= 12 })
			victim := name + "-w2"
			tr.kill(victim)
			killed, err := tr.last(victim)
			t.Logf("killed %s after step %d (%v)", victim, killed.LastStep, err)
			time.Sleep(2 * time.Second)
			tr.start(victim)
		}
		done := waitJob(t, l, name+" to finish", 90*time.Second, func(j *api.Job) bool { return j.Spec.Name == name && j.Final() })
		tr.wg.Wait()
		for id, errs := range tr.errs {
			if err := errs[len(errs)-1]; err != nil {
				t.Errorf("%s: %v", id, err)
			}
			if res, _ := tr.last(id); res.DataFed == 0 {
				t.Errorf("%s fed no data", id)
			}
		}
		if fault {
			res, _ := tr.last(name + "-w2")
			t.Logf("the new process: steps %d..%d, %d restores, %d rollbacks asked, losses %.4f … %.4f", res.FirstStep, res.LastStep, res.Restores, res.Rollbacks, res.Losses[0], res.Losses[len(res.Losses)-1])
			if res.Restores == 0 || res.Rollbacks == 0 {
				t.Errorf("the new process restored %d checkpoints after asking for %d rollbacks", res.Restores, res.Rollbacks)
			}
			straight := 0.0
			for _, e := range done.Epochs {
				t.Logf("epoch %d from step %d: %s", e.Epoch, e.StartStep, e.Reason)
			}
			_ = straight
		}
		tr.rec.check(t, leaderState(t, l))
		tr.rec.checkBoundaries(t, leaderState(t, l))
		return done
	}
	straight := run("straight", false)
	faulty := run("faulty", true)
	if straight.Status != api.StatusDone || faulty.Status != api.StatusDone {
		t.Fatalf("status %s and %s", straight.Status, faulty.Status)
	}
	a, b := straight.LastCheckpoint(), faulty.LastCheckpoint()
	if a.Step != steps || b.Step != steps || len(a.Shards) != world || len(b.Shards) != world {
		t.Fatalf("final checkpoints: %+v and %+v", a, b)
	}
	for r := range world {
		if a.Shards[r].Digest != b.Shards[r].Digest || a.Shards[r].StateHash != b.Shards[r].StateHash {
			t.Errorf("rank %d: the run with a restart ends in state %s (object %s), the run without in %s (object %s)",
				r, b.Shards[r].StateHash.Short(), b.Shards[r].Digest.Short(), a.Shards[r].StateHash.Short(), a.Shards[r].Digest.Short())
		}
	}
	rollback := false
	for _, e := range faulty.Epochs {
		rollback = rollback || (e.Restore != nil && e.Restore.Rollback && e.Restore.Step == 10)
	}
	if !rollback {
		t.Errorf("no rollback to the checkpoint of step 10 in %d epochs", len(faulty.Epochs))
	}
	t.Logf("final state, both runs: rank 0 %s … rank 3 %s", a.Shards[0].StateHash.Short(), a.Shards[3].StateHash.Short())
}

// TestElasticReshardZeRO3: a 4-rank ZeRO-3 elastic job loses one rank
// after step 12. The leader rolls it back to the checkpoint of step 10 on
// 3 ranks: each survivor restores the 4 shards recut for 3. The state the
// 3 ranks hold right after (before step 11 runs), gathered whole, equals
// the checkpoint's gathered state bit for bit, and the loss goes on from
// the trained model. Then the lost worker comes back: the world grows to
// 4 at a boundary, from the checkpoint the 3 ranks write just before it,
// recut for 4 — and the 4 ranks hold exactly that state. The job trains
// on a stored dataset in shuffled order: after the shrink the 3 ranks
// continue its sample stream exactly (the rows of a step are a function
// of the seed, the digest and the rows consumed before it: no sample is
// skipped or seen twice across the change of the global batch), so
// their mean loss at each step equals one engine's that restores the
// checkpoint whole and trains the global batch of 3 from stream row 40.
func TestElasticReshardZeRO3(t *testing.T) {
	l, ctx := startLocal(t)
	tokens := recoverTokens()
	put(t, ctx, l.Client(), "etoks", "uint16", tokens)
	sub := withData(recoverSubmission(t, "elastic3", 4, 0, 3), "etoks")
	sub.Elastic = true
	if _, err := l.Client().Submit(ctx, sub); err != nil {
		t.Fatal(err)
	}
	tr := newTrainer(t, l, "elastic3")
	type grab struct {
		rank  uint64
		state runner.State
		graph *ir.Graph
	}
	var gmu sync.Mutex
	targets := map[uint64]uint64{} // epochs that start from a checkpoint → its step
	grabbed := map[uint64][]grab{}
	tr.onStep = func(e worker.Event) {
		gmu.Lock()
		defer gmu.Unlock()
		if step, ok := targets[e.Epoch]; !ok || e.Step != step+1 {
			return
		}
		tr.mu.Lock()
		x := tr.execs[e.Identity]
		tr.mu.Unlock()
		st, err := x.(runner.StateCarrier).Export()
		if err != nil {
			t.Error(err)
			return
		}
		grabbed[e.Epoch] = append(grabbed[e.Epoch], grab{rank: e.Rank, state: st, graph: x.(*engine.Executor).Engine().Graph()})
	}
	// Note every epoch that starts from a checkpoint before its ranks
	// reach its first step (they restore and agree first).
	wctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		for wctx.Err() == nil {
			if j := leaderStateNoFail(l).Jobs["elastic3"]; j != nil {
				gmu.Lock()
				for _, e := range j.Epochs {
					if e.Restore != nil {
						targets[e.Epoch] = e.Restore.Step
					}
				}
				gmu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, tp, err := l.Transport()
	if err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.NewNATSStore(cctx, tp.JetStream(), checkpoint.NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ir.DecodeJSON(sub.IR)
	if err != nil {
		t.Fatal(err)
	}
	// gathered is the checkpoint of step whole, and its optimizer step.
	gathered := func(j *api.Job, step uint64) (map[string][]uint32, uint64) {
		k := j.Checkpoint(step)
		if k == nil {
			t.Fatalf("no checkpoint of step %d: %+v", step, j.Checkpoints)
		}
		var src []*checkpoint.Shard
		for _, sh := range k.Shards {
			data, err := st.Get(cctx, checkpoint.ObjectName("elastic3", step, sh.Rank, sh.Digest))
			if err != nil {
				t.Fatal(err)
			}
			s, err := checkpoint.Decode(data, sh.Digest)
			if err != nil {
				t.Fatal(err)
			}
			src = append(src, s)
		}
		want, err := checkpoint.Gather(src)
		if err != nil {
			t.Fatal(err)
		}
		return want, src[0].OptimizerStep
	}
	// same checks that the ranks of epoch e hold, right after their
	// restore, exactly the gathered state of the checkpoint of step.
	same := func(j *api.Job, e api.Epoch, step uint64) (int, int) {
		want, _ := gathered(j, step)
		gmu.Lock()
		gs := grabbed[e.Epoch]
		gmu.Unlock()
		world := e.ShardSpec.WorldSize
		if uint64(len(gs)) != world {
			t.Fatalf("epoch %d: grabbed the state of %d ranks after the restore, want %d", e.Epoch, len(gs), world)
		}
		var after []*checkpoint.Shard
		for _, g := range gs {
			layout, err := checkpoint.Layout(g.graph, m, g.rank, world)
			if err != nil {
				t.Fatal(err)
			}
			ts, err := checkpoint.FromState(layout, g.state.Tensors)
			if err != nil {
				t.Fatal(err)
			}
			after = append(after, &checkpoint.Shard{Format: checkpoint.Format, Step: step, Rank: g.rank, World: world, Seed: 11, OptimizerStep: g.state.OptimizerStep, Tensors: ts})
		}
		got, err := checkpoint.Gather(after)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for id, w := range want {
			n += len(w)
			if !slices.Equal(got[id], w) {
				t.Errorf("epoch %d: tensor %s differs from the checkpoint of step %d", e.Epoch, id, step)
			}
		}
		if len(got) != len(want) {
			t.Errorf("epoch %d: %d tensors, %d in the checkpoint", e.Epoch, len(got), len(want))
		}
		return len(want), n
	}
	for i := range 4 {
		tr.start(fmt.Sprintf("r%d", i))
	}
	waitJob(t, l, "step 12", 60*time.Second, func(j *api.Job) bool { return j.Spec.Name == "elastic3" && j.LastStep >= 12 })
	tr.kill("r1")
	j := waitJob(t, l, "the shrink to run", 60*time.Second, func(j *api.Job) bool {
		e := j.Current()
		return j.Spec.Name == "elastic3" && e.ShardSpec != nil && e.ShardSpec.WorldSize == 3 && e.Outcome != nil && j.LastStep >= e.StartStep+4
	})
	shrink := *j.Current()
	t.Logf("epoch %d from step %d: %s", shrink.Epoch, shrink.StartStep, shrink.Reason)
	if shrink.Restore == nil || !shrink.Restore.Rollback || shrink.Restore.Step != 10 {
		t.Fatalf("the shrink restores %+v, want the checkpoint of step 10", shrink.Restore)
	}
	tensors, elems := same(j, shrink, 10)
	t.Logf("shrink 4 → 3: the 3 ranks hold the checkpoint of step 10 (world 4, %d tensors, %d elements) bit for bit", tensors, elems)
	whole, optStep := gathered(j, 10)
	// Steps 1 to 10 read 4 rows each: step 11 starts at stream row 40.
	streamContinues(t, tr, shrink.Epoch, 3, whole, optStep, tokens, 11, 14, 40)
	tr.start("r1")
	j = waitJob(t, l, "the growth to run", 60*time.Second, func(j *api.Job) bool {
		e := j.Current()
		return j.Spec.Name == "elastic3" && e.ShardSpec != nil && e.ShardSpec.WorldSize == 4 && e.Outcome != nil && j.LastStep >= e.StartStep+2
	})
	grow := *j.Current()
	t.Logf("epoch %d from step %d: %s", grow.Epoch, grow.StartStep, grow.Reason)
	if grow.Restore == nil || grow.Restore.Rollback || grow.Restore.Step != grow.StartStep-1 {
		t.Fatalf("the growth restores %+v at step %d", grow.Restore, grow.StartStep)
	}
	stop()
	for _, id := range []string{"r0", "r1", "r2", "r3"} {
		tr.kill(id)
	}
	tr.wg.Wait()

	same(j, grow, grow.StartStep-1)
	t.Logf("growth 3 → 4: the 4 ranks hold the checkpoint of step %d (world 3) bit for bit", grow.StartStep-1)
	// The loss goes on from the trained model: the first step after the
	// reshard (11, on 3 ranks) is near step 11 on 4 ranks (another split
	// of the data), far below step 1.
	tr.mu.Lock()
	first, was, now := tr.losses[[2]uint64{0, 1}], tr.losses[[2]uint64{0, 11}], tr.losses[[2]uint64{shrink.Epoch, 11}]
	tr.mu.Unlock()
	t.Logf("rank 0's loss: step 1 %.4f, step 11 on 4 ranks %.4f, step 11 on 3 ranks after the reshard %.4f", first, was, now)
	if first == 0 || now == 0 || now > was+(first-was)/4 {
		t.Errorf("the loss after the reshard (%.4f) did not go on from step 11's on 4 ranks (%.4f; step 1 %.4f)", now, was, first)
	}
}

// streamContinues checks that the ranks of epoch trained steps from..to
// on the rows one engine trains them on: the model on the global batch
// of world samples, restored whole from a checkpoint (state, optimizer
// step) and fed the job's stream of tokens (shuffled, seed 11) from
// stream row row0 on (the rows the steps before from consumed); the
// ranks' mean loss equals the engine's within 10⁻⁵ at every step.
func streamContinues(t *testing.T, tr *trainer, epoch, world uint64, state map[string][]uint32, optStep uint64, tokens []byte, from, to, row0 uint64) {
	t.Helper()
	cfg := recoverConfig
	cfg.Batch = world
	m, _ := models.GPT2(cfg)
	g, _ := ir.Compile(m)
	opts := planner.DefaultOptions(g)
	opts.Arenas = engine.ExecutableArenas(engine.PortableLimits, nil)
	p, err := planner.PlanMemory(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	x, err := engine.NewExecutor(g, p, engine.Options{Backend: engine.NewCPU()}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := x.Import(runner.State{Tensors: state, OptimizerStep: optStep}); err != nil {
		t.Fatal(err)
	}
	ds, err := data.Open(data.Uint16, []data.Source{memSource(tokens)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := ds.Scan(0)
	stream, err := data.NewStream(ds, data.Shuffled, 11, sum.Digest, cfg.Seq, world)
	if err != nil {
		t.Fatal(err)
	}
	stream.SetOrigin(from-1, row0)
	if err := x.SetData(engine.Data{Train: stream}); err != nil {
		t.Fatal(err)
	}
	for step := from; step <= to; step++ {
		st, err := x.Step(context.Background(), step)
		if err != nil {
			t.Fatal(err)
		}
		tr.mu.Lock()
		mean, n := 0.0, uint64(0)
		for r := range world {
			if v, ok := tr.rankLosses[[3]uint64{epoch, step, r}]; ok {
				mean, n = mean+v/float64(world), n+1
			}
		}
		tr.mu.Unlock()
		if n != world {
			t.Fatalf("epoch %d step %d: the losses of %d ranks, want %d", epoch, step, n, world)
		}
		if d := math.Abs(mean-st.Loss) / st.Loss; d > 1e-5 {
			t.Errorf("epoch %d step %d: the ranks' mean loss %.7f, one engine from the checkpoint %.7f", epoch, step, mean, st.Loss)
		}
		t.Logf("step %d on %d ranks: mean loss %.6f, one engine from the checkpoint %.6f", step, world, mean, st.Loss)
	}
}

func leaderStateNoFail(l *localcluster.Local) *api.State {
	for _, n := range l.Coord.Nodes {
		if n != nil && n.IsLeader() {
			s, _ := n.State()
			return s
		}
	}
	return &api.State{}
}

// runToEnd runs a job of world ranks to its end with a fault injected by
// fault (nil: none) once the job committed step at, and returns it.
func runToEnd(t *testing.T, l *localcluster.Local, sub *api.SubmitRequest, world int, store checkpoint.Store, at uint64, fault func(tr *trainer, j *api.Job)) *api.Job {
	ctx := context.Background()
	if _, err := l.Client().Submit(ctx, sub); err != nil {
		t.Fatal(err)
	}
	tr := newTrainer(t, l, sub.Name)
	tr.store = store
	for i := range world {
		tr.start(fmt.Sprintf("%s-w%d", sub.Name, i))
	}
	if fault != nil {
		j := waitJob(t, l, fmt.Sprintf("%s at step %d", sub.Name, at), 60*time.Second, func(j *api.Job) bool { return j.Spec.Name == sub.Name && j.LastStep >= at })
		fault(tr, j)
	}
	done := waitJob(t, l, sub.Name+" to finish", 90*time.Second, func(j *api.Job) bool { return j.Spec.Name == sub.Name && j.Final() })
	tr.wg.Wait()
	for id, errs := range tr.errs {
		if err := errs[len(errs)-1]; err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	return done
}

func sameFinalState(t *testing.T, a, b *api.Job) {
	t.Helper()
	ka, kb := a.LastCheckpoint(), b.LastCheckpoint()
	for r := range ka.Shards {
		if ka.Shards[r].Digest != kb.Shards[r].Digest {
			t.Errorf("rank %d ends in object %s in %s and %s in %s", r, ka.Shards[r].Digest.Short(), a.Spec.Name, kb.Shards[r].Digest.Short(), b.Spec.Name)
		}
	}
}

// TestCorruptCheckpoint: a worker dies after step 11; a byte of its
// object of the newest checkpoint (step 10, or later on a slow
// machine) flips in the store; a new process takes its place without
// state. The rollback to that checkpoint finds the object corrupt
// (CHECKPOINT_CORRUPT): the leader drops the checkpoint and rolls the job
// back to the one before. The job ends in the state of a run without
// faults.
func TestCorruptCheckpoint(t *testing.T) {
	l, _ := startLocal(t)
	straight := runToEnd(t, l, recoverSubmission(t, "clean", 2, 16, 3), 2, nil, 0, nil)
	_, tp, err := l.Transport()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := checkpoint.NewNATSStore(context.Background(), tp.JetStream(), checkpoint.NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var bad string
	var badStep uint64
	faulty := runToEnd(t, l, recoverSubmission(t, "rotten", 2, 16, 3), 2, nil, 11, func(tr *trainer, _ *api.Job) {
		// With rotten-w1 dead no checkpoint can commit: the newest one is
		// what the rollback will restore. Corrupt its object of it (the
		// survivor restores its own from memory).
		tr.kill("rotten-w1")
		// A report rank 1 made before it died may still be committed:
		// wait until the newest checkpoint has not changed for 2 s.
		j := leaderState(t, l).Jobs["rotten"]
		for stable := time.Now(); time.Since(stable) < 2*time.Second; time.Sleep(50 * time.Millisecond) {
			if jj := leaderState(t, l).Jobs["rotten"]; jj.LastCheckpoint().Step != j.LastCheckpoint().Step {
				j, stable = jj, time.Now()
			}
		}
		k := j.LastCheckpoint()
		if k == nil || len(j.Checkpoints) < 2 {
			t.Fatalf("checkpoints: %+v", j.Checkpoints)
		}
		badStep = k.Step
		for _, sh := range k.Shards { // the dead worker's shard (its rank is the rendezvous')
			if sh.Identity == "rotten-w1" {
				bad = checkpoint.ObjectName("rotten", k.Step, sh.Rank, sh.Digest)
			}
		}
		data, err := ns.Get(context.Background(), bad)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x04
		if err := ns.Overwrite(context.Background(), bad, data); err != nil {
			t.Fatal(err)
		}
		tr.start("rotten-w1")
	})
	sameFinalState(t, straight, faulty)
	if len(faulty.Dropped) != 1 || faulty.Dropped[0].Step != badStep || !strings.Contains(faulty.Dropped[0].Reason, "CHECKPOINT_CORRUPT") {
		t.Fatalf("dropped: %+v", faulty.Dropped)
	}
	for _, e := range faulty.Epochs {
		t.Logf("epoch %d from step %d: %s", e.Epoch, e.StartStep, e.Reason)
	}
	// The steps after the checkpoint before ran again and stored the same
	// shard under the same name: the corrupted copy is replaced, not
	// reused.
	data, err := ns.Get(context.Background(), bad)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, d, _ := checkpoint.ParseName(bad)
	if _, err := checkpoint.Decode(data, d); err != nil {
		t.Errorf("the object %s is still corrupt: %v", bad, err)
	}
}

// TestFullStorePausesTheJob: the checkpoint store has room for the
// checkpoint of step 5 only. At step 10 a rank cannot store its shard:
// the job is paused with CHECKPOINT_STORE_FULL and no checkpoint of step
// 10 is committed; once the store has room again the shard is stored,
// the checkpoint committed, the job resumes and ends in the state of a
// run without the pause.
func TestFullStorePausesTheJob(t *testing.T) {
	l, _ := startLocal(t)
	straight := runToEnd(t, l, recoverSubmission(t, "roomy", 2, 16, 3), 2, nil, 0, nil)
	store, err := checkpoint.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store.SetMaxBytes(270 << 10) // the two shards of step 5 and one more
	var paused *api.Job
	full := runToEnd(t, l, recoverSubmission(t, "cramped", 2, 16, 3), 2, store, 1, func(tr *trainer, _ *api.Job) {
		paused = waitJob(t, l, "the pause", 60*time.Second, func(j *api.Job) bool { return j.Spec.Name == "cramped" && j.Paused != "" })
		st, _ := l.Client().Status(context.Background())
		for _, s := range st.Jobs {
			if s.Name == "cramped" {
				t.Logf("status while paused: %s at step %d, paused: %s", s.Status, s.LastStep, s.Paused)
			}
		}
		time.Sleep(time.Second) // paused: no step, no checkpoint
		if j := leaderState(t, l).Jobs["cramped"]; j.LastStep > paused.LastStep+api.DefaultWindow+1 || j.Checkpoint(10) != nil {
			t.Errorf("paused at step %d, then at %d with checkpoints %+v", paused.LastStep, j.LastStep, j.Checkpoints)
		}
		store.SetMaxBytes(0)
	})
	if !strings.Contains(paused.Paused, "CHECKPOINT_STORE_FULL") || paused.Checkpoint(10) != nil {
		t.Fatalf("paused: %q, checkpoints %+v", paused.Paused, paused.Checkpoints)
	}
	if full.Paused != "" || full.Checkpoint(10) == nil {
		t.Fatalf("after the pause: %q, checkpoints %+v", full.Paused, full.Checkpoints)
	}
	sameFinalState(t, straight, full)
}
