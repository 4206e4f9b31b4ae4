package engine

import (
	"fmt"
	"math"
	"slices"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// OpExecute is the operator named in execution failures.
const OpExecute = "UML_OS.TMMU.Execute_v1"

// action is one thing a step does, in execution order: kernel launches
// for a node, or a collective.
type action struct {
	node     string
	forward  bool     // a forward node: Evaluate runs it
	outputs  []string // the node's outputs, for Watch
	launches []Launch
	prepared []Prepared // launches bound once (Engine.prepare)
	coll     *collective
}

// operand is a tensor as a kernel addresses it.
type operand struct {
	region int
	word   uint64 // word offset of element 0 in the region
	shape  []uint64
	// strides in elements; nil for a contiguous tensor.
	strides []uint64
	numel   uint64
	// span is the words of the region the kernel may touch through the
	// operand: its whole storage (a view's root), which holds every
	// element an offset word or stride can reach.
	span WordRange
}

func unsupported(format string, args ...any) error {
	return failure.New(failure.UnsupportedExecution, OpExecute, fmt.Sprintf(format, args...))
}

// lowerer turns nodes into launches.
type lowerer struct {
	e *Engine
	// ws is the words of workspace the launches need (per-row partial
	// results; see workspace).
	ws uint64
}

// wsRegion stands for the workspace region in Launch.Slots until New
// allocates it.
const wsRegion = -1

// workspace is an operand of words words in the engine's workspace: a
// region outside the plan, shared by every launch that needs one (they
// run one after another), for partial results no tensor of the graph
// holds, such as each row's loss before the mean. Its bytes are reported
// beside the plan's (Engine.WorkspaceBytes).
func (l *lowerer) workspace(words uint64) operand {
	l.ws = max(l.ws, words)
	return operand{region: wsRegion, shape: []uint64{words}, numel: words, span: WordRange{0, words}}
}

func (l *lowerer) op(id string) (operand, error) {
	ti, ok := l.e.g.TensorIndex(id)
	if !ok {
		return operand{}, unsupported("tensor %q is not in the graph", id)
	}
	t := &l.e.g.Tensors[ti]
	loc := l.e.loc[ti]
	n, _ := ir.Numel(t.Shape)
	start := loc.offset - l.e.g.RootOffset[ti]
	o := operand{region: loc.region, word: loc.offset / 4, shape: t.Shape, numel: n,
		span: WordRange{start / 4, (start + l.e.g.StorageBytes[l.e.g.Root[ti]] + 3) / 4}}
	if t.View != nil {
		o.strides = t.View.Strides
	}
	return o, nil
}

// contiguous returns the operands of ids, each required to be contiguous.
func (l *lowerer) ops(ids ...string) ([]operand, error) {
	out := make([]operand, len(ids))
	for i, id := range ids {
		o, err := l.op(id)
		if err != nil {
			return nil, err
		}
		if o.strides != nil && !isContiguous(o.shape, o.strides) {
			return nil, unsupported("tensor %q is a strided view, which this op reads only contiguously", id)
		}
		out[i] = o
	}
	return out, nil
}

func isContiguous(shape, strides []uint64) bool {
	s := uint64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] != 1 && strides[i] != s {
			return false
		}
		s *= shape[i]
	}
	return true
}

// launch builds a launch over operands (their regions become slots) and
// the trailing scalar words.
func launch(kernel string, threads uint64, ops []operand, words ...uint32) (Launch, error) {
	l := Launch{Kernel: kernel, Threads: uint32(threads)}
	if threads > math.MaxUint32 {
		return l, unsupported("kernel %s needs %d invocations (at most %d)", kernel, threads, uint32(math.MaxUint32))
	}
	for _, o := range ops {
		slot := slices.Index(l.Slots, o.region)
		if slot < 0 {
			slot = len(l.Slots)
			l.Slots = append(l.Slots, o.region)
		}
		l.Spans = append(l.Spans, o.span)
		if o.word > math.MaxUint32 {
			return l, unsupported("kernel %s: an operand starts at word %d of its region (beyond 32-bit addressing)", kernel, o.word)
		}
		l.Params = append(l.Params, uint32(slot), uint32(o.word))
	}
	if len(l.Slots) > MaxSlots {
		return l, unsupported("kernel %s binds %d regions (at most %d)", kernel, len(l.Slots), MaxSlots)
	}
	l.Params = append(l.Params, words...)
	return l, nil
}

