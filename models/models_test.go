package models

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/ir"
)

type genCase struct {
	name string
	gen  func() (*ir.Model, error)
}

// cases lists every generator in inference and training, in several dtypes.
func cases() []genCase {
	var cs []genCase
	add := func(name string, gen func() (*ir.Model, error)) {
		cs = append(cs, genCase{name, gen})
	}
	for _, train := range []bool{false, true} {
		for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.F16} {
			suffix := fmt.Sprintf("/%s/%s", mode(train), dt)
			add("chain"+suffix, func() (*ir.Model, error) {
				c := DefaultChainConfig()
				c.DType, c.Train = dt, train
				return Chain(c)
			})
			add("residual"+suffix, func() (*ir.Model, error) {
				c := DefaultResidualConfig()
				c.DType, c.Train = dt, train
				return Residual(c)
			})
			add("mlp"+suffix, func() (*ir.Model, error) {
				c := DefaultMLPConfig()
				c.DType, c.Train = dt, train
				return MLP(c)
			})
			add("mlp-1layer"+suffix, func() (*ir.Model, error) {
				c := DefaultMLPConfig()
				c.DType, c.Train, c.Layers = dt, train, 1
				return MLP(c)
			})
			add("gpt2"+suffix, func() (*ir.Model, error) {
				c := DefaultGPT2Config()
				c.DType, c.Train = dt, train
				return GPT2(c)
			})
			add("gpt2-small-batch"+suffix, func() (*ir.Model, error) {
				c := GPT2Config{Layers: 2, Hidden: 64, Heads: 4, Seq: 16, Context: 32, Batch: 3, Vocab: 101, DType: dt, Train: train}
				return GPT2(c)
			})
			add("llama"+suffix, func() (*ir.Model, error) {
				c := DefaultLlamaConfig()
				c.DType, c.Train = dt, train
				return Llama(c)
			})
			add("llama-gqa"+suffix, func() (*ir.Model, error) {
				c := LlamaConfig{Layers: 2, Hidden: 64, Heads: 8, KVHeads: 2, Intermediate: 160, Vocab: 97, Seq: 16, Batch: 2, DType: dt, Train: train}
				return Llama(c)
			})
		}
	}
	add("synthetic", func() (*ir.Model, error) {
		c := DefaultSyntheticConfig()
		c.Tensors = 20_000
		return Synthetic(c)
	})
	return cs
}

func TestGeneratorsCompileAndAreDeterministic(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			m1, err := tc.gen()
			if err != nil {
				t.Fatal(err)
			}
			g, err := ir.Compile(m1)
			if err != nil {
				t.Fatalf("ir.Compile: %v", err)
			}
			if g.OrderDerived {
				t.Error("execution order was derived; generators must give it")
			}
			m2, err := tc.gen()
			if err != nil {
				t.Fatal(err)
			}
			j1, _ := json.Marshal(m1)
			j2, _ := json.Marshal(m2)
			if !bytes.Equal(j1, j2) {
				t.Error("generating twice gives different JSON")
			}
			checkStructure(t, m1)
		})
	}
}

