package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/tmmu/tmmu/gpu"
)

// steadyExecutor is the tiny GPT-2's executor on be after two warm-up
// steps.
func steadyExecutor(t testing.TB, be Backend) *Executor {
	t.Helper()
	g, _ := tinyGPT2(t, 2)
	x, err := NewExecutor(g, planFor(t, g), Options{Backend: be}, false)
	if err != nil {
		t.Fatal(err)
	}
	for s := range uint64(2) {
		if _, err := x.Step(context.Background(), s+1); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// TestStepAllocatesNothingOnCPU: a steady-state training step (feed the
// batch, run every launch, read the loss) allocates no Go memory on the
// cpu backend.
func TestStepAllocatesNothingOnCPU(t *testing.T) {
	x := steadyExecutor(t, NewCPU())
	defer x.Close()
	step := uint64(3)
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := x.Step(context.Background(), step); err != nil {
			t.Fatal(err)
		}
		step++
	})
	if allocs != 0 {
		t.Errorf("a cpu step allocates %.1f times, want 0", allocs)
	}
}

// TestStepCreatesNothingOnWebGPU: a steady-state step on WebGPU creates
// no bind group and no staging buffer and reads back only the loss.
func TestStepCreatesNothingOnWebGPU(t *testing.T) {
	w := webgpu(t)
	defer w.Close()
	x := steadyExecutor(t, w)
	defer x.Close()
	before := w.dev.Stats()
	const steps = 4
	for s := range uint64(steps) {
		if _, err := x.Step(context.Background(), s+3); err != nil {
			t.Fatal(err)
		}
	}
	d := statsDelta(w.dev.Stats(), before)
	if d.BindGroups != 0 || d.StagingBuffers != 0 {
		t.Errorf("%d steps created %d bind groups and %d staging buffers, want 0", steps, d.BindGroups, d.StagingBuffers)
	}
	if d.Reads != steps {
		t.Errorf("%d steps read back %d times, want once each (the loss)", steps, d.Reads)
	}
	t.Logf("per step: %d dispatches, %d submits, %d reads (%d bytes), %d bind groups",
		d.Dispatches/steps, d.Submits/steps, d.Reads/steps, d.ReadBytes/steps, d.BindGroups/steps)
}

func statsDelta(a, b gpu.Stats) gpu.Stats {
	return gpu.Stats{Dispatches: a.Dispatches - b.Dispatches, Submits: a.Submits - b.Submits, Reads: a.Reads - b.Reads,
		ReadBytes: a.ReadBytes - b.ReadBytes, BindGroups: a.BindGroups - b.BindGroups, StagingBuffers: a.StagingBuffers - b.StagingBuffers}
}

// BenchmarkStep is one steady-state training step of the tiny GPT-2
// (the executor's: feed, launches, loss), with allocations and, on
// WebGPU, the device work per step.
func BenchmarkStep(b *testing.B) {
	b.Run("cpu", func(b *testing.B) { benchStep(b, NewCPU(), nil) })
	b.Run("webgpu", func(b *testing.B) {
		w := webgpu(b)
		defer w.Close()
		benchStep(b, w, w.dev)
	})
}

func benchStep(b *testing.B, be Backend, dev *gpu.Device) {
	x := steadyExecutor(b, be)
	defer x.Close()
	var before gpu.Stats
	if dev != nil {
		before = dev.Stats()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := x.Step(context.Background(), uint64(i)+3); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if dev != nil {
		d := statsDelta(dev.Stats(), before)
		n := float64(b.N)
		b.ReportMetric(float64(d.Dispatches)/n, "dispatches/op")
		b.ReportMetric(float64(d.Reads)/n, "reads/op")
		b.ReportMetric(float64(d.ReadBytes)/n, "readB/op")
		b.ReportMetric(float64(d.BindGroups)/n, "bindgroups/op")
		b.ReportMetric(float64(d.StagingBuffers)/n, "staging/op")
	}
}

// cancelAfter is a context whose Err turns to Canceled after n calls:
// a step abandoned between two launches.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// TestCloseAfterAnAbandonedStep: a step cancelled half way leaves
// dispatches recorded but not submitted; closing the engine then (its
// bind groups released while the open batch still names them, which
// wgpu-native answers by aborting the process) is safe, and a new engine
// on the same device trains on.
func TestCloseAfterAnAbandonedStep(t *testing.T) {
	w := webgpu(t)
	defer w.Close()
	g, _ := tinyGPT2(t, 2)
	p := planFor(t, g)
	x, err := NewExecutor(g, p, Options{Backend: w}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Step(&cancelAfter{context.Background(), 40}, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("step cancelled after 40 nodes: %v", err)
	}
	x.Close()
	y, err := NewExecutor(g, p, Options{Backend: w}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if _, err := y.Step(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
}
