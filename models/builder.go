package models

import (
	"fmt"
	"slices"

	"github.com/tmmu/tmmu/ir"
)

// builder assembles a model op by op. Forward helpers add nodes in program
// order and, for a training graph, push a backward closure on a tape;
// backward replays the tape in reverse as autograd would, and optimizer adds
// one adamw node per parameter. Tensors and nodes are listed, and nodes
// executed, in creation order.
//
// Inconsistencies (a duplicate id, mismatched shapes) are bugs in a
// generator, not in a config, and panic.
type builder struct {
	m     *ir.Model
	dt    ir.DType
	train bool
	phase ir.Phase

	index  map[string]int      // tensor id → index in m.Tensors
	nodes  map[string]struct{} // node ids
	params []string            // parameter ids in creation order

	needs map[string]bool   // the tensor needs a gradient
	uses  map[string]int    // gradient contributions the tensor will receive
	got   map[string]int    // contributions received so far
	grad  map[string]string // the tensor's gradient (partial sum until got == uses)
	tape  []func()
}

func newBuilder(name string, dt ir.DType, train bool) *builder {
	return &builder{
		m:     &ir.Model{Name: name},
		dt:    dt,
		train: train,
		phase: ir.Forward,
		index: map[string]int{},
		nodes: map[string]struct{}{},
		needs: map[string]bool{},
		uses:  map[string]int{},
		got:   map[string]int{},
		grad:  map[string]string{},
	}
}

// tensor adds t and returns its id.
func (b *builder) tensor(t ir.Tensor) string {
	if _, dup := b.index[t.ID]; dup {
		panic(fmt.Sprintf("models: duplicate tensor id %q", t.ID))
	}
	if t.Shape == nil {
		t.Shape = []uint64{}
	}
	b.index[t.ID] = len(b.m.Tensors)
	b.m.Tensors = append(b.m.Tensors, t)
	return t.ID
}

func (b *builder) t(id string) *ir.Tensor {
	i, ok := b.index[id]
	if !ok {
		panic(fmt.Sprintf("models: unknown tensor %q", id))
	}
	return &b.m.Tensors[i]
}

func (b *builder) shape(id string) []uint64 { return b.t(id).Shape }

// param adds a parameter of the config dtype; in a training graph it needs
// a gradient and gets an optimizer step.
func (b *builder) param(id string, shape ...uint64) string {
	b.tensor(ir.Tensor{ID: id, Shape: shape, DType: b.dt, Role: ir.Parameter})
	b.params = append(b.params, id)
	b.needs[id] = b.train
	return id
}

func (b *builder) input(id string, dt ir.DType, shape ...uint64) string {
	return b.tensor(ir.Tensor{ID: id, Shape: shape, DType: dt, Role: ir.Input})
}

func (b *builder) act(id string, dt ir.DType, shape ...uint64) string {
	return b.tensor(ir.Tensor{ID: id, Shape: shape, DType: dt, Role: ir.Activation})
}

// setRole changes the role of an existing tensor (an inference graph's
// logits become its output).
func (b *builder) setRole(id string, r ir.Role) { b.t(id).Role = r }

// node adds a node in the current phase and appends it to the execution
// order. A backward node marks the forward activations it reads as saved for
// backward.
func (b *builder) node(id string, op ir.Op, ins, outs []string, attrs map[string]int64) {
	if _, dup := b.nodes[id]; dup {
		panic(fmt.Sprintf("models: duplicate node id %q", id))
	}
	b.nodes[id] = struct{}{}
	for _, x := range ins {
		if t := b.t(x); b.phase == ir.Backward && t.Role == ir.Activation {
			t.SavedForBackward = true
		}
	}
	for _, x := range outs {
		b.t(x)
	}
	if len(attrs) == 0 {
		attrs = nil
	}
	b.m.Nodes = append(b.m.Nodes, ir.Node{
		ID: id, Op: op, Inputs: slices.Clone(ins), Outputs: slices.Clone(outs),
		Phase: b.phase, Attrs: attrs,
	})
	b.m.ExecutionOrder = append(b.m.ExecutionOrder, id)
}

