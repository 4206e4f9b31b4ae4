package engine

import (
	"math"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
)

// TestRealShapesWebGPUMatchesCPU trains GPT-2 graphs at the sizes users
// run (the GPT-2 vocabulary, a 1024-token sequence, both together, GPT-2
// small's width and heads; batch 2), for a few steps on WebGPU and on the
// cpu, and compares the losses (relative 1e-4) and every parameter and
// optimizer state (absolute 1e-3).
//
// The first case is the regression test for truncated kernels: the old
// cross-entropy ran as one invocation looping rows·(2·vocab+1) times,
// 12.9 million here; llvmpipe ended it after 65,535 and the loss came out
// wrong without an error.
func TestRealShapesWebGPUMatchesCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("real shapes take minutes")
	}
	cases := []struct {
		name string
		c    models.GPT2Config
	}{
		{"vocab-50257", models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 64, Context: 64, Batch: 2, Vocab: 50257}},
		// Logits of 2·1024·50,257 floats (411 MB): larger than one
		// binding on llvmpipe (128 MiB), so bound as windows.
		{"vocab-50257-seq-1024", models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 1024, Context: 1024, Batch: 2, Vocab: 50257}},
		{"seq-1024", models.GPT2Config{Layers: 1, Hidden: 64, Heads: 2, Seq: 1024, Context: 1024, Batch: 2, Vocab: 96}},
		{"hidden-768-heads-12", models.GPT2Config{Layers: 1, Hidden: 768, Heads: 12, Seq: 32, Context: 32, Batch: 2, Vocab: 256}},
	}
	const steps = 2
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.DType, c.Train = ir.F32, true
			g := compiled(t)(models.GPT2(c))
			p := planFor(t, g)
			w := webgpu(t)
			defer w.Close()
			gpu := train(t, g, p, c.Vocab, steps, Options{Backend: w})
			if logits := 4 * c.Batch * c.Seq * c.Vocab; logits > w.dev.Limits().MaxStorageBufferBindingSize && w.windowed == 0 {
				t.Errorf("logits of %d bytes, above the binding limit, but no launch bound a slot as windows", logits)
			}
			cpu := train(t, g, p, c.Vocab, steps, Options{Backend: NewCPU()})
			// A fresh model predicts about uniformly: ln(vocab).
			if want := math.Log(float64(c.Vocab)); math.Abs(float64(cpu.losses[0])-want) > 1 {
				t.Errorf("cpu first loss %v, want about ln(%d) = %.3f", cpu.losses[0], c.Vocab, want)
			}
			worstLoss := 0.0
			for s := range steps {
				rel := math.Abs(float64(gpu.losses[s]-cpu.losses[s])) / math.Abs(float64(cpu.losses[s]))
				worstLoss = max(worstLoss, rel)
			}
			if worstLoss > 1e-4 {
				t.Errorf("losses differ by up to %.3g relative: webgpu %v, cpu %v", worstLoss, gpu.losses, cpu.losses)
			}
			worstState, n := 0.0, 0
			for id, x := range cpu.state {
				y := gpu.state[id]
				for i := range x {
					worstState = max(worstState, math.Abs(float64(x[i]-y[i])))
				}
				n += len(x)
			}
			if worstState > 1e-3 {
				t.Errorf("state differs by up to %.3g", worstState)
			}
			t.Logf("%d steps: losses webgpu %v cpu %v (worst relative %.2g); %d state elements, worst |webgpu − cpu| %.2g",
				steps, gpu.losses, cpu.losses, worstLoss, n, worstState)
		})
	}
}

// shortLoops is a cpu device that, like llvmpipe, ends invocations after
// a number of loop iterations.
type shortLoops struct {
	*CPU
	limit uint64
}

func (s shortLoops) MaxLoopIterations() uint64 { return s.limit }

// TestRefusesLoopsTheDeviceEnds: a launch whose invocations would loop
// longer than the device lets them is refused when the engine is built,
// naming the node, instead of running and computing garbage.
func TestRefusesLoopsTheDeviceEnds(t *testing.T) {
	g, _ := tinyGPT2(t, 2)
	p := planFor(t, g)
	// The tiny model's longest loop: the matmul of the MLP's output
	// projection, over an inner dimension of 4·64 = 256 (256 iterations,
	// 4 + 16 to store the lane's 4×4 block).
	e, err := New(g, p, Options{Backend: shortLoops{NewCPU(), 276}})
	if err != nil {
		t.Fatalf("a limit of 276: %v", err)
	}
	e.Close()
	_, err = New(g, p, Options{Backend: shortLoops{NewCPU(), 275}})
	if failure.CodeOf(err) != failure.UnsupportedExecution || !strings.Contains(err.Error(), "kernel matmul loops up to 276 times") ||
		!strings.Contains(err.Error(), "ends an invocation after 275") {
		t.Fatalf("a device ending invocations after 275 iterations: %v, want UNSUPPORTED_EXECUTION naming the kernel and the limit", err)
	}
	t.Log(err)
}

// TestRowChunksAddTheSameBits: sums over rows cut into chunks (here 5
// rows, so the tiny GPT-2's 64 rows, 32-row inner dimensions and 64-row
// weight gradients take up to 13 launches each) train to the same bits
// as one launch per sum, on the cpu and on WebGPU: a chunk continues the
// sums in the order one launch would add them. Devices that end long
// loops (llvmpipe) thus run any number of rows.
func TestRowChunksAddTheSameBits(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { rowChunksAddTheSameBits(t, func() Backend { return NewCPU() }) })
	t.Run("webgpu", func(t *testing.T) {
		webgpu(t).Close() // skips without an adapter
		rowChunksAddTheSameBits(t, func() Backend { return webgpu(t) })
	})
}

func rowChunksAddTheSameBits(t *testing.T, open func() Backend) {
	g, _ := tinyGPT2(t, 2)
	p := planFor(t, g)
	whole := paramsAfter(t, g, p, Options{Backend: open()})
	defer func(old uint64) { rowChunk = old }(rowChunk)
	rowChunk = 5
	e, err := New(g, p, Options{Backend: open()})
	if err != nil {
		t.Fatal(err)
	}
	launches := 0
	for _, a := range e.actions {
		launches += len(a.launches)
	}
	e.Close()
	chunked := paramsAfter(t, g, p, Options{Backend: open()})
	n := 0
	for id, x := range whole {
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(chunked[id][i]) {
				t.Fatalf("%s[%d]: %v in chunks of 5 rows, %v in one launch", id, i, chunked[id][i], x[i])
			}
		}
		n += len(x)
	}
	t.Logf("%d launches with 5-row chunks; %d state elements bit-identical after 2 steps", launches, n)
}
