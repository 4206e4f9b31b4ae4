package engine

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/ir"
)

// importedGraphs are training graphs tmmu import torch made of the small
// members of the model families in bench/parity/families.py (batch 4,
// 32×32 images, 10 classes), kept so that the engine's tests run
// imported kernels without PyTorch. To make them again:
//
//	tmmu import torch bench/parity/families.py:NAME --train --no-peak --out NAME.json
//	gzip -9 -n NAME.json    # into engine/testdata/imported
//
// (cmd/tmmu's TestImportedGradientsMatchPyTorch checks these models'
// gradients against PyTorch's autograd.)
var importedGraphs = []string{"resnet", "mobilenet", "vit"}

func importedGraph(t *testing.T, name string) *ir.Graph {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "imported", name+".json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	js, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Load(js)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// importedSteps runs steps training steps of g on synthetic images and
// returns the losses, the persistent state after them and the launches
// of a step.
func importedSteps(t *testing.T, g *ir.Graph, be Backend, steps int) ([]float64, map[string][]uint32, int) {
	t.Helper()
	x, err := NewExecutor(g, planFor(t, g), Options{Backend: be}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	return stepsOf(t, x, steps)
}

func stepsOf(t *testing.T, x *Executor, steps int) ([]float64, map[string][]uint32, int) {
	t.Helper()
	launches := 0
	for _, a := range x.e.actions {
		launches += len(a.launches)
	}
	var losses []float64
	for s := range steps {
		st, err := x.Step(context.Background(), uint64(s+1))
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, st.Loss)
	}
	state, err := x.Export()
	if err != nil {
		t.Fatal(err)
	}
	return losses, state.Tensors, launches
}

// TestImportedRowChunksAddTheSameBits: the imported kernels that sum
// over rows in several launches (a grouped convolution's weight
// gradient, the matmul's inner dimension) continue each sum where the
// last launch left it: with 5-row chunks an imported model trains to the
// same bits as with the default chunks, on the cpu and on WebGPU.
func TestImportedRowChunksAddTheSameBits(t *testing.T) {
	backends := map[string]func() Backend{"cpu": func() Backend { return NewCPU() }}
	if w, _, err := Open("webgpu"); err == nil {
		w.Close()
		backends["webgpu"] = func() Backend { return webgpu(t) }
	}
	for bname, open := range backends {
		t.Run(bname, func(t *testing.T) {
			g := importedGraph(t, "mobilenet")
			_, whole, n1 := importedSteps(t, g, open(), 2)
			defer func(old uint64) { rowChunk = old }(rowChunk)
			rowChunk = 5
			_, chunked, n2 := importedSteps(t, g, open(), 2)
			if n2 <= n1 {
				t.Fatalf("5-row chunks: %d launches, default chunks %d", n2, n1)
			}
			elems := 0
			for id, x := range whole {
				for i := range x {
					if x[i] != chunked[id][i] {
						t.Fatalf("%s[%d]: %#x in 5-row chunks, %#x in default chunks", id, i, chunked[id][i], x[i])
					}
				}
				elems += len(x)
			}
			t.Logf("%d launches in 5-row chunks, %d by default; %d state words bit-identical after 2 steps", n2, n1, elems)
		})
	}
}

// TestImportedWebGPUMatchesCPU: each imported family trains on WebGPU
// (the WGSL twins of the imported kernels) as on the cpu: one step's
// loss, every parameter's gradient (read off AdamW's first moment,
// (1−β₁)·g after one step) and what the step changes in the other
// persistent tensors (batch norm statistics), within webgpuTolerance
// relative to their norm. Parameters whose gradient is zero but for
// round-off (a bias before a batch norm) are skipped, as in cmd/tmmu's
// comparison with PyTorch; integer tensors must match exactly.
func TestImportedWebGPUMatchesCPU(t *testing.T) {
	webgpu(t).Close() // skips without an adapter
	for _, name := range importedGraphs {
		t.Run(name, func(t *testing.T) {
			g := importedGraph(t, name)
			step := func(be Backend) (float64, map[string][]uint32, map[string][]uint32, int) {
				x, err := NewExecutor(g, planFor(t, g), Options{Backend: be}, true)
				if err != nil {
					t.Fatal(err)
				}
				defer x.Close()
				before, err := x.Export()
				if err != nil {
					t.Fatal(err)
				}
				losses, after, launches := stepsOf(t, x, 1)
				return losses[0], before.Tensors, after, launches
			}
			lc, before, c, _ := step(NewCPU())
			lw, _, w, launches := step(webgpu(t))
			if d := math.Abs(lc-lw) / math.Abs(lc); d > webgpuTolerance {
				t.Errorf("loss %.7f on WebGPU, %.7f on the cpu", lw, lc)
			}
			worst, worstID, grads, stats := 0.0, "", 0, 0
			for id, x := range c {
				_, adam := c[id+".exp_avg"]
				switch {
				case !isFloat(g, id):
					if !slices.Equal(x, w[id]) {
						t.Errorf("%s: %v on WebGPU, %v on the cpu", id, w[id], x)
					}
					continue
				case adam || strings.HasSuffix(id, ".exp_avg_sq"):
					continue // follows from the gradient
				}
				var num, den float64
				grad := strings.HasSuffix(id, ".exp_avg")
				for i := range x {
					var dc, dw float64
					if grad {
						dc, dw = float64(math.Float32frombits(x[i]))/0.1, float64(math.Float32frombits(w[id][i]))/0.1
					} else {
						b := float64(math.Float32frombits(before[id][i]))
						dc, dw = float64(math.Float32frombits(x[i]))-b, float64(math.Float32frombits(w[id][i]))-b
					}
					num += (dw - dc) * (dw - dc)
					den += dc * dc
				}
				if den < 1e-12 {
					continue // no gradient, or no change, to speak of
				}
				if grad {
					grads++
				} else {
					stats++
				}
				if r := math.Sqrt(num / den); r > worst {
					worst, worstID = r, id
				}
			}
			if worst > webgpuTolerance {
				t.Errorf("%s differs by %.3g (relative, in norm)", worstID, worst)
			}
			t.Logf("%s: %d launches a step, loss %.7f (cpu %.7f); %d gradients and %d other tensors, the worst (%s) off by %.2g relative",
				name, launches, lw, lc, grads, stats, worstID, worst)
		})
	}
}

// isFloat says whether tensor id of g holds fp32 words.
func isFloat(g *ir.Graph, id string) bool {
	ti, ok := g.TensorIndex(id)
	return !ok || g.Tensors[ti].DType == ir.F32
}

// TestEvaluateLeavesTheState: evaluating an imported CNN (whose batch
// norms update their running statistics in place when they run) leaves
// every persistent tensor as it was, and gives the loss a step's forward
// pass gives on the same batch.
func TestEvaluateLeavesTheState(t *testing.T) {
	g := importedGraph(t, "resnet")
	x, err := NewExecutor(g, planFor(t, g), Options{Backend: NewCPU()}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	stepsOf(t, x, 1)
	if len(x.e.forwardWrites()) == 0 {
		t.Fatal("no persistent tensor is written by a forward node: the test needs the batch norms' running statistics")
	}
	before, err := x.Export()
	if err != nil {
		t.Fatal(err)
	}
	var losses []float32
	for range 2 {
		if err := x.e.feedSyntheticImages(*x.images, 7, x.classes); err != nil {
			t.Fatal(err)
		}
		res, err := x.e.Evaluate(context.Background(), "val")
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, math.Float32frombits(res.Watched["loss"][0]))
	}
	after, err := x.Export()
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range before.Tensors {
		if !slices.Equal(w, after.Tensors[id]) {
			t.Errorf("%s changed in evaluation", id)
		}
	}
	if losses[0] != losses[1] {
		t.Errorf("evaluating one batch twice: losses %v", losses)
	}
	t.Logf("%d tensors the forward pass writes restored; loss %v twice", len(x.e.forwardWrites()), losses[0])
}
