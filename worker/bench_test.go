package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/localcluster"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/worker"
)

// BenchmarkReplan times operator replans on a running job: from the
// request until every rank has run a step under the new epoch. Ranks are
// goroutines with their own NATS, etcd and HTTP clients against a local
// cluster; steps take 2 ms; the operator alternates the slots and
// greedy-size strategies (the second time on, from the replan cache). The latency includes planning every rank,
// the raft commit, every rank's report and the agreement, and waiting for
// the boundary, which lies past the window of 2 steps the ranks may run
// ahead of the committed progress. Each round's phases (raft commit,
// agreement, boundary) are logged. A strategy change keeps every rank's
// view (same graph, spec and rank), so each rank only plans again.
//
// Each size runs on an unsecured cluster and on one secured as a
// deployment is (TLS for NATS, etcd, raft and the API, a NATS identity
// per rank, signed decisions, reports bound to claims), one after the
// other in one run: p50-ms and p99-ms are the replan's, agree-p50-ms and
// agree-p99-ms the agreement round's (from the epoch's commit until its
// outcome is committed).
//
//	go test ./worker -run '^$' -bench 'Replan/ranks=64' -benchtime 30x
func BenchmarkReplan(b *testing.B) {
	for _, ranks := range []int{8, 64} {
		for _, sec := range []string{"off", "on"} {
			b.Run(fmt.Sprintf("ranks=%d/security=%s", ranks, sec), func(b *testing.B) { benchReplan(b, ranks, sec == "off") })
		}
	}
}

type stepping struct{}

func (stepping) Name() string { return "stepping" }
func (stepping) Step(context.Context, uint64) (runner.StepStats, error) {
	time.Sleep(2 * time.Millisecond)
	return runner.StepStats{}, nil
}

func benchReplan(b *testing.B, ranks int, insecure bool) {
	l, err := localcluster.Start(localcluster.Options{Dir: b.TempDir(), Insecure: insecure})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	m, err := models.GPT2(models.GPT2Config{Layers: 1, Hidden: 16, Heads: 2, Seq: 8, Context: 8, Batch: 1, Vocab: 32, DType: ir.BF16, Train: true})
	if err != nil {
		b.Fatal(err)
	}
	irJSON, _ := json.Marshal(m)
	ctx := context.Background()
	if _, err := l.Client().Submit(ctx, &api.SubmitRequest{Name: "bench", IR: irJSON, Steps: 0, Strategy: planner.GreedySize,
		ShardSpec: json.RawMessage(fmt.Sprintf(`{"world_size": %d, "data_parallel": {"zero_stage": 1}}`, ranks))}); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	running := map[uint64]map[uint64]time.Time{} // epoch → rank → first step under it
	wctx, drain := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := l.RunWorker(wctx, worker.Config{Identity: fmt.Sprint("w", i), Job: "bench",
				Executor: func(*ir.Graph, *planner.Plan) (runner.Executor, error) { return stepping{}, nil },
				OnStep: func(e worker.Event) {
					mu.Lock()
					if running[e.Epoch] == nil {
						running[e.Epoch] = map[uint64]time.Time{}
					}
					if _, ok := running[e.Epoch][e.Rank]; !ok {
						running[e.Epoch][e.Rank] = time.Now()
					}
					mu.Unlock()
				}}, 10)
			if err != nil {
				b.Error(err)
			}
		}()
	}
	defer func() { drain(); wg.Wait() }()
	all := func(e uint64) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(running[e]) < ranks {
			return time.Time{}, false
		}
		var last time.Time
		for _, t := range running[e] {
			if t.After(last) {
				last = t
			}
		}
		return last, true
	}
	for {
		if _, ok := all(0); ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	var lat, agree []time.Duration
	var phases []string
	// Two cheap strategies, so the time is the protocol's: every rank
	// plans for itself, and 64 packed plans of this toy graph (about
	// 20 ms each) on the 2 cores all ranks share here would dominate.
	strategies := []planner.Strategy{planner.Slots, planner.GreedySize}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out, err := l.Client().Replan(ctx, "bench", "", &api.ReplanRequest{ID: fmt.Sprint("bench-", i), Reason: "bench", Strategy: strategies[i%2]})
		if err != nil || out.Decision != "replan" {
			if j, jerr := l.Client().Job(ctx, "bench"); jerr == nil {
				for _, e := range j.Epochs[max(0, len(j.Epochs)-3):] {
					b.Logf("epoch %d from step %d: %s; outcome %+v", e.Epoch, e.StartStep, e.Reason, e.Outcome)
				}
				b.Logf("status %s, last step %d", j.Status, j.LastStep)
			}
			b.Fatalf("replan %d: %+v %v", i, out, err)
		}
		committed := time.Since(start)
		for {
			if t, ok := all(out.Epoch); ok {
				lat = append(lat, t.Sub(start))
				break
			}
			time.Sleep(time.Millisecond)
		}
		if j, err := l.Client().Job(ctx, "bench"); err == nil && j.Epochs[out.Epoch].Outcome != nil {
			e := j.Epochs[out.Epoch]
			agree = append(agree, time.Duration(e.Outcome.At-e.CommittedAt))
			phases = append(phases, fmt.Sprintf("%v: commit %v agreed %v boundary %d last %d", lat[len(lat)-1].Round(time.Millisecond), committed.Round(time.Millisecond),
				time.Unix(0, e.Outcome.At).Sub(start).Round(time.Millisecond), e.StartStep, j.LastStep))
		}
	}
	b.StopTimer()
	slices.Sort(phases)
	for _, p := range phases {
		b.Log(p)
	}
	slices.Sort(lat)
	slices.Sort(agree)
	b.Logf("slowest rounds: %v", lat[max(0, len(lat)-5):])
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
	if len(agree) > 0 {
		b.ReportMetric(float64(agree[len(agree)/2].Microseconds())/1000, "agree-p50-ms")
		b.ReportMetric(float64(agree[min(len(agree)-1, len(agree)*99/100)].Microseconds())/1000, "agree-p99-ms")
	}
}

