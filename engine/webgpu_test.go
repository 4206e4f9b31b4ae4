package engine

import (
	"errors"
	"math"
	"os"
	"testing"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
)

// webgpuTolerance bounds |webgpu − cpu| for losses and parameters: WGSL's
// exp, log, tanh, sqrt, pow, sin and cos are not correctly rounded, and
// AdamW turns tiny gradient differences into updates of up to lr·|g|/eps.
const webgpuTolerance = 1e-4

// webgpu opens the WebGPU backend or skips the test when the machine has
// no adapter, unless TMMU_REQUIRE_WEBGPU=1 (CI installs the CPU Vulkan
// driver and sets it).
func webgpu(t testing.TB) *WebGPU {
	t.Helper()
	w, err := NewWebGPU()
	if errors.Is(err, ErrNoAdapter) && os.Getenv("TMMU_REQUIRE_WEBGPU") != "1" {
		t.Skipf("no WebGPU adapter (install mesa-vulkan-drivers for one on the CPU): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("webgpu: %s", w.Describe())
	return w
}

func TestWGSLTwins(t *testing.T) {
	for name := range kernels {
		if _, ok := wgslKernels[name]; !ok {
			t.Errorf("kernel %s has no WGSL twin", name)
		}
	}
	for name := range wgslKernels {
		if _, ok := kernels[name]; !ok {
			t.Errorf("WGSL kernel %s has no reference", name)
		}
	}
}

// TestTrainTinyGPT2WebGPU: the model on WebGPU for 20 steps. The
// loss falls; planned and unshared execution are bit-identical on the
// device; and the run agrees with the cpu reference within
// webgpuTolerance.
func TestTrainTinyGPT2WebGPU(t *testing.T) {
	g, c := tinyGPT2(t, 2)
	p := planFor(t, g)
	w1 := webgpu(t)
	defer w1.Close()
	planned := train(t, g, p, c.Vocab, 20, Options{Backend: w1})
	w2 := webgpu(t)
	defer w2.Close()
	ref := train(t, g, p, c.Vocab, 20, Options{Backend: w2, Unshared: true})
	cpu := train(t, g, p, c.Vocab, 20, Options{Backend: NewCPU()})
	t.Logf("webgpu losses %v", planned.losses)
	if planned.losses[19] >= planned.losses[0]*0.8 {
		t.Errorf("loss did not fall: %v → %v", planned.losses[0], planned.losses[19])
	}
	for s := range planned.losses {
		if planned.losses[s] != ref.losses[s] || planned.states[s] != ref.states[s] {
			t.Fatalf("step %d: planned loss %v state %s, unshared loss %v state %s", s, planned.losses[s], planned.states[s], ref.losses[s], ref.states[s])
		}
	}
	worst := 0.0
	for s := range planned.losses {
		worst = max(worst, math.Abs(float64(planned.losses[s]-cpu.losses[s])))
	}
	if worst > webgpuTolerance {
		t.Errorf("losses differ from cpu by up to %g: %v vs %v", worst, planned.losses, cpu.losses)
	}
	t.Logf("max |webgpu − cpu| over 20 losses: %.3g", worst)
	checkMemory(t, "webgpu", planned, ref)
}

// TestWebGPUMatchesCPU runs one step of small GPT-2 and Llama graphs
// (every kernel, grouped-query attention included) on both backends and
// compares every parameter after the update.
func TestWebGPUMatchesCPU(t *testing.T) {
	w := webgpu(t)
	defer w.Close()
	gm, err := models.GPT2(models.GPT2Config{Layers: 1, Hidden: 32, Heads: 4, Seq: 8, Context: 8, Batch: 2, Vocab: 24, DType: ir.F32, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	lm, err := models.Llama(models.LlamaConfig{Layers: 1, Hidden: 32, Heads: 4, KVHeads: 2, Intermediate: 48, Seq: 8, Batch: 2, Vocab: 24, DType: ir.F32, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*ir.Model{gm, lm} {
		g, err := ir.Compile(m)
		if err != nil {
			t.Fatal(err)
		}
		p := planFor(t, g)
		a := paramsAfter(t, g, p, Options{Backend: w})
		b := paramsAfter(t, g, p, Options{Backend: NewCPU()})
		worst := 0.0
		for id, x := range a {
			for i := range x {
				worst = max(worst, math.Abs(float64(x[i]-b[id][i])))
			}
		}
		if worst > webgpuTolerance {
			t.Errorf("%s: parameters differ by up to %g", m.Name, worst)
		}
		t.Logf("%s: %d parameters, max |webgpu − cpu| after 2 steps %.3g", m.Name, len(a), worst)
	}
}

func paramsAfter(t *testing.T, g *ir.Graph, p *planner.Plan, opts Options) map[string][]float32 {
	t.Helper()
	e, err := New(g, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.InitState(nil); err != nil {
		t.Fatal(err)
	}
	vocab, err := vocabOf(g)
	if err != nil {
		t.Fatal(err)
	}
	for s := range 2 {
		if err := e.FeedLM(uint64(s), vocab); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Step(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string][]float32{}
	for _, id := range e.persistent() {
		w, err := e.ReadTensor(id)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = Float32s(w)
	}
	return out
}

// TestZeROWebGPU: ZeRO-3 over 4 in-process ranks, each on its own WebGPU
// device, matches the unsharded WebGPU run.
func TestZeROWebGPU(t *testing.T) {
	webgpu(t).Close()
	newBackend := func() Backend { return webgpu(t) }
	whole := zeroRun(t, newBackend, 1, 0, 3)
	compareZeRO(t, whole, zeroRun(t, newBackend, 4, 3, 3), 4)
}