// grouped makes x a workgroup launch of groups groups whose invocations
// each run at most iters loop iterations.
func grouped(x Launch, err error) func(groups, iters uint64) (Launch, error) {
	return func(groups, iters uint64) (Launch, error) {
		if err == nil && groups > math.MaxUint32 {
			err = unsupported("kernel %s needs %d workgroups (at most %d)", x.Kernel, groups, uint32(math.MaxUint32))
		}
		x.Groups, x.Threads, x.Iters = true, uint32(groups), iters
		return x, err
	}
}

// withIters records that each invocation of x runs at most iters loop
// iterations.
func withIters(x Launch, err error) func(iters uint64) (Launch, error) {
	return func(iters uint64) (Launch, error) {
		x.Iters = iters
		return x, err
	}
}

// perLane is how many of n elements one lane of a workgroup visits.
func perLane(n uint64) uint64 { return (n + wgLanes - 1) / wgLanes }

// treeIters is the loop iterations of one lane tree reduction.
const treeIters = 6

func f32(x float32) uint32 { return math.Float32bits(x) }

func u32(x uint64) uint32 { return uint32(x) }

// shifted is o moved by a word offset with other strides (a view of a
// fused gradient).
func shifted(o operand, words uint64, strides []uint64) operand {
	o.word += words
	o.strides = strides
	return o
}

// bs returns the (batch, sequence) word strides of a [B,S,W] operand.
func bs(o operand) (uint32, uint32) {
	if o.strides != nil {
		return u32(o.strides[0]), u32(o.strides[1])
	}
	return u32(o.shape[1] * o.shape[2]), u32(o.shape[2])
}

const layerNormEps = 1e-5

// lower returns the launches of one compute node, by its op's entry in
// lowerings.
func (l *lowerer) lower(n *ir.Node) ([]Launch, error) {
	if _, ok := lowerings[n.Op]; !ok && n.Call != nil {
		return l.lowerCall(n)
	}
	if f, ok := lowerings[n.Op]; ok {
		if f.ins >= 0 {
			if err := need(n, f.ins, f.outs); err != nil {
				return nil, err
			}
		}
		return f.lower(l, n)
	}
	return nil, unsupported("node %q: op %q has no kernel", n.ID, n.Op)
}

// lowerings are the kernels' launches by op, with the inputs and outputs
// a node of the op must have (ins < 0: the lowering checks them itself).
var lowerings = map[ir.Op]lowering{
	ir.OpOnes:                    {0, 1, (*lowerer).lowerOnes},
	ir.OpEmbedding:               {2, 1, (*lowerer).lowerEmbedding},
	ir.OpMatmul:                  {2, 1, (*lowerer).lowerMatmul},
	ir.OpAdd:                     {2, 1, (*lowerer).lowerAdd},
	ir.OpMul:                     {2, 1, (*lowerer).lowerMul},
	ir.OpGelu:                    {1, 1, (*lowerer).lowerGelu},
	ir.OpSilu:                    {1, 1, (*lowerer).lowerGelu},
	ir.OpGeluBackward:            {2, 1, (*lowerer).lowerGeluBackward},
	ir.OpSiluBackward:            {2, 1, (*lowerer).lowerGeluBackward},
	ir.OpLayerNorm:               {3, 3, (*lowerer).lowerLayerNorm},
	ir.OpLayerNormBackward:       {-1, 0, (*lowerer).lowerLayerNormBackward},
	ir.OpRMSNorm:                 {2, 2, (*lowerer).lowerRMSNorm},
	ir.OpRMSNormBackward:         {-1, 0, (*lowerer).lowerRMSNormBackward},
	ir.OpRope:                    {1, 1, (*lowerer).lowerRope},
	ir.OpRopeBackward:            {1, 1, (*lowerer).lowerRope},
	ir.OpCausalAttention:         {3, 2, (*lowerer).lowerCausalAttention},
	ir.OpCausalAttentionBackward: {-1, 0, (*lowerer).lowerCausalAttentionBackward},
	ir.OpCrossEntropy:            {2, 1, (*lowerer).lowerCrossEntropy},
	ir.OpCrossEntropyBackward:    {3, 1, (*lowerer).lowerCrossEntropyBackward},
	ir.OpReduceSum:               {1, 1, (*lowerer).lowerReduceSum},
	ir.OpEmbeddingBackward:       {2, 1, (*lowerer).lowerEmbeddingBackward},
	ir.OpAdamW:                   {-1, 0, (*lowerer).lowerAdamW},
}