// BenchmarkCheckpointOverhead measures the steady-state cost of
// checkpointing: the demo's model (GPT-2, 2 layers, hidden 64) on 2 ranks
// with ZeRO-3, the cpu kernels and collectives over NATS, 100 steps, once
// with a checkpoint every 50 steps and once with none before the last
// step; each twice, alternating, keeping the faster. The time is rank 0's
// wall time from the start of step 1 to the end of step 100 (the
// checkpoint of step 50 inside it, the one after step 100 outside).
//
//	go test ./worker -run '^$' -bench CheckpointOverhead -benchtime 1x
func BenchmarkCheckpointOverhead(b *testing.B) {
	l, err := localcluster.Start(localcluster.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	m, err := models.GPT2(models.GPT2Config{Layers: 2, Hidden: 64, Heads: 4, Seq: 32, Context: 32, Batch: 1, Vocab: 64, DType: ir.F32, Train: true})
	if err != nil {
		b.Fatal(err)
	}
	irJSON, _ := json.Marshal(m)
	const steps = 100
	n := 0
	run := func(every uint64) time.Duration {
		n++
		name := fmt.Sprintf("overhead-%d", n)
		if _, err := l.Client().Submit(context.Background(), &api.SubmitRequest{Name: name, IR: irJSON, Steps: steps, CheckpointEvery: every,
			ShardSpec: json.RawMessage(`{"world_size": 2, "data_parallel": {"zero_stage": 3}}`), ArenaConfig: engine.ExecutableArenas(engine.PortableLimits, nil)}); err != nil {
			b.Fatal(err)
		}
		var start, end time.Time
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := l.RunWorker(context.Background(), worker.Config{Identity: fmt.Sprint(name, "-", i), Job: name, ExecutorName: "cpu", Poll: 50 * time.Millisecond,
					OnStep: func(e worker.Event) {
						if e.Rank == 0 && e.Step == 1 {
							start = time.Now()
						}
					},
					AfterStep: func(e worker.Event, _ runner.StepStats) {
						if e.Rank == 0 && e.Step == steps {
							end = time.Now()
						}
					}}, 5)
				if err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		return end.Sub(start)
	}
	for b.Loop() {
		with, without := time.Duration(1<<62), time.Duration(1<<62)
		for range 2 {
			with = min(with, run(50))
			without = min(without, run(1000))
		}
		b.ReportMetric(float64(with.Milliseconds())/steps, "ms/step-ckpt50")
		b.ReportMetric(float64(without.Milliseconds())/steps, "ms/step-none")
		b.ReportMetric(100*(with.Seconds()-without.Seconds())/without.Seconds(), "%overhead")
	}
}