// checkStructure checks the conventions shared by all generators: phases in
// order, the execution order equal to the node listing, saved_for_backward
// exactly on activations a backward node reads, dtypes of statistics.
func checkStructure(t *testing.T, m *ir.Model) {
	t.Helper()
	byID := map[string]*ir.Tensor{}
	for i := range m.Tensors {
		byID[m.Tensors[i].ID] = &m.Tensors[i]
	}
	if len(m.ExecutionOrder) != len(m.Nodes) {
		t.Fatalf("execution order has %d nodes, model %d", len(m.ExecutionOrder), len(m.Nodes))
	}
	readByBackward := map[string]bool{}
	rank := map[ir.Phase]int{ir.Forward: 0, ir.Backward: 1, ir.Optimizer: 2}
	last := 0
	for i, n := range m.Nodes {
		if m.ExecutionOrder[i] != n.ID {
			t.Fatalf("execution_order[%d] = %s, node listing has %s", i, m.ExecutionOrder[i], n.ID)
		}
		r := rank[n.Phase.Norm()]
		if r < last {
			t.Fatalf("node %s (%s) runs after a later phase", n.ID, n.Phase)
		}
		last = r
		if n.Phase == ir.Backward {
			for _, x := range n.Inputs {
				readByBackward[x] = true
			}
		}
		for k, v := range n.Attrs {
			if v == 0 {
				t.Errorf("node %s: zero attribute %s not omitted", n.ID, k)
			}
		}
	}
	for _, tt := range m.Tensors {
		want := readByBackward[tt.ID] && tt.Role == ir.Activation
		if tt.SavedForBackward != want {
			t.Errorf("tensor %s (%s): saved_for_backward = %v, want %v", tt.ID, tt.Role, tt.SavedForBackward, want)
		}
		if (tt.Role == ir.Parameter || tt.Role == ir.OptimizerState) && tt.InPlaceWrite != (last == 2) {
			t.Errorf("tensor %s (%s): in_place_write = %v in a graph with optimizer = %v", tt.ID, tt.Role, tt.InPlaceWrite, last == 2)
		}
		for _, s := range []string{".mean", ".rstd", ".lse"} {
			if strings.HasSuffix(tt.ID, s) && tt.DType != ir.F32 {
				t.Errorf("tensor %s: dtype %s, want fp32", tt.ID, tt.DType)
			}
		}
		if tt.Role == ir.Input && tt.DType != ir.I32 && tt.ID != "x" && tt.ID != "x0" && tt.ID != "in" {
			t.Errorf("input %s: dtype %s, want int32", tt.ID, tt.DType)
		}
		if tt.Role == ir.OptimizerState && tt.DType != ir.F32 {
			t.Errorf("optimizer state %s: dtype %s, want fp32", tt.ID, tt.DType)
		}
	}
	var outputs int
	for _, tt := range m.Tensors {
		if tt.Role == ir.Output {
			outputs++
		}
	}
	if outputs == 0 {
		t.Error("no output tensor")
	}
	if last == 2 {
		if l, ok := byID["loss"]; !ok || l.Role != ir.Output || len(l.Shape) != 0 || l.DType != ir.F32 {
			t.Errorf("train graph: loss = %+v, want an fp32 scalar output", l)
		}
	}
}

func TestInferenceHasForwardOnly(t *testing.T) {
	for _, tc := range cases() {
		if !strings.Contains(tc.name, "inference") {
			continue
		}
		m, err := tc.gen()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range m.Nodes {
			if n.Phase.Norm() != ir.Forward {
				t.Fatalf("%s: node %s has phase %s", tc.name, n.ID, n.Phase)
			}
		}
		for _, tt := range m.Tensors {
			if tt.Role == ir.Gradient || tt.Role == ir.OptimizerState || tt.SavedForBackward {
				t.Fatalf("%s: tensor %s (%s, saved %v) in an inference graph", tc.name, tt.ID, tt.Role, tt.SavedForBackward)
			}
		}
	}
}

// TestOptimizerPerParameter checks that every train graph has exactly one
// adamw node per parameter and one gradient grad/<param> with the
// parameter's shape and dtype, and that mixed precision costs 16 bytes per
// parameter of weights, gradients and optimizer state.
func TestOptimizerPerParameter(t *testing.T) {
	for _, tc := range cases() {
		if !strings.Contains(tc.name, "train") {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.gen()
			if err != nil {
				t.Fatal(err)
			}
			byID := map[string]*ir.Tensor{}
			for i := range m.Tensors {
				byID[m.Tensors[i].ID] = &m.Tensors[i]
			}
			adam := map[string]int{}
			var params []string
			for _, n := range m.Nodes {
				if n.Op == ir.OpAdamW {
					if n.Phase != ir.Optimizer {
						t.Errorf("%s: phase %s", n.ID, n.Phase)
					}
					adam[n.Inputs[0]]++
					params = append(params, n.Inputs[0])
					for _, x := range n.Outputs {
						if !slices.Contains(n.Inputs, x) || !byID[x].InPlaceWrite {
							t.Errorf("%s: output %s not updated in place", n.ID, x)
						}
					}
				}
			}
			if !slices.IsSorted(params) {
				t.Error("adamw nodes are not in parameter id order")
			}
			var paramBytes, stateBytes, gradBytes, numel uint64
			for _, p := range m.Tensors {
				switch p.Role {
				case ir.OptimizerState:
					b, _ := p.Bytes()
					stateBytes += b
				case ir.Parameter:
					if adam[p.ID] != 1 {
						t.Errorf("parameter %s has %d adamw nodes", p.ID, adam[p.ID])
					}
					g := byID["grad/"+p.ID]
					if g == nil || g.Role != ir.Gradient || g.DType != p.DType || !slices.Equal(g.Shape, p.Shape) {
						t.Errorf("parameter %s %v %s: gradient %+v", p.ID, p.Shape, p.DType, g)
						continue
					}
					b, _ := p.Bytes()
					paramBytes += b
					gb, _ := g.Bytes()
					gradBytes += gb
					n, _ := ir.Numel(p.Shape)
					numel += n
				}
			}
			if len(adam) != len(params) {
				t.Errorf("%d adamw nodes for %d parameters", len(params), len(adam))
			}
			if numel != ParamCount(m) {
				t.Errorf("parameter elements %d, ParamCount %d", numel, ParamCount(m))
			}
			elem := byID[params[0]].DType.Size()
			wantState := 8 * numel
			if elem != 4 {
				wantState = 12 * numel
			}
			if paramBytes != elem*numel || gradBytes != elem*numel || stateBytes != wantState {
				t.Errorf("bytes: params %d, grads %d, state %d for %d elements of %d bytes", paramBytes, gradBytes, stateBytes, numel, elem)
			}
			if elem == 2 && (paramBytes+gradBytes+stateBytes) != 16*numel {
				t.Errorf("mixed precision: %d bytes for %d parameters, want 16 per parameter", paramBytes+gradBytes+stateBytes, numel)
			}
		})
	}
}

