package worker_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/worker"
)

// TestWorkersTrain runs a data-parallel job (2 ranks, ZeRO stage 0) on
// the cpu kernels, the ranks exchanging gradients over NATS as separate
// processes would, twice: once straight through, once with an operator
// replan to another strategy in the middle. Every rank ends with the same
// state as every other (an all-reduce of the gradients keeps replicas
// equal), the loss falls, and the run with the replan ends in exactly the
// state of the run without: the model state moved to the new plan's
// arenas, and another layout of the same kernels computes the same bits.
func TestWorkersTrain(t *testing.T) {
	l, ctx := startLocal(t)
	const steps, world = 8, 2
	m, err := models.GPT2(models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 16, Context: 16, Batch: 2, Vocab: 32, DType: ir.F32, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	irJSON, _ := json.Marshal(m)
	train := func(name string, replan bool) []worker.Result {
		if _, err := l.Client().Submit(ctx, &api.SubmitRequest{Name: name, IR: irJSON, Steps: steps,
			ShardSpec:   json.RawMessage(fmt.Sprintf(`{"world_size": %d, "data_parallel": {"zero_stage": 0}}`, world)),
			ArenaConfig: engine.ExecutableArenas(engine.PortableLimits, nil)}); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		results := make([]worker.Result, world)
		var wg sync.WaitGroup
		for i := range world {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := l.RunWorker(ctx, worker.Config{Identity: fmt.Sprint(name, "-w", i), Job: name, ExecutorName: "cpu", Poll: 20 * time.Millisecond,
					OnStep: func(e worker.Event) {
						if replan && e.Step == 3 {
							once.Do(func() {
								go func() {
									out, err := l.Client().Replan(ctx, name, "", &api.ReplanRequest{ID: name + "-op", Reason: "another layout", Strategy: planner.Slots})
									if err != nil || out.Decision != "replan" {
										t.Errorf("replan: %+v %v", out, err)
									}
								}()
							})
						}
					}}, 5)
				if err != nil {
					t.Errorf("%s w%d: %v", name, i, err)
				}
				results[res.Rank] = res
			}()
		}
		wg.Wait()
		return results
	}
	straight := train("straight", false)
	replanned := train("replanned", true)
	for _, rs := range [][]worker.Result{straight, replanned} {
		for _, r := range rs {
			if r.Executor != "cpu" || len(r.Losses) != steps || r.LastState != rs[0].LastState {
				t.Fatalf("rank %d: executor %s, %d losses, state %.12s (rank 0 %.12s)", r.Rank, r.Executor, len(r.Losses), r.LastState, rs[0].LastState)
			}
			if r.Losses[steps-1] >= r.Losses[0] {
				t.Errorf("rank %d: loss %v did not fall", r.Rank, r.Losses)
			}
		}
	}
	if len(replanned[0].Switches) != 1 || len(straight[0].Switches) != 0 {
		t.Fatalf("switches: %v with the replan, %v without", replanned[0].Switches, straight[0].Switches)
	}
	sw := replanned[0].Switches[0]
	if replanned[0].LastState != straight[0].LastState {
		t.Fatalf("the replanned run ends in state %.12s, the straight run in %.12s", replanned[0].LastState, straight[0].LastState)
	}
	t.Logf("rank 0 losses %v; switched to plan %s at step %d; both runs end in state %.16s", replanned[0].Losses, sw.New.Short(), sw.Step, straight[0].LastState)
}

// TestConfidentialJob: in a confidential job the computing executor runs
// and seals its state, but no loss leaves it (no Losses in the result).
func TestConfidentialJob(t *testing.T) {
	l, ctx := startLocal(t)
	m, err := models.GPT2(models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 8, Context: 8, Batch: 1, Vocab: 32, DType: ir.F32, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	irJSON, _ := json.Marshal(m)
	if _, err := l.Client().Submit(ctx, &api.SubmitRequest{Name: "secret", IR: irJSON, Steps: 3, DataMode: ir.DataConfidential,
		ShardSpec: json.RawMessage(`{"world_size": 1}`), ArenaConfig: engine.ExecutableArenas(engine.PortableLimits, nil)}); err != nil {
		t.Fatal(err)
	}
	res, err := l.RunWorker(ctx, worker.Config{Identity: "s0", Job: "secret", ExecutorName: "cpu", Poll: 20 * time.Millisecond}, 5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Executor != "cpu" || res.StepsRun != 3 || len(res.Losses) != 0 || res.LastState == "" {
		t.Fatalf("confidential job: executor %s, %d steps, losses %v, state %q", res.Executor, res.StepsRun, res.Losses, res.LastState)
	}
	if _, err := l.Client().Submit(ctx, &api.SubmitRequest{Name: "bad", IR: irJSON, DataMode: "secretive", ShardSpec: json.RawMessage(`{"world_size": 1}`)}); err == nil {
		t.Fatal("a data mode that does not exist was accepted")
	}
}