// record registers the backward of a forward op whose differentiable inputs
// are ins and whose differentiable output is y. When any input needs a
// gradient, y needs one too, and back(dy) runs during backward once y's
// gradient dy is complete.
func (b *builder) record(ins []string, y string, back func(dy string)) {
	if !b.train {
		return
	}
	needed := false
	for _, x := range ins {
		if b.needs[x] {
			needed = true
			b.uses[x]++
		}
	}
	if !needed {
		return
	}
	b.needs[y] = true
	b.tape = append(b.tape, func() {
		dy := b.grad[y]
		if dy == "" || b.got[y] != b.uses[y] {
			panic(fmt.Sprintf("models: gradient of %q incomplete: %d of %d contributions", y, b.got[y], b.uses[y]))
		}
		back(dy)
	})
}

// newGrad adds a gradient tensor shaped like x for the next contribution to
// x's gradient: grad/<x> when it is the only one, grad/<x>.part<k> when
// several are summed.
func (b *builder) newGrad(x string) string {
	id := "grad/" + x
	if b.uses[x] > 1 {
		id = fmt.Sprintf("grad/%s.part%d", x, b.got[x])
	}
	return b.gradTensor(id, x)
}

func (b *builder) gradTensor(id, like string) string {
	t := b.t(like)
	return b.tensor(ir.Tensor{ID: id, Shape: slices.Clone(t.Shape), DType: t.DType, Role: ir.Gradient})
}

// contribute adds g to x's gradient. The first contribution becomes the
// gradient as is; later ones are summed out of place, the last sum being
// grad/<x>.
func (b *builder) contribute(x, g string) {
	b.got[x]++
	prev := b.grad[x]
	if prev == "" {
		b.grad[x] = g
		return
	}
	k := b.got[x] - 1
	id := "grad/" + x
	if b.got[x] < b.uses[x] {
		id = fmt.Sprintf("grad/%s.sum%d", x, k)
	}
	b.gradTensor(id, x)
	b.node(fmt.Sprintf("bwd/%s.acc%d", x, k), ir.OpAdd, []string{prev, g}, []string{id}, nil)
	b.grad[x] = id
}

// backward seeds the gradient of loss with ones and replays the tape in
// reverse.
func (b *builder) backward(loss string) {
	b.phase = ir.Backward
	seed := b.tensor(ir.Tensor{ID: "grad/" + loss, Shape: []uint64{}, DType: ir.F32, Role: ir.Gradient})
	b.node("bwd/"+loss+".seed", ir.OpOnes, nil, []string{seed}, nil)
	b.grad[loss] = seed
	b.got[loss], b.uses[loss] = 1, 1
	for i := len(b.tape) - 1; i >= 0; i-- {
		b.tape[i]()
	}
	b.tape = nil
}

// optimizer adds one in-place adamw node per parameter, in parameter id
// order, with fp32 m and v and, for a bf16 or fp16 model, an fp32 master
// copy of the weight.
func (b *builder) optimizer() {
	b.phase = ir.Optimizer
	state := func(id string, like *ir.Tensor) string {
		return b.tensor(ir.Tensor{ID: id, Shape: slices.Clone(like.Shape), DType: ir.F32, Role: ir.OptimizerState, InPlaceWrite: true})
	}
	for _, p := range slices.Sorted(slices.Values(b.params)) {
		g := "grad/" + p
		if b.grad[p] != g || b.got[p] != b.uses[p] {
			panic(fmt.Sprintf("models: parameter %q has gradient %q (%d of %d contributions), want %q", p, b.grad[p], b.got[p], b.uses[p], g))
		}
		pt := b.t(p)
		pt.InPlaceWrite = true
		ins, outs := []string{p, g}, []string{p}
		if b.dt != ir.F32 {
			master := state("master/"+p, pt)
			ins, outs = append(ins, master), append(outs, master)
		}
		m, v := state("adam.m/"+p, pt), state("adam.v/"+p, pt)
		ins, outs = append(ins, m, v), append(outs, m, v)
		b.node("opt/"+p, ir.OpAdamW, ins, outs, nil)
	}
}