func TestParamCounts(t *testing.T) {
	g, err := GPT2(DefaultGPT2Config())
	if err != nil {
		t.Fatal(err)
	}
	if got := ParamCount(g); got != 124_439_808 {
		t.Errorf("GPT-2 small: %d parameters, want 124439808", got)
	}
	l, err := Llama(DefaultLlamaConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got := ParamCount(l); got != 6_738_415_616 {
		t.Errorf("Llama-2-7B: %d parameters, want 6738415616", got)
	}
	gc := DefaultLlamaConfig()
	gc.KVHeads = 8
	gqa, err := Llama(gc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ir.Compile(gqa); err != nil {
		t.Fatal(err)
	}
	// k and v shrink from H×H to H×(H/4) in each of 32 layers.
	want := ParamCount(l) - 32*2*(4096*4096-4096*1024)
	if got := ParamCount(gqa); got != want {
		t.Errorf("GQA Llama: %d parameters, want %d", got, want)
	}
	// Training does not change the parameter count.
	gt := DefaultGPT2Config()
	gt.Train = true
	g2, _ := GPT2(gt)
	if ParamCount(g2) != ParamCount(g) {
		t.Errorf("train GPT-2 has %d parameters, inference %d", ParamCount(g2), ParamCount(g))
	}
}

func tensorMap(m *ir.Model) map[string]ir.Tensor {
	r := make(map[string]ir.Tensor, len(m.Tensors))
	for _, t := range m.Tensors {
		r[t.ID] = t
	}
	return r
}

func wantShape(t *testing.T, ts map[string]ir.Tensor, id string, dt ir.DType, role ir.Role, shape ...uint64) ir.Tensor {
	t.Helper()
	x, ok := ts[id]
	if !ok {
		t.Errorf("tensor %s missing", id)
		return x
	}
	if !slices.Equal(x.Shape, shape) || x.DType != dt || x.Role != role {
		t.Errorf("tensor %s: %v %s %s, want %v %s %s", id, x.Shape, x.DType, x.Role, shape, dt, role)
	}
	return x
}

func TestGPT2Shapes(t *testing.T) {
	c := DefaultGPT2Config()
	c.Train = true
	c.DType = ir.BF16
	m, err := GPT2(c)
	if err != nil {
		t.Fatal(err)
	}
	ts := tensorMap(m)
	wantShape(t, ts, "tokens", ir.I32, ir.Input, 1, 1024)
	wantShape(t, ts, "labels", ir.I32, ir.Input, 1, 1024)
	wantShape(t, ts, "wte", ir.BF16, ir.Parameter, 50257, 768)
	wantShape(t, ts, "wpe", ir.BF16, ir.Parameter, 1024, 768)
	wantShape(t, ts, "h0.attn.c_attn.w", ir.BF16, ir.Parameter, 768, 2304)
	wantShape(t, ts, "h0.attn.c_attn.b", ir.BF16, ir.Parameter, 2304)
	wantShape(t, ts, "h0.attn.qkv", ir.BF16, ir.Activation, 1, 1024, 2304)
	wantShape(t, ts, "h11.mlp.fc", ir.BF16, ir.Activation, 1, 1024, 3072)
	wantShape(t, ts, "h0.attn.causal.lse", ir.F32, ir.Activation, 1, 12, 1024)
	wantShape(t, ts, "h0.ln_1.rstd", ir.F32, ir.Activation, 1, 1024)
	wantShape(t, ts, "logits", ir.BF16, ir.Activation, 1, 1024, 50257)
	wantShape(t, ts, "loss", ir.F32, ir.Output)
	wantShape(t, ts, "grad/h0.attn.qkv", ir.BF16, ir.Gradient, 1, 1024, 2304)
	wantShape(t, ts, "master/wte", ir.F32, ir.OptimizerState, 50257, 768)
	for k, name := range []string{"q", "k", "v"} {
		v := wantShape(t, ts, "h3.attn."+name, ir.BF16, ir.Activation, 1, 1024, 768)
		d := v.View
		if d == nil {
			t.Fatalf("h3.attn.%s is not a view", name)
		}
		if d.BaseTensor != "h3.attn.qkv" || d.ByteOffset != uint64(k)*768*2 || !slices.Equal(d.Strides, []uint64{1024 * 2304, 2304, 1}) {
			t.Errorf("view %s: %+v", name, *d)
		}
		if d.ByteOffset+d.ByteLength > 1024*2304*2 {
			t.Errorf("view %s exceeds qkv", name)
		}
		if !v.SavedForBackward {
			t.Errorf("view %s not saved for backward", name)
		}
	}
	if d := ts["h0.attn.v"].View; d.ByteOffset+d.ByteLength != 1024*2304*2 {
		t.Errorf("view v ends at %d, want the end of qkv", d.ByteOffset+d.ByteLength)
	}
	// The tied wte gets two contributions, summed.
	var acc *ir.Node
	for i, n := range m.Nodes {
		if slices.Contains(n.Outputs, "grad/wte") {
			acc = &m.Nodes[i]
		}
	}
	if acc == nil || acc.Op != ir.OpAdd || len(acc.Inputs) != 2 {
		t.Errorf("grad/wte is not the sum of two contributions: %+v", acc)
	}

	inf, err := GPT2(DefaultGPT2Config())
	if err != nil {
		t.Fatal(err)
	}
	its := tensorMap(inf)
	wantShape(t, its, "logits", ir.F32, ir.Output, 1, 1024, 50257)
	if _, ok := its["loss"]; ok {
		t.Error("inference graph has a loss")
	}
}

func TestLlamaShapes(t *testing.T) {
	c := DefaultLlamaConfig()
	c.KVHeads = 8
	c.Train = true
	m, err := Llama(c)
	if err != nil {
		t.Fatal(err)
	}
	ts := tensorMap(m)
	bf := ir.BF16
	wantShape(t, ts, "embed_tokens.w", bf, ir.Parameter, 32000, 4096)
	wantShape(t, ts, "l0.attn.q_proj.w", bf, ir.Parameter, 4096, 4096)
	wantShape(t, ts, "l0.attn.k_proj.w", bf, ir.Parameter, 4096, 1024)
	wantShape(t, ts, "l0.attn.v_proj.w", bf, ir.Parameter, 4096, 1024)
	wantShape(t, ts, "l0.attn.o_proj.w", bf, ir.Parameter, 4096, 4096)
	wantShape(t, ts, "l31.mlp.gate_proj.w", bf, ir.Parameter, 4096, 11008)
	wantShape(t, ts, "l31.mlp.down_proj.w", bf, ir.Parameter, 11008, 4096)
	wantShape(t, ts, "l0.attn_norm.w", bf, ir.Parameter, 4096)
	wantShape(t, ts, "lm_head.w", bf, ir.Parameter, 4096, 32000)
	wantShape(t, ts, "l0.attn.k_rot", bf, ir.Activation, 1, 2048, 1024)
	wantShape(t, ts, "l0.attn.causal.lse", ir.F32, ir.Activation, 1, 32, 2048)
	wantShape(t, ts, "l0.attn_norm.rstd", ir.F32, ir.Activation, 1, 2048)
	wantShape(t, ts, "logits", bf, ir.Activation, 1, 2048, 32000)
	wantShape(t, ts, "grad/l0.attn.k", bf, ir.Gradient, 1, 2048, 1024)
	for _, n := range m.Nodes {
		if n.Op == ir.OpCausalAttention && (n.Attrs["heads"] != 32 || n.Attrs["kv_heads"] != 8) {
			t.Errorf("%s: attrs %v", n.ID, n.Attrs)
		}
		if n.ID == "fwd/l0.attn.rope_k" && n.Attrs["heads"] != 8 {
			t.Errorf("%s: attrs %v", n.ID, n.Attrs)
		}
	}
	// No biases in Llama.
	for _, x := range m.Tensors {
		if x.Role == ir.Parameter && strings.HasSuffix(x.ID, ".b") {
			t.Errorf("unexpected bias %s", x.ID)
		}
	}
}

func TestChainAndMLPShapes(t *testing.T) {
	c := DefaultChainConfig()
	c.Train = true
	m, err := Chain(c)
	if err != nil {
		t.Fatal(err)
	}
	ts := tensorMap(m)
	wantShape(t, ts, "x0", ir.F32, ir.Input, 32, 1024)
	wantShape(t, ts, "layer7.w", ir.F32, ir.Parameter, 1024, 1024)
	wantShape(t, ts, "x8", ir.F32, ir.Activation, 32, 1024)
	wantShape(t, ts, "labels", ir.I32, ir.Input, 32)
	if _, ok := ts["grad/x0"]; ok {
		t.Error("the input x0 got a gradient")
	}
	if got := ParamCount(m); got != 8*1024*1024 {
		t.Errorf("chain: %d parameters", got)
	}

	mc := DefaultMLPConfig()
	mm, err := MLP(mc)
	if err != nil {
		t.Fatal(err)
	}
	ts = tensorMap(mm)
	wantShape(t, ts, "fc0.w", ir.F32, ir.Parameter, 784, 1024)
	wantShape(t, ts, "fc3.w", ir.F32, ir.Parameter, 1024, 10)
	wantShape(t, ts, "fc3.b", ir.F32, ir.Parameter, 10)
	wantShape(t, ts, "logits", ir.F32, ir.Output, 64, 10)
	if got, want := ParamCount(mm), uint64(784*1024+1024+2*(1024*1024+1024)+1024*10+10); got != want {
		t.Errorf("mlp: %d parameters, want %d", got, want)
	}

	rc := DefaultResidualConfig()
	rm, err := Residual(rc)
	if err != nil {
		t.Fatal(err)
	}
	wantShape(t, tensorMap(rm), "x8", ir.F32, ir.Output, 32, 1024)
}

func TestSynthetic(t *testing.T) {
	c := DefaultSyntheticConfig()
	c.Tensors = 100_000
	c.Seed = 7
	m, err := Synthetic(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ir.Compile(m); err != nil {
		t.Fatal(err)
	}
	if len(m.Tensors) != 100_000 {
		t.Errorf("%d tensors, want 100000", len(m.Tensors))
	}
	if len(m.Nodes) != 100_000-1-100 {
		t.Errorf("%d nodes", len(m.Nodes))
	}
	pos := map[string]int{}
	var params, outputs, paramReads int
	for i, x := range m.Tensors {
		pos[x.ID] = i
		b, _ := x.Bytes()
		if x.DType != ir.F32 || len(x.Shape) != 1 || b < 256 || b > 4<<20 {
			t.Fatalf("tensor %s: %v %s (%d bytes)", x.ID, x.Shape, x.DType, b)
		}
		switch x.Role {
		case ir.Parameter:
			params++
		case ir.Output:
			outputs++
		}
	}
	if params != 100 {
		t.Errorf("%d parameters, want 100", params)
	}
	if outputs < 250 || outputs > 800 {
		t.Errorf("%d outputs, want about 0.5%%", outputs)
	}
	for i, n := range m.Nodes {
		if len(n.Outputs) != 1 || len(n.Inputs) < 1 || len(n.Inputs) > 4 {
			t.Fatalf("node %s: %d inputs, %d outputs", n.ID, len(n.Inputs), len(n.Outputs))
		}
		self := pos[n.Outputs[0]]
		for _, x := range n.Inputs {
			if strings.HasPrefix(x, "p/") {
				paramReads++
				continue
			}
			if i > 0 && (pos[x] >= self || self-pos[x] > int(c.Window)) {
				t.Fatalf("node %s reads %s outside the window", n.ID, x)
			}
		}
	}
	if paramReads < 500 || paramReads > 1500 {
		t.Errorf("%d parameter reads in %d nodes, want about 1%%", paramReads, len(m.Nodes))
	}

	other := c
	other.Seed = 8
	m2, _ := Synthetic(other)
	j1, _ := json.Marshal(m)
	j2, _ := json.Marshal(m2)
	if bytes.Equal(j1, j2) {
		t.Error("seeds 7 and 8 give the same graph")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{"chain zero", ChainConfig{DType: ir.F32}.Validate(), []string{"models: chain: length 0 must be positive", "batch 0", "hidden 0"}},
		{"chain dtype", func() error { c := DefaultChainConfig(); c.DType = ir.I8; return c.Validate() }(), []string{`models: chain: dtype "int8" is not supported`}},
		{"chain layers", func() error { c := DefaultChainConfig(); c.Length = MaxLayers + 1; return c.Validate() }(), []string{"length 65537 exceeds the limit 65536"}},
		{"residual", ResidualConfig{Blocks: 1, Batch: 1, Hidden: 0, DType: ir.BF16}.Validate(), []string{"models: residual: hidden 0 must be positive"}},
		{"mlp", MLPConfig{Layers: 2, Batch: 1, In: 3, Hidden: 4, DType: ""}.Validate(), []string{"models: mlp: classes 0 must be positive", `dtype "" is not supported`}},
		{"gpt2 heads", func() error { c := DefaultGPT2Config(); c.Hidden = 770; return c.Validate() }(), []string{"models: gpt2: hidden 770 is not divisible by heads 12"}},
		{"gpt2 many", func() error {
			c := DefaultGPT2Config()
			c.Seq, c.Context, c.Heads, c.Vocab = 2048, 1024, 0, 0
			return c.Validate()
		}(), []string{"seq 2048 exceeds context 1024", "heads 0 must be positive", "vocab 0 must be positive"}},
		{"gpt2 overflow", func() error { c := DefaultGPT2Config(); c.Batch = 1 << 60; return c.Validate() }(), []string{"models: gpt2: tensor size batch 1152921504606846976 × seq 1024"}},
		{"llama gqa", func() error { c := DefaultLlamaConfig(); c.KVHeads = 5; return c.Validate() }(), []string{"models: llama: heads 32 is not divisible by kv_heads 5"}},
		{"llama kv > heads", func() error { c := DefaultLlamaConfig(); c.KVHeads = 64; return c.Validate() }(), []string{"kv_heads 64 exceeds heads 32"}},
		{"llama odd head dim", func() error {
			c := DefaultLlamaConfig()
			c.Hidden, c.Heads, c.KVHeads = 96, 32, 32
			return c.Validate()
		}(), []string{"hidden/heads = 96/32 = 3 is odd"}},
		{"llama hidden", func() error { c := DefaultLlamaConfig(); c.Hidden = 4100; c.Intermediate = 0; return c.Validate() }(), []string{"hidden 4100 is not divisible by heads 32", "intermediate 0 must be positive"}},
		{"synthetic", SyntheticConfig{Tensors: 2, Train: true}.Validate(), []string{"models: synthetic: tensors 2 is below the minimum 3", "window 0 must be positive", "train true is not supported"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("Validate accepted a bad config")
			}
			for _, w := range tc.want {
				if !strings.Contains(tc.err.Error(), w) {
					t.Errorf("error %q does not mention %q", tc.err, w)
				}
			}
		})
	}
	// Defaults are valid, and the generators reject what Validate rejects.
	for _, err := range []error{
		DefaultChainConfig().Validate(), DefaultResidualConfig().Validate(), DefaultMLPConfig().Validate(),
		DefaultGPT2Config().Validate(), DefaultLlamaConfig().Validate(), DefaultSyntheticConfig().Validate(),
	} {
		if err != nil {
			t.Errorf("default config invalid: %v", err)
		}
	}
	bad := DefaultGPT2Config()
	bad.Heads = 7
	if m, err := GPT2(bad); err == nil || m != nil {
		t.Error("GPT2 accepted an invalid config")
	}
	if m, err := Synthetic(SyntheticConfig{Tensors: 10, Window: 4, Train: true}); err == nil || m != nil {
		t.Error("Synthetic accepted train")
	}
}

// TestDefaultCounts logs the size of the default training graphs.
func TestDefaultCounts(t *testing.T) {
	gc := DefaultGPT2Config()
	gc.Train = true
	g, err := GPT2(gc)
	if err != nil {
		t.Fatal(err)
	}
	lc := DefaultLlamaConfig()
	lc.Train = true
	l, err := Llama(lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPT-2 small train: %d tensors, %d nodes", len(g.Tensors), len(g.Nodes))
	t.Logf("Llama-2-7B train: %d tensors, %d nodes", len(l.Tensors), len(l.Nodes))
}
