package shard

import (
	"fmt"
	"path"
	"slices"

	"github.com/tmmu/tmmu/ir"
)

// Tensor-parallel states: a tensor is replicated (rep) or split along one
// dimension (its index, ≥ 0). "any" in a requirement accepts either.
const (
	rep      = -1
	anyState = -2
)

// tpPass rewrites a graph for one tensor-parallel rank. It walks the nodes
// in execution order and gives every tensor a state from the operator that
// defines it (persistent tensors take theirs from the rules): a matmul
// with a column-split weight yields an activation split along its last
// dimension, one with a row-split weight a partial sum that an all-reduce
// (or, with sequence parallelism, a reduce-scatter) completes, and so on
// through the op vocabulary of package models. An input in a state its
// operator cannot use is all-gathered first; an operator it does not know
// gets every input whole and yields whole outputs. At the end every split
// tensor takes its local shape.
type tpPass struct {
	g     *graph
	spec  *Spec
	deg   uint64
	views map[string][]string

	state    map[string]int
	hint     map[string]int
	gathered map[string]string // tensor|phase|stages → gathered copy
	out      []*ir.Node
	probs    *problems
}

func tensorParallel(g *graph, spec *Spec, probs *problems) {
	p := &tpPass{g: g, spec: spec, deg: spec.TensorParallel.Degree, views: g.viewsOf(),
		state: map[string]int{}, hint: map[string]int{}, gathered: map[string]string{}, probs: probs}
	p.initial()
	if len(probs.msgs) > 0 || p.deg == 1 {
		return
	}
	p.hints()
	for _, n := range g.nodes {
		p.node(n)
	}
	g.nodes = p.out
	p.localize()
}

// initial gives persistent tensors their rule or override state and
// checks that every rule and override names something.
func (p *tpPass) initial() {
	over := map[string]Override{}
	for _, o := range p.spec.Overrides {
		over[o.Tensor] = o
		t := p.g.tensors[o.Tensor]
		switch {
		case t == nil:
			p.probs.add("override names tensor %q, which the IR does not have", o.Tensor)
		case !t.Role.Persistent():
			p.probs.add("override names %s tensor %q; overrides apply to parameters, optimizer state and constants (the other tensors' sharding follows from the operators)", t.Role, o.Tensor)
		}
	}
	matched := make([]bool, len(p.spec.TensorParallel.Rules))
	for _, id := range sortedIDs(p.g.tensors) {
		t := p.g.tensors[id]
		split, ruled := Split(""), false
		for i, r := range p.spec.TensorParallel.Rules {
			if ok, _ := path.Match(r.Match, id); ok {
				matched[i] = true
				if !t.Role.Persistent() {
					p.probs.add("tensor_parallel.rules[%d] (match %q) matches %s tensor %q; rules split parameters, optimizer state and constants", i, r.Match, t.Role, id)
				}
				split, ruled = r.Split, true
				break
			}
		}
		if o, ok := over[id]; ok && o.TensorParallel != "" {
			split, ruled = o.TensorParallel, true
		}
		if !t.Role.Persistent() && t.Role != ir.Input {
			continue
		}
		if t.Role.Persistent() && !ruled && t.Role == ir.OptimizerState {
			continue // takes its parameter's state at the optimizer node
		}
		p.state[id] = p.ruleState(t, split)
	}
	for i, ok := range matched {
		if !ok {
			r := p.spec.TensorParallel.Rules[i]
			p.probs.add("tensor_parallel.rules[%d] (match %q) matches no tensor of the IR", i, r.Match)
		}
	}
}

func (p *tpPass) ruleState(t *ir.Tensor, s Split) int {
	if s == "" || s == Replicate || p.deg == 1 {
		return rep
	}
	if len(t.Shape) == 0 {
		p.probs.add("tensor %q is a scalar and cannot be split %s", t.ID, s)
		return rep
	}
	if t.View != nil {
		p.probs.add("tensor %q is a view; split its base %q instead", t.ID, t.View.BaseTensor)
		return rep
	}
	if s == Row {
		return 0
	}
	return len(t.Shape) - 1
}