// lowering is one op's entry in lowerings.
type lowering struct {
	ins, outs int
	lower     func(*lowerer, *ir.Node) ([]Launch, error)
}

// one is a single launch of kernel k.
func one(k string, threads uint64, ops []operand, words ...uint32) ([]Launch, error) {
	x, err := launch(k, threads, ops, words...)
	return []Launch{x}, err
}

// need refuses node n unless it has ins inputs and outs outputs.
func need(n *ir.Node, ins, outs int) error {
	if len(n.Inputs) != ins || len(n.Outputs) != outs {
		return unsupported("node %q (%s) has %d inputs and %d outputs, expected %d and %d", n.ID, n.Op, len(n.Inputs), len(n.Outputs), ins, outs)
	}
	return nil
}

// lowerOnes lowers ir.OpOnes.
func (l *lowerer) lowerOnes(n *ir.Node) ([]Launch, error) {
	out := n.Outputs
	o, err := l.ops(out[0])
	if err != nil {
		return nil, err
	}
	return one("fill", o[0].numel, o, u32(o[0].numel), f32(1))
}

// lowerEmbedding lowers ir.OpEmbedding.
func (l *lowerer) lowerEmbedding(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], in[1], out[0])
	if err != nil {
		return nil, err
	}
	if len(o[0].shape) != 2 {
		return nil, unsupported("embedding %q: table of rank %d", n.ID, len(o[0].shape))
	}
	return one("embedding", o[2].numel, o, u32(o[1].numel), u32(o[0].shape[1]), u32(o[0].shape[0]))
}

// lowerMatmul lowers ir.OpMatmul.
func (l *lowerer) lowerMatmul(n *ir.Node) ([]Launch, error) {
	return l.matmul(n)
}

// lowerAdd lowers ir.OpAdd.
func (l *lowerer) lowerAdd(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], in[1], out[0])
	if err != nil {
		return nil, err
	}
	if o[1].numel == 0 || o[0].numel%o[1].numel != 0 || o[2].numel != o[0].numel {
		return nil, unsupported("add %q: %v + %v does not broadcast", n.ID, o[0].shape, o[1].shape)
	}
	return one("add", o[0].numel, o, u32(o[0].numel), u32(o[1].numel))
}

// lowerMul lowers ir.OpMul.
func (l *lowerer) lowerMul(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], in[1], out[0])
	if err != nil {
		return nil, err
	}
	if o[0].numel != o[1].numel || o[2].numel != o[0].numel {
		return nil, unsupported("mul %q: shapes %v and %v differ", n.ID, o[0].shape, o[1].shape)
	}
	return one("mul", o[0].numel, o, u32(o[0].numel))
}

// lowerGelu lowers ir.OpGelu, ir.OpSilu.
func (l *lowerer) lowerGelu(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], out[0])
	if err != nil {
		return nil, err
	}
	return one(string(n.Op), o[0].numel, o, u32(o[0].numel))
}