// finish returns the model: for a training graph, loss is differentiated
// and the optimizer appended; for inference, out becomes the graph output.
func (b *builder) finish(out string) *ir.Model {
	if b.train {
		b.backward(out)
		b.optimizer()
	} else {
		b.setRole(out, ir.Output)
	}
	return b.m
}

func flag(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// attrs builds an attribute map, leaving out zero values.
func attrs(kv ...any) map[string]int64 {
	m := map[string]int64{}
	for i := 0; i < len(kv); i += 2 {
		var v int64
		switch x := kv[i+1].(type) {
		case int64:
			v = x
		case uint64:
			v = int64(x)
		case int:
			v = int64(x)
		default:
			panic(fmt.Sprintf("models: attribute %v has type %T", kv[i], x))
		}
		if v != 0 {
			m[kv[i].(string)] = v
		}
	}
	return m
}

// ---- forward ops -----------------------------------------------------------

// matmul adds out = a·b (a·bᵀ with transB). b is a 2-D parameter.
func (b *builder) matmul(name, a, w, out string, transB bool) string {
	as, ws := b.shape(a), b.shape(w)
	if len(ws) != 2 || len(as) == 0 {
		panic(fmt.Sprintf("models: %s: matmul of %v and %v", name, as, ws))
	}
	k, n := ws[0], ws[1]
	if transB {
		k, n = n, k
	}
	if as[len(as)-1] != k {
		panic(fmt.Sprintf("models: %s: matmul of %v and %v (transpose_b %v)", name, as, ws, transB))
	}
	shape := append(slices.Clone(as[:len(as)-1]), n)
	b.act(out, b.dt, shape...)
	b.node("fwd/"+name, ir.OpMatmul, []string{a, w}, []string{out}, attrs("transpose_b", flag(transB)))
	b.record([]string{a, w}, out, func(dy string) {
		if b.needs[a] {
			da := b.newGrad(a)
			// a·b: da = dy·bᵀ. a·bᵀ: da = dy·b.
			b.node("bwd/"+name+".dx", ir.OpMatmul, []string{dy, w}, []string{da}, attrs("transpose_b", flag(!transB)))
			b.contribute(a, da)
		}
		if b.needs[w] {
			dw := b.newGrad(w)
			// a·b: db = aᵀ·dy. a·bᵀ: db = dyᵀ·a.
			ins := []string{a, dy}
			if transB {
				ins = []string{dy, a}
			}
			b.node("bwd/"+name+".dw", ir.OpMatmul, ins, []string{dw}, attrs("transpose_a", 1))
			b.contribute(w, dw)
		}
	})
	return out
}

// linear adds out = x·w (+ bias) with w [in,out] named <name>.w and bias
// [out] named <name>.b. With a bias the product is <name>.mm.
func (b *builder) linear(name, x, out string, in, n uint64, bias bool) string {
	w := b.param(name+".w", in, n)
	if !bias {
		return b.matmul(name, x, w, out, false)
	}
	mm := b.matmul(name, x, w, name+".mm", false)
	bb := b.param(name+".b", n)
	return b.add(name+".bias", "bwd/"+name+".db", mm, bb, out)
}

// add adds out = x + y, broadcasting y over x's leading dimensions when it
// has fewer. Gradients: x's is dy; y's is dy, or reduce_sum(dy) (node
// reduceID) when broadcast.
func (b *builder) add(name, reduceID, x, y, out string) string {
	xs, ys := b.shape(x), b.shape(y)
	if len(ys) > len(xs) || !slices.Equal(xs[len(xs)-len(ys):], ys) {
		panic(fmt.Sprintf("models: %s: add of %v and %v", name, xs, ys))
	}
	b.act(out, b.dt, xs...)
	b.node("fwd/"+name, ir.OpAdd, []string{x, y}, []string{out}, nil)
	b.record([]string{x, y}, out, func(dy string) {
		if b.needs[x] {
			b.contribute(x, dy)
		}
		if b.needs[y] {
			if len(ys) == len(xs) {
				b.contribute(y, dy)
				return
			}
			dyy := b.newGrad(y)
			b.node(reduceID, ir.OpReduceSum, []string{dy}, []string{dyy}, nil)
			b.contribute(y, dyy)
		}
	})
	return out
}

// residual adds out = x + y for equal shapes.
func (b *builder) residual(name, x, y, out string) string {
	return b.add(name, "", x, y, out)
}

// mul adds out = x ⊙ y.
func (b *builder) mul(name, x, y, out string) string {
	if !slices.Equal(b.shape(x), b.shape(y)) {
		panic(fmt.Sprintf("models: %s: mul of %v and %v", name, b.shape(x), b.shape(y)))
	}
	b.act(out, b.dt, b.shape(x)...)
	b.node("fwd/"+name, ir.OpMul, []string{x, y}, []string{out}, nil)
	b.record([]string{x, y}, out, func(dy string) {
		if b.needs[x] {
			dx := b.newGrad(x)
			b.node("bwd/"+name+".da", ir.OpMul, []string{dy, y}, []string{dx}, nil)
			b.contribute(x, dx)
		}
		if b.needs[y] {
			dyy := b.newGrad(y)
			b.node("bwd/"+name+".db", ir.OpMul, []string{dy, x}, []string{dyy}, nil)
			b.contribute(y, dyy)
		}
	})
	return out
}

// unary adds out = op(x) (gelu, silu) with backward op_backward(x, dy).
func (b *builder) unary(name string, op ir.Op, x, out string) string {
	b.act(out, b.dt, b.shape(x)...)
	b.node("fwd/"+name, op, []string{x}, []string{out}, nil)
	b.record([]string{x}, out, func(dy string) {
		dx := b.newGrad(x)
		b.node("bwd/"+name, op+"_backward", []string{x, dy}, []string{dx}, nil)
		b.contribute(x, dx)
	})
	return out
}

// layernorm adds <name>.y, <name>.mean and <name>.rstd = layernorm(x) with
// parameters <name>.w and <name>.b over the last dimension.
func (b *builder) layernorm(name, x string) string {
	xs := b.shape(x)
	h, lead := xs[len(xs)-1], xs[:len(xs)-1]
	w, bias := b.param(name+".w", h), b.param(name+".b", h)
	y := b.act(name+".y", b.dt, xs...)
	mean := b.act(name+".mean", ir.F32, lead...)
	rstd := b.act(name+".rstd", ir.F32, lead...)
	b.node("fwd/"+name, ir.OpLayerNorm, []string{x, w, bias}, []string{y, mean, rstd}, nil)
	b.record([]string{x, w, bias}, y, func(dy string) {
		var outs []string
		if b.needs[x] {
			outs = append(outs, b.newGrad(x))
		}
		dw, db := b.newGrad(w), b.newGrad(bias)
		b.node("bwd/"+name, ir.OpLayerNormBackward, []string{x, w, mean, rstd, dy}, append(outs, dw, db), nil)
		if b.needs[x] {
			b.contribute(x, outs[0])
		}
		b.contribute(w, dw)
		b.contribute(bias, db)
	})
	return y
}

// rmsnorm adds <name>.y and <name>.rstd = rmsnorm(x) with parameter
// <name>.w over the last dimension.
func (b *builder) rmsnorm(name, x string) string {
	xs := b.shape(x)
	h, lead := xs[len(xs)-1], xs[:len(xs)-1]
	w := b.param(name+".w", h)
	y := b.act(name+".y", b.dt, xs...)
	rstd := b.act(name+".rstd", ir.F32, lead...)
	b.node("fwd/"+name, ir.OpRMSNorm, []string{x, w}, []string{y, rstd}, nil)
	b.record([]string{x, w}, y, func(dy string) {
		var outs []string
		if b.needs[x] {
			outs = append(outs, b.newGrad(x))
		}
		dw := b.newGrad(w)
		b.node("bwd/"+name, ir.OpRMSNormBackward, []string{x, w, rstd, dy}, append(outs, dw), nil)
		if b.needs[x] {
			b.contribute(x, outs[0])
		}
		b.contribute(w, dw)
	})
	return y
}

// rope adds out = rope(x) for x [B,S,heads*D].
func (b *builder) rope(name, x, out string, heads uint64) string {
	b.act(out, b.dt, b.shape(x)...)
	a := attrs("heads", heads)
	b.node("fwd/"+name, ir.OpRope, []string{x}, []string{out}, a)
	b.record([]string{x}, out, func(dy string) {
		dx := b.newGrad(x)
		b.node("bwd/"+name, ir.OpRopeBackward, []string{dy}, []string{dx}, a)
		b.contribute(x, dx)
	})
	return out
}

// attention adds <name>.y [B,S,heads*D] and <name>.lse [B,heads,S] =
// causal_attention(q, k, v). When fused is set, q, k and v are views of it
// and the backward writes one gradient for fused instead of three.
func (b *builder) attention(name, q, k, v, fused string, heads, kvHeads uint64) string {
	qs := b.shape(q)
	y := b.act(name+".y", b.dt, qs...)
	lse := b.act(name+".lse", ir.F32, qs[0], heads, qs[1])
	a := attrs("heads", heads, "kv_heads", kvHeads)
	b.node("fwd/"+name, ir.OpCausalAttention, []string{q, k, v}, []string{y, lse}, a)
	diff := []string{q, k, v}
	if fused != "" {
		diff = []string{fused}
	}
	b.record(diff, y, func(dy string) {
		outs := make([]string, len(diff))
		for i, x := range diff {
			outs[i] = b.newGrad(x)
		}
		b.node("bwd/"+name, ir.OpCausalAttentionBackward, []string{q, k, v, y, lse, dy}, outs, a)
		for i, x := range diff {
			b.contribute(x, outs[i])
		}
	})
	return y
}

// embedding adds out = table[ids] of shape ids.shape + [H].
func (b *builder) embedding(name, table, ids, out string) string {
	ts := b.shape(table)
	b.act(out, b.dt, append(slices.Clone(b.shape(ids)), ts[1])...)
	b.node("fwd/"+name, ir.OpEmbedding, []string{table, ids}, []string{out}, nil)
	b.record([]string{table}, out, func(dy string) {
		dt := b.newGrad(table)
		b.node("bwd/"+name, ir.OpEmbeddingBackward, []string{ids, dy}, []string{dt}, attrs("vocab", ts[0]))
		b.contribute(table, dt)
	})
	return out
}

// crossEntropy adds the fp32 scalar out = cross_entropy(logits, labels).
func (b *builder) crossEntropy(name, logits, labels, out string) string {
	b.tensor(ir.Tensor{ID: out, Shape: []uint64{}, DType: ir.F32, Role: ir.Output})
	b.node("fwd/"+name, ir.OpCrossEntropy, []string{logits, labels}, []string{out}, nil)
	b.record([]string{logits}, out, func(dy string) {
		dl := b.newGrad(logits)
		b.node("bwd/"+name, ir.OpCrossEntropyBackward, []string{logits, labels, dy}, []string{dl}, nil)
		b.contribute(logits, dl)
	})
	return out
}