// hints records, for gradients, the state of the parameter they update, so
// that an operator free to choose (embedding_backward) produces the
// gradient in the parameter's state.
func (p *tpPass) hints() {
	for i := len(p.g.nodes) - 1; i >= 0; i-- {
		n := p.g.nodes[i]
		if param, ok := p.g.updateOf(n); ok {
			for _, in := range n.Inputs {
				if t := p.g.tensors[in]; t.Role == ir.Gradient {
					p.hint[in] = p.state[param]
				}
			}
			continue
		}
		if n.Op == ir.OpAdd && len(n.Outputs) == 1 {
			if h, ok := p.hint[n.Outputs[0]]; ok {
				for _, in := range n.Inputs {
					if _, set := p.hint[in]; !set && p.g.tensors[in].Role == ir.Gradient {
						p.hint[in] = h
					}
				}
			}
		}
	}
}

func (p *tpPass) hinted(id string, s int) bool {
	h, ok := p.hint[id]
	return ok && h == s
}

// st returns a tensor's state; a view's follows its base.
func (p *tpPass) st(id string) int {
	t := p.g.tensors[id]
	if t.View != nil {
		b := p.st(t.View.BaseTensor)
		if b == rep {
			return rep
		}
		return len(t.Shape) - 1 // localize checks that the view splits this way
	}
	if s, ok := p.state[id]; ok {
		return s
	}
	return rep
}

func (p *tpPass) rank(id string) int { return len(p.g.tensors[id].Shape) }

func (p *tpPass) last(id string) int { return p.rank(id) - 1 }

// rule is what an operator needs and yields: need[i] is the state input i
// must be in (anyState: as it is), out[j] output j's state, partial[j]
// whether output j holds a partial sum over the group.
type rule struct {
	need    []int
	out     []int
	partial []bool
	heads   bool // divide the heads and kv_heads attributes
	vocab   bool // divide the vocab attribute
}

func (p *tpPass) node(n *ir.Node) {
	r := p.rule(n)
	for i, in := range n.Inputs {
		want, have := r.need[i], p.st(in)
		if want == anyState || want == have || (want >= 0 && have == rep) {
			continue
		}
		if slices.Contains(n.Outputs, in) {
			p.probs.add("node %q updates %q in place but needs it in another tensor-parallel split than it has; replicate it (an override) or the tensors it is computed from", n.ID, in)
			continue
		}
		replaceInput(n, i, p.gather(n, in, have))
	}
	p.out = append(p.out, n)
	if r.heads {
		for _, a := range []string{"heads", "kv_heads"} {
			if h, ok := n.Attrs[a]; ok {
				if h <= 0 || uint64(h)%p.deg != 0 {
					p.probs.add("node %q: %s %d is not divisible by tensor_parallel degree %d", n.ID, a, h, p.deg)
					continue
				}
				n.Attrs[a] = h / int64(p.deg)
			}
		}
	}
	if v, ok := n.Attrs["vocab"]; ok && r.vocab && v > 0 {
		if d, ok := splitDim(uint64(v), p.deg, p.spec.Padding); ok {
			n.Attrs["vocab"] = int64(d)
		}
	}
	for j, o := range n.Outputs {
		if slices.Contains(n.Inputs, o) || p.g.tensors[o].View != nil {
			continue
		}
		if r.partial[j] {
			p.reduce(n, j)
			continue
		}
		p.state[o] = r.out[j]
	}
}