// lowerGeluBackward lowers ir.OpGeluBackward, ir.OpSiluBackward.
func (l *lowerer) lowerGeluBackward(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], in[1], out[0])
	if err != nil {
		return nil, err
	}
	k := map[ir.Op]string{ir.OpGeluBackward: "gelu_bwd", ir.OpSiluBackward: "silu_bwd"}[n.Op]
	return one(k, o[0].numel, o, u32(o[0].numel))
}

// lowerLayerNorm lowers ir.OpLayerNorm.
func (l *lowerer) lowerLayerNorm(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], in[1], in[2], out[0], out[1], out[2])
	if err != nil {
		return nil, err
	}
	h := o[1].numel
	rows := o[0].numel / h
	x, err := grouped(launch("layernorm", 0, o, u32(rows), u32(h), f32(layerNormEps)))(rows, 3*perLane(h)+2*treeIters)
	return []Launch{x}, err
}

// lowerLayerNormBackward lowers ir.OpLayerNormBackward.
func (l *lowerer) lowerLayerNormBackward(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	if len(in) != 5 || (len(out) != 2 && len(out) != 3) {
		return nil, unsupported("node %q (%s) has %d inputs and %d outputs", n.ID, n.Op, len(in), len(out))
	}
	x, w, mean, rstd, dy := in[0], in[1], in[2], in[3], in[4]
	h, rows, err := l.rows(x, w)
	if err != nil {
		return nil, err
	}
	var ls []Launch
	if len(out) == 3 {
		o, err := l.ops(x, w, mean, rstd, dy, out[0])
		if err != nil {
			return nil, err
		}
		lx, err := grouped(launch("ln_bwd_x", 0, o, u32(rows), u32(h)))(rows, 3*perLane(h)+2*treeIters)
		if err != nil {
			return nil, err
		}
		ls, out = append(ls, lx), out[1:]
	}
	o, err := l.ops(x, mean, rstd, dy, out[0], out[1])
	if err != nil {
		return nil, err
	}
	return chunked(ls, rows, func(r0, r1 uint64) (Launch, error) {
		return withIters(launch("ln_bwd_wb", h, o, u32(rows), u32(h), 1, u32(r0), u32(r1)))(r1 - r0)
	})
}

// lowerRMSNorm lowers ir.OpRMSNorm.
func (l *lowerer) lowerRMSNorm(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], in[1], out[0], out[1])
	if err != nil {
		return nil, err
	}
	h := o[1].numel
	rows := o[0].numel / h
	x, err := grouped(launch("rmsnorm", 0, o, u32(rows), u32(h), f32(layerNormEps)))(rows, 2*perLane(h)+treeIters)
	return []Launch{x}, err
}

// lowerRMSNormBackward lowers ir.OpRMSNormBackward.
func (l *lowerer) lowerRMSNormBackward(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	if len(in) != 4 || (len(out) != 1 && len(out) != 2) {
		return nil, unsupported("node %q (%s) has %d inputs and %d outputs", n.ID, n.Op, len(in), len(out))
	}
	x, w, rstd, dy := in[0], in[1], in[2], in[3]
	h, rows, err := l.rows(x, w)
	if err != nil {
		return nil, err
	}
	var ls []Launch
	if len(out) == 2 {
		o, err := l.ops(x, w, rstd, dy, out[0])
		if err != nil {
			return nil, err
		}
		lx, err := grouped(launch("rms_bwd_x", 0, o, u32(rows), u32(h)))(rows, 2*perLane(h)+treeIters)
		if err != nil {
			return nil, err
		}
		ls, out = append(ls, lx), out[1:]
	}
	o, err := l.ops(x, rstd, dy, out[0])
	if err != nil {
		return nil, err
	}
	return chunked(ls, rows, func(r0, r1 uint64) (Launch, error) {
		return withIters(launch("rms_bwd_w", h, o, u32(rows), u32(h), u32(r0), u32(r1)))(r1 - r0)
	})
}

