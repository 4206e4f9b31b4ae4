package engine

import (
	"errors"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/tmmu/tmmu/gpu"

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
func webgpu(t testing.TB) *WebGPU { t.Helper(); return webgpuWith(t, gpu.Options{}) }

func webgpuWith(t testing.TB, o gpu.Options) *WebGPU {
	t.Helper()
	w, err := newWebGPU(o)
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
	twins := func(kind string, ref, wgsl map[string]bool) {
		for name := range ref {
			if !wgsl[name] {
				t.Errorf("%s kernel %s has no WGSL twin", kind, name)
			}
		}
		for name := range wgsl {
			if !ref[name] {
				t.Errorf("WGSL %s kernel %s has no reference", kind, name)
			}
		}
	}
	ref := keys(kernels)
	for name := range rangeKernels {
		ref[name] = true
	}
	twins("invocation", ref, keys(wgslKernels))
	twins("workgroup", keys(groupKernels), keys(wgslGroupKernels))
}

// TestEveryKernelCompiles: every WGSL kernel compiles on the device,
// with its eight operands in six flat slots and, where the device binds
// a slot as several windows, with every slot windowed.
func TestEveryKernelCompiles(t *testing.T) {
	w := webgpu(t)
	defer w.Close()
	ws := w.dev.Windows()
	slot := []int{0, 1, 2, 3, 4, 5, 0, 1}
	shapes := []bindShape{{slot, make([]bool, gpu.NumSlots)}}
	if ws.Count > 1 {
		shapes = append(shapes, bindShape{slot, slices.Repeat([]bool{true}, gpu.NumSlots)})
	}
	n := 0
	for _, shape := range shapes {
		for name, group := range map[bool]map[string]string{false: wgslKernels, true: wgslGroupKernels} {
			for k := range group {
				src, _ := wgslSource(wgslPrelude(ws, shape), k, name)
				if _, err := w.dev.Compile(shape.key(k), src); err != nil {
					t.Errorf("%s: %v", shape.key(k), err)
				}
				n++
			}
		}
	}
	t.Logf("%d kernels compiled (windows %+v)", n, ws)
}

func keys[V any](m map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
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
	gm := compiled(t)(models.GPT2(models.GPT2Config{Layers: 1, Hidden: 32, Heads: 4, Seq: 8, Context: 8, Batch: 2, Vocab: 24, DType: ir.F32, Train: true}))
	lm := compiled(t)(models.Llama(models.LlamaConfig{Layers: 1, Hidden: 32, Heads: 4, KVHeads: 2, Intermediate: 48, Seq: 8, Batch: 2, Vocab: 24, DType: ir.F32, Train: true}))
	for _, g := range []*ir.Graph{gm, lm} {
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
			t.Errorf("%s: parameters differ by up to %g", g.Name, worst)
		}
		t.Logf("%s: %d parameters, max |webgpu − cpu| after 2 steps %.3g", g.Name, len(a), worst)
	}
}

// paramsAfter is the persistent state after two training steps.
func paramsAfter(t *testing.T, g *ir.Graph, p *planner.Plan, opts Options) map[string][]float32 {
	t.Helper()
	vocab, err := vocabOf(g)
	if err != nil {
		t.Fatal(err)
	}
	return train(t, g, p, vocab, 2, opts).state
}

// TestZeROWebGPU: ZeRO-3 over 4 in-process ranks, each on its own WebGPU
// device, matches the unsharded WebGPU run.
func TestZeROWebGPU(t *testing.T) {
	webgpu(t).Close()
	newBackend := func() Backend { return webgpu(t) }
	whole := zeroRun(t, newBackend, 1, 0, 3)
	compareZeRO(t, whole, zeroRun(t, newBackend, 4, 3, 3), 4)
}

// TestWindowedBindingsMatchWhole trains with every region larger than
// one binding (bindings lowered to 16 KiB, so each slot is 5 windows of 16
// KiB and the plan's regions are cut at 80 KiB): the windowed kernels
// compute the same bits as the kernels that bind regions whole.
func TestWindowedBindingsMatchWhole(t *testing.T) {
	small := webgpuWith(t, gpu.Options{MaxBindingBytes: 16 << 10})
	defer small.Close()
	ws := small.dev.Windows()
	if ws.Count < 2 {
		t.Skipf("the device binds %d window per slot", ws.Count)
	}
	whole := webgpu(t)
	defer whole.Close()
	g, _ := tinyGPT2(t, 2)
	p, err := planner.PlanMemory(g, planner.Options{Mode: planner.TrainFull, Arenas: ExecutableArenas(small.Limits(), nil)})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(g, p, Options{Backend: small})
	if err != nil {
		t.Fatal(err)
	}
	regions := e.Memory().Stats().Regions
	e.Close()
	if regions < 2 {
		t.Fatalf("the plan fits %d region", regions)
	}
	a := paramsAfter(t, g, p, Options{Backend: small})
	if small.windowed == 0 {
		t.Fatal("no launch bound a slot as windows")
	}
	b := paramsAfter(t, g, planFor(t, g), Options{Backend: whole})
	n := 0
	for id, x := range a {
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(b[id][i]) {
				t.Fatalf("%s[%d]: windowed %v, whole %v", id, i, x[i], b[id][i])
			}
		}
		n += len(x)
	}
	t.Logf("windows %+v: %d regions, %d launches with windowed slots; %d state elements bit-identical after 2 steps", ws, regions, small.windowed, n)
}