// gather inserts an all-gather of id (split along dim) before n and
// returns the whole copy. Copies are shared by later readers in the same
// phase on the same stages.
func (p *tpPass) gather(n *ir.Node, id string, dim int) string {
	key := id + "|" + string(phaseOf(n)) + "|" + stagesKey(p.g.stages[n.ID])
	if c, ok := p.gathered[key]; ok {
		return c
	}
	src := p.g.tensors[id]
	c := p.g.derived(freshID(id+"@tp.gather", p.g.hasTensor), src)
	p.state[c.ID] = rep
	p.out = append(p.out, p.g.collective(ir.OpTPAllGather, phaseOf(n), []string{id}, []string{c.ID},
		map[string]int64{"dim": int64(dim), "group_size": int64(p.deg)}, p.g.stages[n.ID]))
	p.gathered[key] = c.ID
	return c.ID
}

// reduce completes output j of n, a partial sum: an all-reduce (in place
// when the tensor owns its storage alone) or, under sequence parallelism
// for a tensor with a sequence dimension, a reduce-scatter along it.
func (p *tpPass) reduce(n *ir.Node, j int) {
	id := n.Outputs[j]
	t := p.g.tensors[id]
	op, final, attrs := ir.OpTPAllReduce, rep, map[string]int64{"group_size": int64(p.deg)}
	if p.spec.SequenceParallel && len(t.Shape) >= 3 {
		op, final = ir.OpTPReduceScatter, 1
		attrs["dim"] = 1
	}
	if op == ir.OpTPAllReduce && canUpdateInPlace(t, p.views) {
		t.InPlaceWrite = true
		p.state[id] = rep
		p.out = append(p.out, p.g.collective(op, phaseOf(n), []string{id}, []string{id}, attrs, p.g.stages[n.ID]))
		return
	}
	part := p.g.derived(freshID(id+"@tp.partial", p.g.hasTensor), t)
	p.state[part.ID] = rep
	n.Outputs[j] = part.ID
	p.state[id] = final
	p.out = append(p.out, p.g.collective(op, phaseOf(n), []string{part.ID}, []string{id}, attrs, p.g.stages[n.ID]))
}

func fill(k, v int) []int {
	s := make([]int, k)
	for i := range s {
		s[i] = v
	}
	return s
}

// rule returns operator n's requirements and results given the current
// states of its inputs: by the op's entry in tpRules, everything whole
// for an op without one.
func (p *tpPass) rule(n *ir.Node) rule {
	ni, no := len(n.Inputs), len(n.Outputs)
	r := rule{need: fill(ni, anyState), out: fill(no, rep), partial: make([]bool, no)}
	if _, ok := p.g.updateOf(n); ok {
		return p.update(n, r)
	}
	if f := tpRules[n.Op]; f != nil {
		return f(p, n, r, ni, no)
	}
	return whole(n, r)
}

// tpRule gives the requirements and results of a node of one kind of op,
// from r as rule starts it (any input state, whole outputs); ni and no
// count the node's inputs and outputs.
type tpRule func(p *tpPass, n *ir.Node, r rule, ni, no int) rule

// tpRules are the rules by op.
var tpRules = map[ir.Op]tpRule{
	ir.OpMatmul:                  tpMatmul,
	ir.OpAdd:                     tpAdd,
	ir.OpMul:                     tpAdd,
	ir.OpGeluBackward:            tpAdd,
	ir.OpSiluBackward:            tpAdd,
	ir.OpGelu:                    tpGelu,
	ir.OpSilu:                    tpGelu,
	ir.OpRope:                    tpGelu,
	ir.OpRopeBackward:            tpGelu,
	ir.OpLayerNorm:               tpLayerNorm,
	ir.OpRMSNorm:                 tpLayerNorm,
	ir.OpLayerNormBackward:       tpLayerNormBackward,
	ir.OpRMSNormBackward:         tpLayerNormBackward,
	ir.OpCausalAttention:         tpCausalAttention,
	ir.OpCausalAttentionBackward: tpCausalAttention,
	ir.OpEmbedding:               tpEmbedding,
	ir.OpEmbeddingBackward:       tpEmbeddingBackward,
	ir.OpCrossEntropy:            tpCrossEntropy,
	ir.OpCrossEntropyBackward:    tpCrossEntropyBackward,
	ir.OpReduceSum:               tpReduceSum,
	ir.OpOnes:                    tpOnes,
}