// lowerRope lowers ir.OpRope, ir.OpRopeBackward.
func (l *lowerer) lowerRope(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], out[0])
	if err != nil {
		return nil, err
	}
	heads := uint64(n.Attrs["heads"])
	if len(o[0].shape) != 3 || heads == 0 || o[0].shape[2]%(2*heads) != 0 {
		return nil, unsupported("rope %q: shape %v with %d heads", n.ID, o[0].shape, heads)
	}
	width := o[0].shape[2]
	inv := uint32(0)
	if n.Op == ir.OpRopeBackward {
		inv = 1
	}
	rows := o[0].numel / width
	return one("rope", rows*width/2, o, u32(rows), u32(o[0].shape[1]), u32(width), u32(width/heads), inv)
}

// lowerCausalAttention lowers ir.OpCausalAttention.
func (l *lowerer) lowerCausalAttention(n *ir.Node) ([]Launch, error) {
	return l.attention(n)
}

// lowerCausalAttentionBackward lowers ir.OpCausalAttentionBackward.
func (l *lowerer) lowerCausalAttentionBackward(n *ir.Node) ([]Launch, error) {
	return l.attentionBackward(n)
}

// lowerCrossEntropy lowers ir.OpCrossEntropy.
func (l *lowerer) lowerCrossEntropy(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], in[1], out[0])
	if err != nil {
		return nil, err
	}
	rows := o[1].numel
	if rows == 0 || o[0].numel%rows != 0 {
		return nil, unsupported("cross_entropy %q: logits %v for %d labels", n.ID, o[0].shape, rows)
	}
	vocab := o[0].numel / rows
	// Each row's loss lands in the engine's workspace, then one
	// group averages them: no invocation loops over all rows·vocab.
	ws := l.workspace(rows)
	lr, err := grouped(launch("xent_rows", 0, []operand{o[0], o[1], ws}, u32(rows), u32(vocab)))(rows, 2*perLane(vocab)+2*treeIters)
	if err != nil {
		return nil, err
	}
	lm, err := grouped(launch("xent_mean", 0, []operand{ws, o[2]}, u32(rows)))(1, perLane(rows)+treeIters)
	return []Launch{lr, lm}, err
}

// lowerCrossEntropyBackward lowers ir.OpCrossEntropyBackward.
func (l *lowerer) lowerCrossEntropyBackward(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], in[1], in[2], out[0])
	if err != nil {
		return nil, err
	}
	rows := o[1].numel
	if rows == 0 || o[0].numel%rows != 0 {
		return nil, unsupported("cross_entropy_backward %q: logits %v for %d labels", n.ID, o[0].shape, rows)
	}
	vocab := o[0].numel / rows
	x, err := grouped(launch("xent_bwd", 0, o, u32(rows), u32(vocab)))(rows, 3*perLane(vocab)+2*treeIters)
	return []Launch{x}, err
}

// lowerReduceSum lowers ir.OpReduceSum.
func (l *lowerer) lowerReduceSum(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], out[0])
	if err != nil {
		return nil, err
	}
	if o[1].numel == 0 || o[0].numel%o[1].numel != 0 {
		return nil, unsupported("reduce_sum %q: %v to %v", n.ID, o[0].shape, o[1].shape)
	}
	rows := o[0].numel / o[1].numel
	return chunked(nil, rows, func(r0, r1 uint64) (Launch, error) {
		return withIters(launch("reduce_sum", o[1].numel, o, u32(rows), u32(o[1].numel), u32(r0), u32(r1)))(r1 - r0)
	})
}

// lowerEmbeddingBackward lowers ir.OpEmbeddingBackward.
func (l *lowerer) lowerEmbeddingBackward(n *ir.Node) ([]Launch, error) {
	in, out := n.Inputs, n.Outputs
	o, err := l.ops(in[0], in[1], out[0])
	if err != nil {
		return nil, err
	}
	if len(o[2].shape) != 2 {
		return nil, unsupported("embedding_backward %q: table gradient of rank %d", n.ID, len(o[2].shape))
	}
	// Zero the table gradient, then one invocation per column adds
	// the rows in order (no invocation loops over vocab·rows).
	h := o[2].shape[1]
	z, err := launch("fill", o[2].numel, o[2:], u32(o[2].numel), f32(0))
	if err != nil {
		return nil, err
	}
	return chunked([]Launch{z}, o[0].numel, func(r0, r1 uint64) (Launch, error) {
		return withIters(launch("emb_bwd", h, o, u32(o[0].numel), u32(h), u32(o[2].shape[0]), u32(r0), u32(r1)))(r1 - r0)
	})
}

