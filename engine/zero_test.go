package engine

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/shard"
)

// zeroTolerance bounds |sharded − unsharded| per parameter element after
// the steps below: the two runs sum the same terms in other orders
// (per-rank partial sums, then the average over ranks).
const zeroTolerance = 1e-5

// TestZeROMatchesUnsharded trains the tiny GPT-2 sharded over 4
// in-process ranks (batch 1 each) at ZeRO stages 1, 2 and 3, and
// unsharded on one rank (batch 4, the same global batch), and compares
// the updated parameters.
func TestZeROMatchesUnsharded(t *testing.T) {
	newBackend := func() Backend { return NewCPU() }
	whole := zeroRun(t, newBackend, 1, 0, 3)
	for _, zero := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("zero", zero), func(t *testing.T) {
			compareZeRO(t, whole, zeroRun(t, newBackend, 4, zero, 3), 4)
		})
	}
}

func compareZeRO(t *testing.T, whole, sharded zeroResult, ranks int) {
	steps := len(whole.losses)
	worst, n := 0.0, 0
	for id, w := range whole.params {
		s := sharded.params[id]
		if len(s) < len(w) {
			t.Fatalf("%s: %d sharded elements for %d", id, len(s), len(w))
		}
		for i := range w {
			d := math.Abs(float64(w[i]) - float64(s[i]))
			worst = max(worst, d)
			if d > zeroTolerance {
				t.Fatalf("%s[%d]: unsharded %g, ZeRO over %d ranks %g", id, i, w[i], ranks, s[i])
			}
			n++
		}
		for i := len(w); i < len(s); i++ {
			if s[i] != 0 {
				t.Fatalf("%s: padding element %d is %g", id, i, s[i])
			}
		}
	}
	for s := range steps {
		if d := math.Abs(float64(whole.losses[s] - sharded.losses[s])); d > 1e-5 {
			t.Errorf("step %d: loss %g unsharded, %g sharded", s, whole.losses[s], sharded.losses[s])
		}
	}
	t.Logf("%d parameter elements after %d steps: max |ZeRO − unsharded| = %.3g; losses %v vs %v", n, steps, worst, whole.losses, sharded.losses)
}

type zeroResult struct {
	params map[string][]float32 // whole parameters, ranks' partitions concatenated
	losses []float32            // mean over ranks
}

// zeroRun trains the tiny GPT-2 with batch 4/ranks per rank, ZeRO stage
// zero when ranks > 1.
func zeroRun(t *testing.T, newBackend func() Backend, ranks, zero, steps int) zeroResult {
	t.Helper()
	c := models.GPT2Config{Layers: 2, Hidden: 64, Heads: 4, Seq: 32, Context: 32, Batch: uint64(4 / ranks), Vocab: 64, DType: ir.F32, Train: true}
	m, err := models.GPT2(c)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := shard.Decode(fmt.Appendf(nil, `{"world_size": %d, "data_parallel": {"zero_stage": %d}}`, ranks, zero))
	if err != nil {
		t.Fatal(err)
	}
	group := NewLocal(ranks)
	engines := make([]*Engine, ranks)
	for r := range ranks {
		rp, err := shard.PlanRank(m, spec, uint64(r), planner.Options{Mode: planner.TrainFull, Arenas: ExecutableArenas(NewCPU().Limits(), nil)})
		if err != nil {
			t.Fatal(err)
		}
		be := newBackend()
		t.Cleanup(func() { be.Close() })
		e, err := New(rp.View.Graph, rp.Plan, Options{Backend: be, Collectives: group.Member(r), DataRank: uint64(r), DataSize: uint64(ranks)})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if err := e.InitState(nil); err != nil {
			t.Fatal(err)
		}
		if err := e.Watch("loss"); err != nil {
			t.Fatal(err)
		}
		engines[r] = e
	}
	res := zeroResult{params: map[string][]float32{}, losses: make([]float32, steps)}
	losses := make([][]float32, ranks)
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range steps {
				if errs[r] = e.FeedLM(uint64(s), c.Vocab); errs[r] != nil {
					return
				}
				out, err := e.Step(context.Background())
				if errs[r] = err; err != nil {
					return
				}
				losses[r] = append(losses[r], Float32s(out.Watched["loss"])[0])
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for s := range steps {
		var sum float32
		for r := range ranks {
			sum += losses[r][s]
		}
		res.losses[s] = sum / float32(ranks)
	}
	for _, e := range engines {
		for _, id := range e.persistent() {
			ti, _ := e.g.TensorIndex(id)
			if e.g.Tensors[ti].Role != ir.Parameter {
				continue
			}
			w, err := e.ReadTensor(id)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := e.partitioned(id); ok || e.opts.DataRank == 0 {
				res.params[id] = append(res.params[id], Float32s(w)...)
				continue
			}
			// A whole parameter: every rank holds the same bits.
			for i, x := range Float32s(w) {
				if x != res.params[id][i] {
					t.Fatalf("%s[%d]: rank %d holds %g, rank 0 %g", id, i, e.opts.DataRank, x, res.params[id][i])
				}
			}
		}
	}
	return res
}