// whole is the rule of an unknown or unsupported op: every input and
// output whole, but inputs updated in place (checked in update).
func whole(n *ir.Node, r rule) rule {
	r.need = fill(len(n.Inputs), rep)
	for i, in := range n.Inputs {
		if slices.Contains(n.Outputs, in) {
			r.need[i] = anyState
		}
	}
	r.out = fill(len(n.Outputs), rep)
	return r
}

// in is the state of n's input i.
func (p *tpPass) in(n *ir.Node, i int) int { return p.st(n.Inputs[i]) }

// lead reports whether state s splits one of tensor id's leading
// dimensions (not its last).
func (p *tpPass) lead(s int, id string) bool { return s >= 0 && s < p.last(id) }

// tpMatmul is the rule of ir.OpMatmul.
func tpMatmul(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	if ni != 2 || no != 1 {
		return whole(n, r)
	}
	a, b, y := n.Inputs[0], n.Inputs[1], n.Outputs[0]
	sa, sb := p.in(n, 0), p.in(n, 1)
	if n.Attrs["transpose_a"] != 0 {
		// y[K,N] = aᵀ·b over the flattened leading dimensions.
		la, lb := sa == p.last(a), sb == p.last(b)
		switch {
		case la && sb == rep:
			r.out[0] = 0
		case sa == rep && lb:
			r.out[0] = 1
		case sa == rep && sb == rep:
		case la:
			r.need[1], r.out[0] = rep, 0
		case lb:
			r.need[0], r.out[0] = rep, 1
		case p.lead(sa, a):
			r.need[1], r.partial[0] = sa, true
		default: // p.lead(sb, b)
			r.need[0], r.partial[0] = sb, true
		}
		return r
	}
	if p.rank(b) != 2 {
		return whole(n, r)
	}
	kd, nd := 0, 1
	if n.Attrs["transpose_b"] != 0 {
		kd, nd = 1, 0
	}
	switch {
	case sb == nd: // column-parallel
		r.need[0], r.out[0] = rep, p.last(y)
	case sb == kd: // row-parallel
		r.need[0], r.partial[0] = p.last(a), true
	case sa == p.last(a):
		r.need[0] = rep
	case p.lead(sa, a):
		r.out[0] = sa
	}
	return r
}

// tpAdd is the rule of ir.OpAdd, ir.OpMul, ir.OpGeluBackward, ir.OpSiluBackward.
func tpAdd(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	if ni != 2 || no != 1 {
		return whole(n, r)
	}
	return p.binary(n, r)
}

// tpGelu is the rule of ir.OpGelu, ir.OpSilu, ir.OpRope, ir.OpRopeBackward.
func tpGelu(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	if ni != 1 || no != 1 {
		return whole(n, r)
	}
	s := p.in(n, 0)
	r.out[0] = s
	r.heads = s == p.last(n.Inputs[0])
	return r
}

// tpLayerNorm is the rule of ir.OpLayerNorm, ir.OpRMSNorm.
func tpLayerNorm(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	// x, w[, b] → y, statistics over the leading dimensions.
	s := p.in(n, 0)
	r.need = fill(ni, rep)
	if p.lead(s, n.Inputs[0]) {
		r.need[0] = s
		r.out = fill(no, s)
	} else {
		r.need[0] = rep
	}
	return r
}

// tpLayerNormBackward is the rule of ir.OpLayerNormBackward, ir.OpRMSNormBackward.
func tpLayerNormBackward(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	// x, w, statistics…, dy → [dx,] weight gradients (the last
	// nparam outputs).
	nparam := 2
	if n.Op == ir.OpRMSNormBackward {
		nparam = 1
	}
	s := p.in(n, 0)
	r.need = fill(ni, rep)
	if !p.lead(s, n.Inputs[0]) || p.in(n, ni-1) != s {
		return r
	}
	for i := range r.need {
		r.need[i] = s
	}
	r.need[1] = rep // w
	for j := range r.out {
		if j < no-nparam {
			r.out[j] = s
		} else {
			r.partial[j] = true
		}
	}
	return r
}