// lowerAdamW lowers ir.OpAdamW.
func (l *lowerer) lowerAdamW(n *ir.Node) ([]Launch, error) {
	return l.adamw(n)
}

// rows returns the last-dimension width (w's size) and the row count of x.
func (l *lowerer) rows(x, w string) (uint64, uint64, error) {
	o, err := l.ops(x, w)
	if err != nil {
		return 0, 0, err
	}
	h := o[1].numel
	if h == 0 || o[0].numel%h != 0 {
		return 0, 0, unsupported("tensor %q %v does not have rows of %d", x, o[0].shape, h)
	}
	return h, o[0].numel / h, nil
}

func (l *lowerer) matmul(n *ir.Node) ([]Launch, error) {
	o, err := l.ops(n.Inputs[0], n.Inputs[1], n.Outputs[0])
	if err != nil {
		return nil, err
	}
	a, b, y := o[0], o[1], o[2]
	ta, tb := n.Attrs["transpose_a"] != 0, n.Attrs["transpose_b"] != 0
	last := func(x operand) uint64 {
		if len(x.shape) == 0 {
			return 1
		}
		return x.shape[len(x.shape)-1]
	}
	var M, N, K, as0, as1, bs0, bs1 uint64
	switch {
	case ta && tb:
		return nil, unsupported("matmul %q: transpose_a and transpose_b together", n.ID)
	case ta:
		// a [R,M] and b [R,N] flattened: y [M,N] = aᵀ·b.
		M, N = last(a), last(b)
		K = a.numel / max(M, 1)
		as0, as1, bs0, bs1 = 1, M, N, 1
		if b.numel != K*N {
			return nil, unsupported("matmul %q: aᵀ·b with a %v and b %v", n.ID, a.shape, b.shape)
		}
	default:
		K = last(a)
		M = a.numel / max(K, 1)
		as0, as1 = K, 1
		if len(b.shape) != 2 {
			return nil, unsupported("matmul %q: b of rank %d", n.ID, len(b.shape))
		}
		if tb {
			N = b.shape[0]
			bs0, bs1 = 1, K
			if b.shape[1] != K {
				return nil, unsupported("matmul %q: a %v against bᵀ of %v", n.ID, a.shape, b.shape)
			}
		} else {
			N = b.shape[1]
			bs0, bs1 = N, 1
			if b.shape[0] != K {
				return nil, unsupported("matmul %q: a %v against b %v", n.ID, a.shape, b.shape)
			}
		}
	}
	if y.numel != M*N {
		return nil, unsupported("matmul %q: output %v is not [%d,%d]", n.ID, y.shape, M, N)
	}
	tiles := ((M + matmulTile - 1) / matmulTile) * ((N + matmulTile - 1) / matmulTile)
	return chunked(nil, K, func(r0, r1 uint64) (Launch, error) {
		return grouped(launch("matmul", 0, o, u32(M), u32(N), u32(K), u32(as0), u32(as1), u32(bs0), u32(bs1), u32(r0), u32(r1)))(tiles, r1-r0+4+4*4)
	})
}

// rowChunk is the most rows one launch of a kernel that sums over rows
// takes (and so the loop iterations of its invocations): a sum over
// more rows is several launches, each continuing the sums the one
// before left in the output, in the same order (the same bits), so no
// invocation loops over a dimension of unbounded size.
//
// (A variable only so that tests can cut small graphs into chunks.)
var rowChunk uint64 = 16384

