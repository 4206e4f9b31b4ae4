package engine

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
)

// tinyGPT2 is the model: 2 layers, hidden 64, sequence 32.
func tinyGPT2(t testing.TB, batch uint64) (*ir.Graph, models.GPT2Config) {
	t.Helper()
	c := models.GPT2Config{Layers: 2, Hidden: 64, Heads: 4, Seq: 32, Context: 32, Batch: batch, Vocab: 64, DType: ir.F32, Train: true}
	return compiled(t)(models.GPT2(c)), c
}

// compiled returns a function that compiles a generator's model (and
// fails the test on the generator's or the compiler's error).
func compiled(t testing.TB) func(m *ir.Model, err error) *ir.Graph {
	return func(m *ir.Model, err error) *ir.Graph {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		g, err := ir.Compile(m)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
}

func planFor(t testing.TB, g *ir.Graph) *planner.Plan {
	t.Helper()
	p, err := planner.PlanMemory(g, planner.Options{Mode: planner.TrainFull, Arenas: ExecutableArenas(NewCPU().Limits(), nil)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type run struct {
	losses []float32
	states []StateHash
	// Device memory: reserved from the device and allocated to arenas;
	// the plan's arena bytes; seconds per step.
	reserved, allocated, arenas uint64
	regions                     int
	perStep                     time.Duration
	// state is the persistent tensors after the last step.
	state map[string][]float32
}

func train(t testing.TB, g *ir.Graph, p *planner.Plan, vocab uint64, steps int, opts Options) run {
	t.Helper()
	e, err := New(g, p, opts)
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
	var r run
	st := e.Memory().Stats()
	r.reserved, r.allocated, r.arenas, r.regions = st.ReservedBytes, st.AllocatedBytes, st.PlannedBytes, st.Regions
	var took time.Duration
	for s := range steps {
		if err := e.FeedLM(uint64(s), vocab); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res, err := e.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		took += time.Since(start)
		r.losses = append(r.losses, Float32s(res.Watched["loss"])[0])
		st, err := e.CommitExecution()
		if err != nil {
			t.Fatal(err)
		}
		r.states = append(r.states, st)
	}
	r.perStep = took / time.Duration(steps)
	r.state = map[string][]float32{}
	for _, id := range e.persistent() {
		w, err := e.ReadTensor(id)
		if err != nil {
			t.Fatal(err)
		}
		r.state[id] = Float32s(w)
	}
	return r
}

func TestTrainTinyGPT2CPU(t *testing.T) {
	g, c := tinyGPT2(t, 2)
	p := planFor(t, g)
	planned := train(t, g, p, c.Vocab, 20, Options{Backend: NewCPU()})
	ref := train(t, g, p, c.Vocab, 20, Options{Backend: NewCPU(), Unshared: true})
	t.Logf("losses %v", planned.losses)
	if planned.losses[19] >= planned.losses[0]*0.8 {
		t.Errorf("loss did not fall: %v → %v", planned.losses[0], planned.losses[19])
	}
	for s := range planned.losses {
		if planned.losses[s] != ref.losses[s] || planned.states[s] != ref.states[s] {
			t.Fatalf("step %d: planned loss %v state %s, unshared loss %v state %s", s, planned.losses[s], planned.states[s], ref.losses[s], ref.states[s])
		}
	}
	checkMemory(t, "cpu", planned, ref)
}

// checkMemory: the device bytes are exactly the plan's reserved arena
// bytes, in one region; the unshared reference holds one buffer per
// storage, each its bytes rounded to 4.
func checkMemory(t *testing.T, backend string, planned, ref run) {
	t.Helper()
	if planned.allocated != planned.arenas || planned.reserved != planned.arenas || planned.regions != 1 {
		t.Errorf("%s: device reserved %d and allocated %d bytes in %d regions for %d bytes of arenas", backend, planned.reserved, planned.allocated, planned.regions, planned.arenas)
	}
	if ref.reserved < ref.arenas || ref.reserved > ref.arenas+3*uint64(ref.regions) {
		t.Errorf("%s: unshared: %d bytes in %d buffers for %d bytes of storages", backend, ref.reserved, ref.regions, ref.arenas)
	}
	t.Logf("%s: device bytes planned %d (1 buffer), unshared %d (%d buffers; ratio %.3f); %.1f steps/s planned, %.1f unshared",
		backend, planned.reserved, ref.reserved, ref.regions, float64(planned.reserved)/float64(ref.reserved),
		float64(time.Second)/float64(planned.perStep), float64(time.Second)/float64(ref.perStep))
}

// TestSmallRegions runs the model on a device whose buffers hold 128 KiB:
// the arenas are planned with region_bytes and cut over several regions,
// the device holds exactly the plan's bytes in them, and the step
// computes the same state as with one large region.
func TestSmallRegions(t *testing.T) {
	g, c := tinyGPT2(t, 2)
	small := NewCPU()
	small.SetLimits(Limits{MaxBufferSize: 128 << 10, MaxStorageBufferBindingSize: 128 << 10, MinStorageBufferOffsetAlignment: 256})
	p, err := planner.PlanMemory(g, planner.Options{Mode: planner.TrainFull, Arenas: ExecutableArenas(small.Limits(), nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(g, planFor(t, g), Options{Backend: small}); failure.CodeOf(err) != failure.ArenaTooSmall {
		t.Fatalf("a plan made for large buffers on a small-buffer device: %v, want ARENA_TOO_SMALL", err)
	}
	got := train(t, g, p, c.Vocab, 2, Options{Backend: small})
	want := train(t, g, planFor(t, g), c.Vocab, 2, Options{Backend: NewCPU()})
	if got.states[1] != want.states[1] {
		t.Fatalf("state %s with 128 KiB regions, %s with one region", got.states[1], want.states[1])
	}
	if got.reserved != got.arenas || got.allocated != got.arenas || got.regions < 2 {
		t.Errorf("%d bytes of arenas: device reserved %d, allocated %d in %d regions", got.arenas, got.reserved, got.allocated, got.regions)
	}
	t.Logf("%d bytes of arenas in %d bytes of %d regions of at most 128 KiB", got.arenas, got.reserved, got.regions)
}

// TestGradientsMatchFiniteDifferences checks every backward kernel at
// once: the gradient the backward pass writes for a parameter element
// equals the loss's central difference when that element moves.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	for _, llama := range []bool{false, true} {
		var g *ir.Graph
		if llama {
			g = compiled(t)(models.Llama(models.LlamaConfig{Layers: 1, Hidden: 16, Heads: 4, KVHeads: 2, Intermediate: 24, Seq: 6, Batch: 2, Vocab: 12, DType: ir.F32, Train: true}))
		} else {
			g = compiled(t)(models.GPT2(models.GPT2Config{Layers: 1, Hidden: 16, Heads: 2, Seq: 6, Context: 6, Batch: 2, Vocab: 12, DType: ir.F32, Train: true}))
		}
		p := planFor(t, g)
		e, err := New(g, p, Options{Backend: NewCPU()})
		if err != nil {
			t.Fatal(err)
		}
		var grads []string
		for i := range g.Tensors {
			if tt := &g.Tensors[i]; tt.Role == ir.Parameter {
				grads = append(grads, tt.ID)
				if err := e.Watch("grad/" + tt.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := e.Watch("loss"); err != nil {
			t.Fatal(err)
		}
		// The loss and gradients at the initial state, and the loss with
		// one element moved by ±h.
		loss := func(id string, k int, h float32) (float32, map[string][]uint32) {
			if err := e.InitState(func(pid string, shape []uint64, i uint64) float32 {
				v := DefaultInit(pid, shape, i) + 0.05*DefaultInit(pid+"#", []uint64{1, 1}, i)/0.02
				if pid == id && int(i) == k {
					v += h
				}
				return v
			}); err != nil {
				t.Fatal(err)
			}
			if err := e.FeedLM(3, 12); err != nil {
				t.Fatal(err)
			}
			res, err := e.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			watched := map[string][]uint32{}
			for id, w := range res.Watched {
				watched[id] = slices.Clone(w) // the engine reuses them
			}
			return Float32s(res.Watched["loss"])[0], watched
		}
		_, watched := loss("", -1, 0)
		checked := 0
		for _, id := range grads {
			gw, ok := watched["grad/"+id]
			if !ok {
				t.Fatalf("llama=%v: gradient of %s was not written", llama, id)
			}
			grad := Float32s(gw)
			for _, k := range []int{0, len(grad) / 3, len(grad) - 1} {
				const h = 1e-2
				up, _ := loss(id, k, h)
				down, _ := loss(id, k, -h)
				fd := (up - down) / (2 * h)
				if testing.Verbose() {
					t.Logf("%s[%d] %g %g", id, k, grad[k], fd)
				}
				if d := fd - grad[k]; d*d > 2.5e-9+1e-4*fd*fd {
					t.Errorf("llama=%v: d loss/d %s[%d]: backward %g, finite difference %g", llama, id, k, grad[k], fd)
				}
				checked++
			}
		}
		t.Logf("llama=%v: %d gradient elements over %d parameters match", llama, checked, len(grads))
		e.Close()
	}
}

// TestCorruptedPlan overlaps two live tensors: the verifier refuses the
// plan, and executed anyway (verification off) it computes something other
// than the unshared reference — so the identity test can fail.
func TestCorruptedPlan(t *testing.T) {
	g, c := tinyGPT2(t, 2)
	p := planFor(t, g)
	bad := corrupt(t, g, p)
	_, err := New(g, bad, Options{Backend: NewCPU()})
	if code := failure.CodeOf(err); code != failure.AddressCollision {
		t.Fatalf("the verifier gave %v (%s), want ADDRESS_COLLISION", err, code)
	}
	t.Logf("refused: %v", err)
	ref := train(t, g, p, c.Vocab, 2, Options{Backend: NewCPU(), Unshared: true})
	got := train(t, g, bad, c.Vocab, 2, Options{Backend: NewCPU(), SkipVerify: true})
	if got.states[1] == ref.states[1] {
		t.Fatalf("a plan with two live tensors overlapped computed the reference state")
	}
	t.Logf("executed anyway: loss %v vs %v, state %s vs %s", got.losses, ref.losses, got.states[1].String()[:12], ref.states[1].String()[:12])
}

// corrupt returns p with one activation moved onto another that is live
// at the same time (same arena, overlapping lifetimes).
func corrupt(t *testing.T, g *ir.Graph, p *planner.Plan) *planner.Plan {
	t.Helper()
	q := *p
	q.Tensors = slices.Clone(p.Tensors)
	find := func(id string) *planner.TensorPlacement {
		for i := range q.Tensors {
			if q.Tensors[i].ID == id {
				return &q.Tensors[i]
			}
		}
		t.Fatalf("no placement for %s", id)
		return nil
	}
	// The attention projection is written while the residual stream
	// it is added to is still live.
	a, b := find("h0.attn.proj"), find("emb.out")
	if a.Arena != b.Arena || a.Lifetime[0] > b.Lifetime[1] || b.Lifetime[0] > a.Lifetime[1] {
		t.Fatalf("%+v and %+v are not live together", a, b)
	}
	a.Offset = b.Offset
	return &q
}

// TestMemoryOperators: ZeroTensor writes zeros, DebugFillTensor a
// pattern that depends only on the seed (and is refused in confidential
// and regulated modes), and CommitExecution is idempotent.
func TestMemoryOperators(t *testing.T) {
	g, _ := tinyGPT2(t, 2)
	p := planFor(t, g)
	e, err := New(g, p, Options{Backend: NewCPU()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.InitState(nil); err != nil {
		t.Fatal(err)
	}
	if err := e.DebugFillTensor("h0.ln_1.b", 7); err != nil {
		t.Fatal(err)
	}
	a, _ := e.ReadTensor("h0.ln_1.b")
	if err := e.DebugFillTensor("h0.ln_1.b", 7); err != nil {
		t.Fatal(err)
	}
	b, _ := e.ReadTensor("h0.ln_1.b")
	if !slices.Equal(a, b) || slices.Equal(a, make([]uint32, len(a))) {
		t.Fatalf("debug fill is not a deterministic non-zero pattern: %v / %v", a[:4], b[:4])
	}
	s1, _ := e.CommitExecution()
	s2, _ := e.CommitExecution()
	if s1 != s2 {
		t.Fatalf("two commits with nothing between: %s, %s", s1, s2)
	}
	if err := e.ZeroTensor("h0.ln_1.b"); err != nil {
		t.Fatal(err)
	}
	z, _ := e.ReadTensor("h0.ln_1.b")
	if !slices.Equal(z, make([]uint32, len(z))) {
		t.Fatalf("zeroed tensor holds %v", z[:4])
	}
	if s3, _ := e.CommitExecution(); s3 == s1 {
		t.Fatal("the state hash did not see a parameter change")
	}
	for _, m := range []ir.DataMode{ir.DataConfidential, ir.DataRegulated} {
		c, err := New(g, p, Options{Backend: NewCPU(), DataMode: m})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DebugFillTensor("h0.ln_1.b", 1); failure.CodeOf(err) != failure.ModeViolation {
			t.Errorf("%s: debug fill gave %v", m, err)
		}
		c.Close()
	}
}

// TestUnsharedLlama: the unshared reference (one buffer per storage) of
// a llama computes the planned run's bits on the cpu; WebGPU, whose
// kernels bind six regions, refuses its attention backward (seven
// storages) by name.
func TestUnsharedLlama(t *testing.T) {
	g := compiled(t)(models.Llama(models.LlamaConfig{Layers: 1, Hidden: 32, Heads: 4, KVHeads: 2, Intermediate: 48, Seq: 8, Batch: 2, Vocab: 24, DType: ir.F32, Train: true}))
	p := planFor(t, g)
	planned := train(t, g, p, 24, 3, Options{Backend: NewCPU()})
	ref := train(t, g, p, 24, 3, Options{Backend: NewCPU(), Unshared: true})
	for s := range planned.states {
		if planned.states[s] != ref.states[s] {
			t.Fatalf("step %d: planned state %s, unshared %s", s, planned.states[s], ref.states[s])
		}
	}
	t.Logf("planned %d bytes in %d region, unshared %d bytes in %d buffers", planned.reserved, planned.regions, ref.reserved, ref.regions)
	w := webgpu(t)
	defer w.Close()
	_, err := New(g, p, Options{Backend: w, Unshared: true})
	if failure.CodeOf(err) != failure.UnsupportedExecution || !strings.Contains(err.Error(), "binds 7 regions") {
		t.Fatalf("webgpu unshared llama: %v, want UNSUPPORTED_EXECUTION naming the 7 regions", err)
	}
	t.Log(err)
}

// TestMemoryStatsSayWhyBytesDiffer: the memory report says what the
// device holds beside the plan's (or the storages') bytes, and why.
func TestMemoryStatsSayWhyBytesDiffer(t *testing.T) {
	for _, c := range []struct {
		st   MemoryStats
		want string
	}{
		{MemoryStats{Regions: 1, PlannedBytes: 1024, ReservedBytes: 1024, AllocatedBytes: 1024},
			"plan reserves 1.00 KiB; device holds 1.00 KiB in 1 region, exactly the plan's bytes"},
		{MemoryStats{Regions: 3, PlannedBytes: 1000, ReservedBytes: 1024, AllocatedBytes: 1024},
			"plan reserves 1000 B; device holds 1.00 KiB in 3 regions, 24 B more: arenas whose reserved bytes are not a multiple of the device's offset alignment are rounded up"},
		{MemoryStats{Regions: 2, PlannedBytes: 6, ReservedBytes: 8, AllocatedBytes: 8, Unshared: true},
			"unshared reference: the storages take 6 B; device holds 8 B in 2 regions, 2 B more: one buffer per storage, each rounded up to a multiple of 4 bytes"},
		{MemoryStats{Regions: 2, PlannedBytes: 8, ReservedBytes: 8, AllocatedBytes: 8, Unshared: true},
			"unshared reference: the storages take 8 B; device holds 8 B in 2 regions, one buffer per storage"},
	} {
		if got := c.st.String(); !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v:\n got %s\nwant %s…", c.st, got, c.want)
		}
	}
}

// TestCheckOps: the generators' graphs use only ops with kernels, and a
// graph with others is refused naming the first node and op.
func TestCheckOps(t *testing.T) {
	for _, train := range []bool{false, true} {
		for _, m := range []func() (*ir.Model, error){
			func() (*ir.Model, error) {
				c := models.DefaultGPT2Config()
				c.Layers, c.Train = 1, train
				return models.GPT2(c)
			},
			func() (*ir.Model, error) {
				c := models.DefaultLlamaConfig()
				c.Layers, c.Train = 1, train
				return models.Llama(c)
			},
		} {
			model, err := m()
			if err != nil {
				t.Fatal(err)
			}
			g, err := ir.Compile(model)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckOps(g); err != nil {
				t.Errorf("%s: %v", model.Name, err)
			}
		}
	}
	c := models.DefaultGPT2Config()
	c.Layers = 1
	model, _ := models.GPT2(c)
	model.Nodes[3].Op = "aten::convolution"
	g, err := ir.Compile(model)
	if err != nil {
		t.Fatal(err)
	}
	err = CheckOps(g)
	if failure.CodeOf(err) != failure.UnsupportedExecution || !strings.Contains(err.Error(), "node "+strconv.Quote(model.Nodes[3].ID)+": op \"aten::convolution\" has no kernel; 1 of") {
		t.Fatalf("got %v", err)
	}
}