// tpCausalAttention is the rule of ir.OpCausalAttention, ir.OpCausalAttentionBackward.
func tpCausalAttention(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	// q, k, v[, y, lse, dy]: heads split along the last dimension
	// (lse [B,heads,S] along dimension 1).
	split := true
	for i, id := range n.Inputs {
		want := p.last(id)
		if n.Op == ir.OpCausalAttentionBackward && i == 4 {
			want = 1
		}
		split = split && p.in(n, i) == want
	}
	if !split {
		return whole(n, r)
	}
	for j, id := range n.Outputs {
		r.out[j] = p.last(id)
		if n.Op == ir.OpCausalAttention && j == 1 {
			r.out[j] = 1
		}
	}
	r.heads = true
	return r
}

// tpEmbedding is the rule of ir.OpEmbedding.
func tpEmbedding(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	if ni != 2 || no != 1 {
		return whole(n, r)
	}
	r.need[1] = rep
	switch p.in(n, 0) {
	case 0: // vocabulary-parallel: each rank looks up its rows
		r.partial[0] = true
	case 1:
		r.out[0] = p.last(n.Outputs[0])
	}
	return r
}

// tpEmbeddingBackward is the rule of ir.OpEmbeddingBackward.
func tpEmbeddingBackward(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	if ni != 2 || no != 1 {
		return whole(n, r)
	}
	r.need[0] = rep
	sdy := p.in(n, 1)
	switch {
	case sdy == p.last(n.Inputs[1]):
		r.out[0] = 1
	case p.hinted(n.Outputs[0], 0):
		r.need[1], r.out[0], r.vocab = rep, 0, true
	default:
		r.need[1] = rep
	}
	return r
}

// tpCrossEntropy is the rule of ir.OpCrossEntropy.
func tpCrossEntropy(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	if ni != 2 || no != 1 {
		return whole(n, r)
	}
	r.need[1] = rep
	s := p.in(n, 0)
	if p.lead(s, n.Inputs[0]) {
		r.partial[0] = true // per-shard sums of the loss
	}
	return r
}

// tpCrossEntropyBackward is the rule of ir.OpCrossEntropyBackward.
func tpCrossEntropyBackward(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	if no != 1 {
		return whole(n, r)
	}
	for i := 1; i < ni; i++ {
		r.need[i] = rep
	}
	r.out[0] = p.in(n, 0)
	return r
}

// tpReduceSum is the rule of ir.OpReduceSum.
func tpReduceSum(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	if ni != 1 || no != 1 {
		return whole(n, r)
	}
	off := p.rank(n.Inputs[0]) - p.rank(n.Outputs[0])
	switch s := p.in(n, 0); {
	case s == rep:
	case s >= off && off >= 0:
		r.out[0] = s - off
	default:
		r.partial[0] = true
	}
	return r
}

// tpOnes is the rule of ir.OpOnes.
func tpOnes(p *tpPass, n *ir.Node, r rule, ni, no int) rule {
	return r
}

// binary handles elementwise operators of two inputs; add broadcasts its
// second input over the first's leading dimensions.
func (p *tpPass) binary(n *ir.Node, r rule) rule {
	x, y := n.Inputs[0], n.Inputs[1]
	sx, sy := p.st(x), p.st(y)
	off := p.rank(x) - p.rank(y)
	if off < 0 {
		r.need = fill(2, rep)
		return r
	}
	if sy >= 0 {
		sy += off // in x's dimensions
	}
	switch {
	case sx == sy:
		r.out[0] = sx
	case sx == rep: // slice x (free)
		r.need[0], r.out[0] = sy, sy
	case sy == rep || sx >= off:
		if sx >= off {
			r.need[1] = sx - off // slice or re-gather y to match x
		} else {
			r.need[1] = rep
		}
		r.out[0] = sx
	default:
		r.need = fill(2, rep)
	}
	return r
}