// chunked appends to ls the launches of rows [0, rows) in chunks of at
// most rowChunk (one launch for no rows).
func chunked(ls []Launch, rows uint64, f func(r0, r1 uint64) (Launch, error)) ([]Launch, error) {
	for r0 := uint64(0); r0 < max(rows, 1); r0 += rowChunk {
		x, err := f(r0, min(r0+rowChunk, rows))
		if err != nil {
			return nil, err
		}
		ls = append(ls, x)
	}
	return ls, nil
}

// qkv returns q, k, v (strided views allowed, last dimension contiguous)
// and the attention sizes.
func (l *lowerer) qkv(n *ir.Node) (ops []operand, B, S, H, KV, D uint64, err error) {
	ops = make([]operand, 3)
	for i := range 3 {
		if ops[i], err = l.op(n.Inputs[i]); err != nil {
			return
		}
		o := ops[i]
		if len(o.shape) != 3 || (o.strides != nil && o.strides[2] != 1) {
			err = unsupported("attention %q: %q has shape %v strides %v (want [B,S,W], last dimension contiguous)", n.ID, n.Inputs[i], o.shape, o.strides)
			return
		}
	}
	H, KV = uint64(n.Attrs["heads"]), uint64(n.Attrs["kv_heads"])
	if KV == 0 {
		KV = H
	}
	q, k := ops[0], ops[1]
	B, S = q.shape[0], q.shape[1]
	if H == 0 || q.shape[2]%H != 0 || KV == 0 || H%KV != 0 {
		err = unsupported("attention %q: %d heads, %d kv heads, width %d", n.ID, H, KV, q.shape[2])
		return
	}
	D = q.shape[2] / H
	if S > maxAttnSeq || D > maxHeadDim {
		err = unsupported("attention %q: sequence %d and head width %d (the kernels take sequences up to %d and heads up to %d wide)", n.ID, S, D, maxAttnSeq, maxHeadDim)
		return
	}
	if k.shape[2] != KV*D || !slices.Equal(k.shape, ops[2].shape) || k.shape[0] != B || k.shape[1] != S {
		err = unsupported("attention %q: q %v, k %v, v %v", n.ID, q.shape, k.shape, ops[2].shape)
	}
	return
}

func (l *lowerer) attention(n *ir.Node) ([]Launch, error) {
	qkv, B, S, H, KV, D, err := l.qkv(n)
	if err != nil {
		return nil, err
	}
	o, err := l.ops(n.Outputs[0], n.Outputs[1])
	if err != nil {
		return nil, err
	}
	qs0, qs1 := bs(qkv[0])
	ks0, ks1 := bs(qkv[1])
	vs0, vs1 := bs(qkv[2])
	scale := float32(1 / math.Sqrt(float64(D)))
	x, err := grouped(launch("attn", 0, append(qkv, o...), u32(B), u32(S), u32(H), u32(KV), u32(D),
		qs0, qs1, ks0, ks1, vs0, vs1, f32(scale)))(B*H*S, perLane(S)*(D+3)+perLane(D)*(S+1)+2*treeIters)
	return []Launch{x}, err
}