// update handles a node that updates a parameter in place with its
// gradient and optimizer state: everything takes the parameter's state.
func (p *tpPass) update(n *ir.Node, r rule) rule {
	param, _ := p.g.updateOf(n)
	s := p.st(param)
	for i, in := range n.Inputs {
		t := p.g.tensors[in]
		if slices.Contains(n.Outputs, in) {
			if cur, ok := p.state[in]; ok && cur != s && t.Role != ir.Parameter {
				p.probs.add("tensor %q is split differently from parameter %q, which node %q updates it with", in, param, n.ID)
			}
			if t.Role.Persistent() {
				p.state[in] = s
			}
			continue
		}
		r.need[i] = s
	}
	return r
}

// localize gives every split tensor its local shape and rewrites the views
// of split tensors.
func (p *tpPass) localize() {
	for _, id := range sortedIDs(p.g.tensors) {
		t := p.g.tensors[id]
		if t.View != nil {
			continue
		}
		s := p.st(id)
		if s < 0 {
			continue
		}
		d, ok := splitDim(t.Shape[s], p.deg, p.spec.Padding)
		if !ok {
			p.probs.add("tensor %q: dimension %d (%d) is not divisible by tensor_parallel degree %d (set padding %q to round up)", id, s, t.Shape[s], p.deg, PadCeil)
			continue
		}
		t.Shape[s] = d
		if s < len(t.ShapeEnvelope) {
			e := &t.ShapeEnvelope[s]
			e.Min, _ = splitDim(e.Min, p.deg, PadCeil)
			e.Max, _ = splitDim(e.Max, p.deg, PadCeil)
		}
	}
	for _, id := range sortedIDs(p.g.tensors) {
		if t := p.g.tensors[id]; t.View != nil && p.st(t.View.BaseTensor) != rep {
			if err := p.splitView(t); err != "" {
				p.probs.add("view %q of split tensor %q: %s", id, t.View.BaseTensor, err)
			}
		}
	}
}

// splitView rewrites a view of a tensor split along its last dimension:
// each rank's base holds, in every row, its share of each of the view's
// columns (Megatron arranges a fused QKV weight so), so the view keeps its
// leading strides divided by the degree.
func (p *tpPass) splitView(t *ir.Tensor) string {
	base := p.g.tensors[p.g.root(t.ID)]
	if s := p.st(base.ID); s != len(base.Shape)-1 {
		return "only views of tensors split along their last dimension can be split"
	}
	v, k := t.View, len(t.Shape)
	elem := t.DType.Size()
	strides := v.Strides
	if len(strides) == 0 {
		strides = contiguous(t.Shape)
	}
	deg := p.deg
	if k == 0 || strides[k-1] != 1 || t.Shape[k-1]%deg != 0 || v.ByteOffset%(deg*elem) != 0 {
		return fmt.Sprintf("its last dimension must be contiguous and divisible, and its byte offset %d a multiple of %d×%d bytes", v.ByteOffset, deg, elem)
	}
	local := slices.Clone(strides)
	for i := 0; i < k-1; i++ {
		if local[i]%deg != 0 {
			return fmt.Sprintf("stride %d of dimension %d is not divisible by %d", local[i], i, deg)
		}
		local[i] /= deg
	}
	t.Shape[k-1] /= deg
	extent := uint64(1)
	for i := range k {
		extent += (t.Shape[i] - 1) * local[i]
	}
	v.ByteOffset /= deg
	v.ByteLength = extent * elem
	if len(v.Strides) > 0 {
		v.Strides = local
	} else if !slices.Equal(local, contiguous(t.Shape)) {
		v.Strides = local
	}
	return ""
}

func contiguous(shape []uint64) []uint64 {
	s := make([]uint64, len(shape))
	acc := uint64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