func (l *lowerer) attentionBackward(n *ir.Node) ([]Launch, error) {
	if len(n.Inputs) != 6 || (len(n.Outputs) != 1 && len(n.Outputs) != 3) {
		return nil, unsupported("node %q (%s) has %d inputs and %d outputs", n.ID, n.Op, len(n.Inputs), len(n.Outputs))
	}
	qkv, B, S, H, KV, D, err := l.qkv(n)
	if err != nil {
		return nil, err
	}
	rest, err := l.ops(n.Inputs[3], n.Inputs[4], n.Inputs[5])
	if err != nil {
		return nil, err
	}
	var dq, dk, dv operand
	if len(n.Outputs) == 3 {
		d, err := l.ops(n.Outputs...)
		if err != nil {
			return nil, err
		}
		dq, dk, dv = d[0], d[1], d[2]
	} else {
		// One fused gradient laid out like the tensor q, k and v view:
		// each gradient is that tensor at the view's offset and strides.
		fused, err := l.op(n.Outputs[0])
		if err != nil {
			return nil, err
		}
		var views [3]operand
		for i := range 3 {
			ti, _ := l.e.g.TensorIndex(n.Inputs[i])
			t := &l.e.g.Tensors[ti]
			if t.View == nil {
				return nil, unsupported("attention backward %q writes one gradient, but %q is not a view", n.ID, n.Inputs[i])
			}
			base, _ := l.e.g.TensorIndex(t.View.BaseTensor)
			if bt := &l.e.g.Tensors[base]; !slices.Equal(bt.Shape, fused.shape) || bt.View != nil {
				return nil, unsupported("attention backward %q: gradient %v for a view of %v", n.ID, fused.shape, bt.Shape)
			}
			views[i] = shifted(fused, t.View.ByteOffset/4, t.View.Strides)
		}
		dq, dk, dv = views[0], views[1], views[2]
	}
	qs0, qs1 := bs(qkv[0])
	ks0, ks1 := bs(qkv[1])
	vs0, vs1 := bs(qkv[2])
	scale := f32(float32(1 / math.Sqrt(float64(D))))
	ins := append(slices.Clone(qkv), rest...)
	d0, d1 := bs(dq)
	lq, err := grouped(launch("attn_bwd_q", 0, append(slices.Clone(ins), dq), u32(B), u32(S), u32(H), u32(KV), u32(D),
		qs0, qs1, ks0, ks1, vs0, vs1, d0, d1, scale))(B*H*S, D+perLane(S)*(2*D+1)+perLane(D)*(S+1))
	if err != nil {
		return nil, err
	}
	k0, k1 := bs(dk)
	v0, v1 := bs(dv)
	lkv, err := grouped(launch("attn_bwd_kv", 0, append(slices.Clone(ins), dk, dv), u32(B), u32(S), u32(H), u32(KV), u32(D),
		qs0, qs1, ks0, ks1, vs0, vs1, k0, k1, v0, v1, scale))(B*KV*S, H/KV*(1+perLane(S)*(3*D+2)+2*perLane(D)*(S+1))+perLane(D))
	return []Launch{lq, lkv}, err
}

func (l *lowerer) adamw(n *ir.Node) ([]Launch, error) {
	if len(n.Inputs) != 4 || len(n.Outputs) != 3 {
		return nil, unsupported("adamw %q: %d inputs (a master copy needs a bf16/fp16 executor, which does not exist yet)", n.ID, len(n.Inputs))
	}
	o, err := l.ops(n.Inputs...)
	if err != nil {
		return nil, err
	}
	p, g, m, v := o[0], o[1], o[2], o[3]
	if m.numel != v.numel {
		return nil, unsupported("adamw %q: m has %d elements, v %d", n.ID, m.numel, v.numel)
	}
	// The state may hold this rank's partition of a whole parameter
	// (ZeRO stages 1 and 2): update that partition only.
	count, poff, goff := m.numel, uint64(0), uint64(0)
	if p.numel != m.numel {
		if p.numel > m.numel*l.e.opts.DataSize || m.numel*l.e.opts.DataSize-p.numel >= l.e.opts.DataSize {
			return nil, unsupported("adamw %q: state of %d elements for a parameter of %d over %d ranks", n.ID, m.numel, p.numel, l.e.opts.DataSize)
		}
		poff = l.e.opts.DataRank * m.numel
		count = min(m.numel, p.numel-min(poff, p.numel))
		if g.numel == p.numel {
			goff = poff
		}
	}
	if g.numel != p.numel && g.numel != m.numel {
		return nil, unsupported("adamw %q: gradient of %d elements for a parameter of %d", n.ID, g.numel, p.numel)
	}
	a := l.e.opts.AdamW
	c1 := 1 - pow32(a.Beta1, float32(l.e.t))
	c2 := 1 - pow32(a.Beta2, float32(l.e.t))
	x, err := launch("adamw", count, o, u32(count), u32(poff), u32(goff), f32(a.LR), f32(a.Beta1), f32(a.Beta2), f32(a.Eps), f32(a.WeightDecay), f32(c1), f32(c2))
	return []Launch{x}, err
}
