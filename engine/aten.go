package engine

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tmmu/tmmu/ir"
)

// Imported nodes (tmmu import torch) carry their aten call (ir.Call):
// atenLowerings turn a call into launches of the kernels of
// atenkernels.go (and matmul's), reading each argument through the view
// the call records. The table is keyed by the call's target; an imported
// node whose target it lacks is refused by name (CheckOps).
var atenLowerings = map[string]func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error){
	"aten::arange.default":                           lowerArange,
	"aten::arange.start":                             lowerArange,
	"aten::arange.start_step":                        lowerArange,
	"aten::embedding.default":                        lowerAtenEmbedding,
	"aten::embedding_dense_backward.default":         lowerEmbeddingDenseBackward,
	"aten::add.Tensor":                               lowerBinary(bAdd),
	"aten::add_.Tensor":                              lowerBinary(bAdd),
	"aten::sub.Tensor":                               lowerBinary(bSub),
	"aten::mul.Tensor":                               lowerBinary(bMul),
	"aten::mul_.Tensor":                              lowerBinary(bMul),
	"aten::div.Tensor":                               lowerBinary(bDiv),
	"aten::div.Scalar":                               lowerBinary(bDiv),
	"aten::rsub.Scalar":                              lowerBinary(bRsub),
	"aten::threshold_backward.default":               lowerBinary(bThresholdBwd),
	"aten::gelu_backward.default":                    lowerGeluBwd,
	"aten::silu_backward.default":                    lowerBinary(bSiluBwd),
	"aten::hardswish_backward.default":               lowerBinary(bHardswishBwd),
	"aten::hardsigmoid_backward.default":             lowerBinary(bHardsigmoidBwd),
	"aten::sigmoid_backward.default":                 lowerBinary(bSigmoidBwd),
	"aten::tanh_backward.default":                    lowerBinary(bTanhBwd),
	"aten::masked_fill.Scalar":                       lowerBinary(bMaskedFill),
	"aten::clone.default":                            lowerUnary(uCopy),
	"aten::copy_.default":                            lowerCopy,
	"aten::relu.default":                             lowerUnary(uRelu),
	"aten::relu_.default":                            lowerUnary(uRelu),
	"aten::gelu.default":                             lowerGelu,
	"aten::neg.default":                              lowerUnary(uNeg),
	"aten::exp.default":                              lowerUnary(uExp),
	"aten::log.default":                              lowerUnary(uLog),
	"aten::sqrt.default":                             lowerUnary(uSqrt),
	"aten::rsqrt.default":                            lowerUnary(uRsqrt),
	"aten::sigmoid.default":                          lowerUnary(uSigmoid),
	"aten::tanh.default":                             lowerUnary(uTanh),
	"aten::silu.default":                             lowerUnary(uSilu),
	"aten::silu_.default":                            lowerUnary(uSilu),
	"aten::hardswish.default":                        lowerUnary(uHardswish),
	"aten::hardswish_.default":                       lowerUnary(uHardswish),
	"aten::hardsigmoid.default":                      lowerUnary(uHardsigmoid),
	"aten::ones.default":                             lowerFill(1),
	"aten::ones_like.default":                        lowerFill(1),
	"aten::zeros.default":                            lowerFill(0),
	"aten::zeros_like.default":                       lowerFill(0),
	"aten::new_zeros.default":                        lowerFill(0),
	"aten::full.default":                             lowerFull,
	"aten::triu.default":                             lowerTriu,
	"aten::tril.default":                             lowerTriu,
	"aten::bitwise_not.default":                      lowerBitwiseNot,
	"aten::empty_like.default":                       lowerFill(0),
	"aten::empty.memory_format":                      lowerFill(0),
	"aten::bernoulli_.float":                         lowerBernoulli,
	"aten::div_.Scalar":                              lowerBinary(bDiv),
	"aten::div_.Tensor":                              lowerBinary(bDiv),
	"aten::select_backward.default":                  lowerSelectBackward,
	"aten::slice_backward.default":                   lowerSliceBackward,
	"aten::_softmax.default":                         lowerSoftmax(false),
	"aten::_log_softmax.default":                     lowerSoftmax(true),
	"aten::_softmax_backward_data.default":           lowerSoftmaxBackward(false),
	"aten::_log_softmax_backward_data.default":       lowerSoftmaxBackward(true),
	"aten::native_layer_norm.default":                lowerNativeLayerNorm,
	"aten::native_layer_norm_backward.default":       lowerNativeLayerNormBackward,
	"aten::nll_loss_forward.default":                 lowerNLL,
	"aten::nll_loss_backward.default":                lowerNLLBackward,
	"aten::sum.dim_IntList":                          lowerReduce(rSum),
	"aten::sum.default":                              lowerReduce(rSum),
	"aten::mean.dim":                                 lowerReduce(rMean),
	"aten::mean.default":                             lowerReduce(rMean),
	"aten::amax.default":                             lowerReduce(rMax),
	"aten::cat.default":                              lowerCat,
	"aten::mm.default":                               lowerMM,
	"aten::bmm.default":                              lowerMM,
	"aten::addmm.default":                            lowerMM,
	"aten::convolution.default":                      lowerConvolution,
	"aten::convolution_backward.default":             lowerConvolutionBackward,
	"aten::native_batch_norm.default":                lowerBatchNorm,
	"aten::native_batch_norm_backward.default":       lowerBatchNormBackward,
	"aten::max_pool2d_with_indices.default":          lowerMaxPool,
	"aten::max_pool2d_with_indices_backward.default": lowerMaxPoolBackward,
}

// aview is a tensor argument as a kernel addresses it: its operand (the
// tensor's storage) and the view of it.
type aview struct {
	o       operand
	dt      uint32
	shape   []uint64
	strides []uint64
	offset  uint64
}

func (v aview) numel() uint64 {
	n := uint64(1)
	for _, d := range v.shape {
		n *= d
	}
	return n
}

// contiguous says whether the view is row-major with no gaps.
func (v aview) contiguous() bool { return isContiguous(v.shape, v.strides) }

// dtCode maps an IR dtype to a view's element type.
func dtCode(d ir.DType) (uint32, bool) {
	switch d {
	case ir.F32:
		return dtF32, true
	case ir.I32:
		return dtI32, true
	case ir.I64:
		return dtI64, true
	case ir.Bool, ir.U8:
		return dtU8, true
	}
	return 0, false
}

// view returns the operand and view of a call's tensor reference.
func (l *lowerer) view(n *ir.Node, r *ir.TensorRef) (aview, error) {
	if r == nil {
		return aview{}, unsupported("node %q: a tensor argument the call needs is missing (None)", n.ID)
	}
	ti, ok := l.e.g.TensorIndex(r.ID)
	if !ok {
		return aview{}, unsupported("node %q: tensor %q is not in the graph", n.ID, r.ID)
	}
	t := &l.e.g.Tensors[ti]
	dt, ok := dtCode(t.DType)
	if !ok {
		return aview{}, unsupported("node %q: tensor %q is %s: the kernels of imported ops read fp32, int32, int64, bool and uint8", n.ID, r.ID, t.DType)
	}
	if len(r.Shape) > maxRank {
		return aview{}, unsupported("node %q: tensor %q viewed with %d dimensions (at most %d)", n.ID, r.ID, len(r.Shape), maxRank)
	}
	o, err := l.op(r.ID)
	if err != nil {
		return aview{}, err
	}
	if loc := l.e.loc[ti]; loc.offset%4 != 0 {
		return aview{}, unsupported("node %q: tensor %q starts at byte %d, not on a word", n.ID, r.ID, loc.offset)
	}
	o.strides = nil
	v := aview{o: o, dt: dt, shape: r.Shape, strides: r.Strides, offset: r.Offset}
	if v.numel() > math.MaxUint32 {
		return aview{}, unsupported("node %q: tensor %q viewed with %d elements (at most 2^32)", n.ID, r.ID, v.numel())
	}
	return v, nil
}

// viewWordsOf is v's descriptor in params (see atenkernels.go).
func viewWordsOf(v aview) []uint32 {
	w := make([]uint32, viewWords)
	w[0], w[1], w[2] = v.dt, uint32(len(v.shape)), uint32(v.offset)
	for d := range v.shape {
		w[3+d], w[3+maxRank+d] = uint32(v.shape[d]), uint32(v.strides[d])
	}
	return w
}

// alaunch is a launch of an aten kernel over views: threads invocations
// (a byte output y, the last view, takes one invocation per word).
func alaunch(kernel string, threads uint64, vs []aview, extra ...uint32) (Launch, error) {
	ops := make([]operand, len(vs))
	var words []uint32
	for i, v := range vs {
		ops[i] = v.o
		words = append(words, viewWordsOf(v)...)
	}
	x, err := launch(kernel, threads, ops, append(words, extra...)...)
	return x, err
}

// outThreads is the invocations of an element-wise kernel writing y.
func outThreads(y aview) uint64 {
	if y.dt == dtU8 {
		return (y.numel() + 3) / 4
	}
	return y.numel()
}

// Argument readers.

func argT(c *ir.Call, i int) *ir.TensorRef {
	if i < len(c.Args) && c.Args[i].K == "t" {
		return c.Args[i].T
	}
	return nil
}

func argInt(c *ir.Call, i int, def int64) int64 {
	if i < len(c.Args) && c.Args[i].K == "i" {
		return c.Args[i].I
	}
	if i < len(c.Args) && c.Args[i].K == "b" {
		if c.Args[i].B {
			return 1
		}
		return 0
	}
	return def
}

func argInts(c *ir.Call, i int) []int64 {
	if i < len(c.Args) && (c.Args[i].K == "il" || c.Args[i].K == "i") {
		if c.Args[i].K == "i" {
			return []int64{c.Args[i].I}
		}
		return c.Args[i].IL
	}
	return nil
}

func argBool(c *ir.Call, i int) bool {
	return i < len(c.Args) && (c.Args[i].K == "b" && c.Args[i].B || c.Args[i].K == "i" && c.Args[i].I != 0)
}

// argFloat reads a float (or int, or bool) argument.
func argFloat(c *ir.Call, i int, def float64) (float64, error) {
	if i >= len(c.Args) {
		return def, nil
	}
	a := c.Args[i]
	switch a.K {
	case "f":
		return strconv.ParseFloat(a.F, 64)
	case "i":
		return float64(a.I), nil
	case "b":
		if a.B {
			return 1, nil
		}
		return 0, nil
	case "n":
		return def, nil
	}
	return 0, fmt.Errorf("argument %d is %q, not a number", i, a.K)
}

func result(c *ir.Call, i int) *ir.TensorRef {
	if i < len(c.Results) {
		return c.Results[i]
	}
	return nil
}

// dim normalises a possibly negative dimension of a rank-r tensor.
func dim(d int64, r int) (int, error) {
	if d < 0 {
		d += int64(r)
	}
	if d < 0 || d >= int64(max(r, 1)) {
		return 0, fmt.Errorf("dimension %d of a rank-%d tensor", d, r)
	}
	return int(d), nil
}

// broadcast returns v seen with shape (numpy broadcasting: aligned
// right, size-1 or missing dimensions repeated by a zero stride).
func broadcast(v aview, shape []uint64) (aview, bool) {
	if len(v.shape) > len(shape) {
		return v, false
	}
	b := v
	b.shape, b.strides = slices.Clone(shape), make([]uint64, len(shape))
	k := len(shape) - len(v.shape)
	for d := range shape {
		if d < k {
			continue
		}
		switch vs := v.shape[d-k]; {
		case vs == shape[d]:
			b.strides[d] = v.strides[d-k]
		case vs == 1:
		default:
			return v, false
		}
	}
	return b, true
}

func failf(n *ir.Node, c *ir.Call, format string, args ...any) error {
	return unsupported("node %q (%s): %s", n.ID, c.Target, fmt.Sprintf(format, args...))
}

// views resolves a call's tensor references (arguments by index, then
// results by index, marked with a leading "r").
func (l *lowerer) views(n *ir.Node, c *ir.Call, refs ...string) ([]aview, error) {
	out := make([]aview, len(refs))
	for i, r := range refs {
		var ref *ir.TensorRef
		if rest, ok := strings.CutPrefix(r, "r"); ok {
			k, _ := strconv.Atoi(rest)
			ref = result(c, k)
		} else {
			k, _ := strconv.Atoi(r)
			ref = argT(c, k)
		}
		v, err := l.view(n, ref)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func lowerUnary(code uint32) func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	return func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
		v, err := l.views(n, c, "0", "r0")
		if err != nil {
			return nil, err
		}
		return unaryLaunch(n, c, code, v[0], v[1], 0, 0)
	}
}

func unaryLaunch(n *ir.Node, c *ir.Call, code uint32, x, y aview, a, b float32) ([]Launch, error) {
	x, ok := broadcast(x, y.shape)
	if !ok {
		return nil, failf(n, c, "%v does not broadcast to %v", x.shape, y.shape)
	}
	x2, err := alaunch("a_unary", outThreads(y), []aview{x, y}, u32(y.numel()), code, f32(a), f32(b))
	return []Launch{x2}, err
}

func lowerGelu(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	code := uint32(uGeluErf)
	if c.Args[1].S == "tanh" {
		code = uGeluTanh
	}
	return lowerUnary(code)(l, n, c)
}

func lowerGeluBwd(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	code := uint32(bGeluErfBwd)
	if len(c.Args) > 2 && c.Args[2].S == "tanh" {
		code = bGeluTanhBwd
	}
	return lowerBinary(code)(l, n, c)
}

// lowerBinary lowers y = op(x, z): z a tensor (broadcast) or a number;
// the third argument is alpha (add, sub), the threshold
// (threshold_backward) or the fill value (masked_fill).
func lowerBinary(code uint32) func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	return func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
		x, err := l.view(n, argT(c, 0))
		if err != nil {
			return nil, err
		}
		y, err := l.view(n, result(c, 0))
		if err != nil {
			return nil, err
		}
		// The third argument: alpha (add, sub, rsub), the threshold
		// (threshold_backward) or the fill value (masked_fill).
		a := 1.0
		switch code {
		case bAdd, bSub, bRsub, bMaskedFill, bThresholdBwd:
			def := 1.0
			if code == bMaskedFill || code == bThresholdBwd {
				def = 0
			}
			var err error
			if a, err = argFloat(c, 2, def); err != nil {
				return nil, failf(n, c, "%v", err)
			}
		}
		if code == bRsub { // rsub(x, other, alpha) = other − alpha·x
			o, err := argFloat(c, 1, 0)
			if err != nil {
				return nil, failf(n, c, "%v", err)
			}
			return unaryLaunch(n, c, uAffine, x, y, float32(-a), float32(o))
		}
		if argT(c, 1) == nil { // a number
			z, err := argFloat(c, 1, 0)
			if err != nil {
				return nil, failf(n, c, "%v", err)
			}
			switch code {
			case bAdd:
				return unaryLaunch(n, c, uAffine, x, y, 1, float32(a*z))
			case bSub:
				return unaryLaunch(n, c, uAffine, x, y, 1, float32(-a*z))
			case bMul:
				return unaryLaunch(n, c, uAffine, x, y, float32(z), 0)
			case bDiv:
				// x / z, as PyTorch divides (not x · (1/z)).
				return divScalar(n, c, x, y, float32(z))
			}
			return nil, failf(n, c, "a number as the second operand")
		}
		z, err := l.view(n, argT(c, 1))
		if err != nil {
			return nil, err
		}
		x, ok1 := broadcast(x, y.shape)
		z, ok2 := broadcast(z, y.shape)
		if !ok1 || !ok2 {
			return nil, failf(n, c, "%v and %v do not broadcast to %v", x.shape, z.shape, y.shape)
		}
		x2, err := alaunch("a_binary", outThreads(y), []aview{x, z, y}, u32(y.numel()), code, f32(float32(a)))
		return []Launch{x2}, err
	}
}

// divScalar lowers y = x / z for a number z, divided as PyTorch divides
// (not multiplied by 1/z).
func divScalar(n *ir.Node, c *ir.Call, x, y aview, z float32) ([]Launch, error) {
	x, ok := broadcast(x, y.shape)
	if !ok {
		return nil, failf(n, c, "%v does not broadcast to %v", x.shape, y.shape)
	}
	x2, err := alaunch("a_div_scalar", outThreads(y), []aview{x, y}, u32(y.numel()), f32(z))
	return []Launch{x2}, err
}

func lowerCopy(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// copy_(self, src): self's storage takes src.
	src, err := l.view(n, argT(c, 1))
	if err != nil {
		return nil, err
	}
	y, err := l.view(n, result(c, 0))
	if err != nil {
		return nil, err
	}
	return unaryLaunch(n, c, uCopy, src, y, 0, 0)
}

func lowerFill(value float32) func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	return func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
		y, err := l.view(n, result(c, 0))
		if err != nil {
			return nil, err
		}
		x, err := alaunch("a_fill", outThreads(y), []aview{y}, u32(y.numel()), f32(value))
		return []Launch{x}, err
	}
}

func lowerFull(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	v, err := argFloat(c, 1, 0)
	if err != nil {
		return nil, failf(n, c, "%v", err)
	}
	return lowerFill(float32(v))(l, n, c)
}

func lowerArange(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	y, err := l.view(n, result(c, 0))
	if err != nil {
		return nil, err
	}
	start, step := 0.0, 1.0
	if c.Target != "aten::arange.default" {
		if start, err = argFloat(c, 0, 0); err != nil {
			return nil, failf(n, c, "%v", err)
		}
	}
	if c.Target == "aten::arange.start_step" {
		if step, err = argFloat(c, 2, 1); err != nil {
			return nil, failf(n, c, "%v", err)
		}
	}
	x, err := alaunch("a_arange", outThreads(y), []aview{y}, u32(y.numel()), f32(float32(start)), f32(float32(step)))
	return []Launch{x}, err
}

func lowerTriu(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	v, err := l.views(n, c, "0", "r0")
	if err != nil {
		return nil, err
	}
	if len(v[1].shape) < 2 {
		return nil, failf(n, c, "a tensor of rank %d", len(v[1].shape))
	}
	lower := uint32(0)
	if c.Target == "aten::tril.default" {
		lower = 1
	}
	x, err := alaunch("a_triu", outThreads(v[1]), v, u32(v[1].numel()), uint32(int32(argInt(c, 1, 0))), lower)
	return []Launch{x}, err
}

func lowerBitwiseNot(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	v, err := l.views(n, c, "0", "r0")
	if err != nil {
		return nil, err
	}
	if v[0].dt != dtU8 || v[1].dt != dtU8 {
		return nil, failf(n, c, "bitwise_not of integers (booleans only)")
	}
	return unaryLaunch(n, c, uNot, v[0], v[1], 0, 0)
}

// lowerBernoulli lowers bernoulli_(self, p): each element 1 with
// probability p, else 0, drawn from (the job's seed, the step, the node,
// the element): a dropout mask that every rank and every rerun of the
// step draws alike. The seed and step words are set at every step.
func lowerBernoulli(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	y, err := l.view(n, result(c, 0))
	if err != nil {
		return nil, err
	}
	p, err := argFloat(c, 1, 0.5)
	if err != nil || argT(c, 1) != nil {
		return nil, failf(n, c, "a probability that is not a number")
	}
	x, err := alaunch("a_bernoulli", outThreads(y), []aview{y}, u32(y.numel()), f32(float32(p)), hash32(uint32(fnv64(n.ID))), 0, 0, 0, 0)
	return []Launch{x}, err
}

// lowerSelectBackward lowers select_backward(grad, input_sizes, dim,
// index): zeros of input_sizes, grad at index along dim.
func lowerSelectBackward(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	return l.scatterBackward(n, c, func(y aview, d int) (aview, error) {
		idx := argInt(c, 3, 0)
		if idx < 0 {
			idx += int64(y.shape[d])
		}
		part := y
		part.offset += uint64(idx) * y.strides[d]
		part.shape = slices.Delete(slices.Clone(y.shape), d, d+1)
		part.strides = slices.Delete(slices.Clone(y.strides), d, d+1)
		return part, nil
	})
}

// lowerSliceBackward lowers slice_backward(grad, input_sizes, dim, start,
// end, step): zeros of input_sizes, grad in the slice.
func lowerSliceBackward(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	return l.scatterBackward(n, c, func(y aview, d int) (aview, error) {
		start, step := argInt(c, 3, 0), argInt(c, 5, 1)
		if start < 0 {
			start += int64(y.shape[d])
		}
		if start < 0 || step < 1 {
			return y, failf(n, c, "start %d, step %d", start, step)
		}
		g, err := l.view(n, argT(c, 0))
		if err != nil {
			return y, err
		}
		part := y
		part.offset += uint64(start) * y.strides[d]
		part.shape = slices.Clone(y.shape)
		part.shape[d] = g.shape[d]
		part.strides = slices.Clone(y.strides)
		part.strides[d] *= uint64(step)
		return part, nil
	})
}

// scatterBackward fills the result with zeros and copies the gradient
// (argument 0) into the view of it part returns (dim: argument 2).
func (l *lowerer) scatterBackward(n *ir.Node, c *ir.Call, part func(y aview, d int) (aview, error)) ([]Launch, error) {
	v, err := l.views(n, c, "0", "r0")
	if err != nil {
		return nil, err
	}
	g, y := v[0], v[1]
	d, err := dim(argInt(c, 2, 0), len(y.shape))
	if err != nil {
		return nil, failf(n, c, "%v", err)
	}
	p, err := part(y, d)
	if err != nil {
		return nil, err
	}
	if p.numel() != g.numel() {
		return nil, failf(n, c, "a gradient %v into %v", g.shape, p.shape)
	}
	z, err := alaunch("a_fill", outThreads(y), []aview{y}, u32(y.numel()), f32(0))
	if err != nil {
		return nil, err
	}
	cp, err := unaryLaunch(n, c, uCopy, g, p, 0, 0)
	return append([]Launch{z}, cp...), err
}

func lowerSoftmax(logOut bool) func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	return func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
		v, err := l.views(n, c, "0", "r0")
		if err != nil {
			return nil, err
		}
		d, err := dim(argInt(c, 1, -1), len(v[0].shape))
		if err != nil {
			return nil, failf(n, c, "%v", err)
		}
		rows := v[0].numel() / max(v[0].shape[d], 1)
		lg := uint32(0)
		if logOut {
			lg = 1
		}
		x, err := withIters(alaunch("a_softmax", rows, v, u32(rows), uint32(d), lg))(3 * v[0].shape[d])
		return []Launch{x}, err
	}
}

func lowerSoftmaxBackward(logOut bool) func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	return func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
		v, err := l.views(n, c, "0", "1", "r0")
		if err != nil {
			return nil, err
		}
		d, err := dim(argInt(c, 2, -1), len(v[0].shape))
		if err != nil {
			return nil, failf(n, c, "%v", err)
		}
		rows := v[0].numel() / max(v[0].shape[d], 1)
		lg := uint32(0)
		if logOut {
			lg = 1
		}
		x, err := withIters(alaunch("a_softmax_bwd", rows, v, u32(rows), uint32(d), lg))(2 * v[0].shape[d])
		return []Launch{x}, err
	}
}

// scratch is a workspace view of n fp32 elements at word off.
func (l *lowerer) scratch(off, n uint64) aview {
	o := l.workspace(off + n)
	o.word = off
	return aview{o: o, dt: dtF32, shape: []uint64{n}, strides: []uint64{1}}
}

func lowerNativeLayerNorm(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	x, err := l.view(n, argT(c, 0))
	if err != nil {
		return nil, err
	}
	h := uint64(1)
	for _, d := range argInts(c, 1) {
		h *= uint64(d)
	}
	rows := x.numel() / max(h, 1)
	eps, err := argFloat(c, 4, 1e-5)
	if err != nil {
		return nil, failf(n, c, "%v", err)
	}
	y, err := l.view(n, result(c, 0))
	if err != nil {
		return nil, err
	}
	mean, rstd := l.scratch(0, rows), l.scratch(rows, rows)
	if r := result(c, 1); r != nil {
		if mean, err = l.view(n, r); err != nil {
			return nil, err
		}
	}
	if r := result(c, 2); r != nil {
		if rstd, err = l.view(n, r); err != nil {
			return nil, err
		}
	}
	w, b := y, y
	hasw, hasb := uint32(0), uint32(0)
	if argT(c, 2) != nil {
		if w, err = l.view(n, argT(c, 2)); err != nil {
			return nil, err
		}
		hasw = 1
	}
	if argT(c, 3) != nil {
		if b, err = l.view(n, argT(c, 3)); err != nil {
			return nil, err
		}
		hasb = 1
	}
	x2, err := withIters(alaunch("a_layernorm", rows, []aview{x, w, b, y, mean, rstd}, u32(rows), u32(h), f32(float32(eps)), hasw, hasb))(3 * h)
	return []Launch{x2}, err
}

func lowerNativeLayerNormBackward(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
	v, err := l.views(n, c, "0", "1", "3", "4")
	if err != nil {
		return nil, err
	}
	dy, x, mean, rstd := v[0], v[1], v[2], v[3]
	h := uint64(1)
	for _, d := range argInts(c, 2) {
		h *= uint64(d)
	}
	rows := x.numel() / max(h, 1)
	var out []Launch
	w, hasw := dy, uint32(0)
	if argT(c, 5) != nil {
		if w, err = l.view(n, argT(c, 5)); err != nil {
			return nil, err
		}
		hasw = 1
	}
	if r := result(c, 0); r != nil {
		dx, err := l.view(n, r)
		if err != nil {
			return nil, err
		}
		x2, err := withIters(alaunch("a_ln_bwd_x", rows, []aview{dy, x, mean, rstd, w, dx}, u32(rows), u32(h), hasw))(2 * h)
		if err != nil {
			return nil, err
		}
		out = append(out, x2)
	}
	dw, db := dy, dy
	hw, hb := uint32(0), uint32(0)
	if r := result(c, 1); r != nil {
		if dw, err = l.view(n, r); err != nil {
			return nil, err
		}
		hw = 1
	}
	if r := result(c, 2); r != nil {
		if db, err = l.view(n, r); err != nil {
			return nil, err
		}
		hb = 1
	}
	if hw+hb > 0 {
		x2, err := withIters(alaunch("a_ln_bwd_wb", h, []aview{dy, x, mean, rstd, dw, db}, u32(rows), u32(h), hw, hb))(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, x2)
	}
	return out, nil
}

func lowerAtenEmbedding(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	v, err := l.views(n, c, "0", "1", "r0")
	if err != nil {
		return nil, err
	}
	if len(v[0].shape) != 2 {
		return nil, failf(n, c, "a table of rank %d", len(v[0].shape))
	}
	x, err := alaunch("a_embedding", v[2].numel(), v, u32(v[2].numel()), u32(v[0].shape[1]))
	return []Launch{x}, err
}

func lowerEmbeddingDenseBackward(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
	if argBool(c, 4) {
		return nil, failf(n, c, "scale_grad_by_freq is not supported")
	}
	v, err := l.views(n, c, "0", "1", "r0")
	if err != nil {
		return nil, err
	}
	dt := v[2]
	if len(dt.shape) != 2 {
		return nil, failf(n, c, "a gradient of rank %d", len(dt.shape))
	}
	vocab, h := dt.shape[0], dt.shape[1]
	rows := v[1].numel()
	x, err := withIters(alaunch("a_emb_bwd", h, v, u32(rows), u32(h), u32(vocab), uint32(int32(argInt(c, 3, -1)))))(vocab + rows)
	return []Launch{x}, err
}

func lowerNLL(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (self, target, weight, reduction, ignore_index) → (output, total_weight)
	if argT(c, 2) != nil {
		return nil, failf(n, c, "class weights are not supported")
	}
	v, err := l.views(n, c, "0", "1", "r0")
	if err != nil {
		return nil, err
	}
	tot := l.scratch(0, 1)
	if r := result(c, 1); r != nil {
		if tot, err = l.view(n, r); err != nil {
			return nil, err
		}
	}
	lp := v[0]
	if len(lp.shape) != 2 {
		return nil, failf(n, c, "log-probabilities of rank %d (want [rows, classes])", len(lp.shape))
	}
	red := argInt(c, 3, 1)
	if red != 1 && red != 2 {
		return nil, failf(n, c, "reduction %d (mean and sum are supported)", red)
	}
	x, err := withIters(alaunch("a_nll", 1, []aview{lp, v[1], v[2], tot}, u32(lp.shape[0]), u32(lp.shape[1]), uint32(int32(argInt(c, 4, -100))), uint32(red)))(lp.shape[0])
	return []Launch{x}, err
}

func lowerNLLBackward(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (grad_output, self, target, weight, reduction, ignore_index, total_weight)
	if argT(c, 3) != nil {
		return nil, failf(n, c, "class weights are not supported")
	}
	v, err := l.views(n, c, "0", "2", "6", "r0")
	if err != nil {
		return nil, err
	}
	gin := v[3]
	if len(gin.shape) != 2 {
		return nil, failf(n, c, "a gradient of rank %d", len(gin.shape))
	}
	red := argInt(c, 4, 1)
	if red != 1 && red != 2 {
		return nil, failf(n, c, "reduction %d", red)
	}
	x, err := alaunch("a_nll_bwd", gin.numel(), v, u32(gin.shape[0]), u32(gin.shape[1]), uint32(int32(argInt(c, 5, -100))), uint32(red))
	return []Launch{x}, err
}

func lowerReduce(code uint32) func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	return func(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
		v, err := l.views(n, c, "0", "r0")
		if err != nil {
			return nil, err
		}
		x, y := v[0], v[1]
		var mask uint32
		dims := argInts(c, 1)
		if strings.HasSuffix(c.Target, ".default") && code != rMax || len(dims) == 0 {
			mask = 1<<len(x.shape) - 1 // every dimension
		}
		for _, d := range dims {
			dd, err := dim(d, len(x.shape))
			if err != nil {
				return nil, failf(n, c, "%v", err)
			}
			mask |= 1 << dd
		}
		red := uint64(1)
		for d := range x.shape {
			if mask&(1<<d) != 0 {
				red *= x.shape[d]
			}
		}
		if y.numel()*red != x.numel() {
			return nil, failf(n, c, "%v reduced over %b is not %v", x.shape, mask, y.shape)
		}
		x2, err := withIters(alaunch("a_reduce", y.numel(), v, u32(y.numel()), mask, code, f32(1)))(red)
		return []Launch{x2}, err
	}
}

func lowerCat(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	y, err := l.view(n, result(c, 0))
	if err != nil {
		return nil, err
	}
	d, err := dim(argInt(c, 1, 0), len(y.shape))
	if err != nil {
		return nil, failf(n, c, "%v", err)
	}
	var out []Launch
	at := uint64(0)
	for _, r := range c.Args[0].TL {
		if r == nil {
			continue
		}
		x, err := l.view(n, r)
		if err != nil {
			return nil, err
		}
		if len(x.shape) != len(y.shape) {
			return nil, failf(n, c, "part %v of rank %d into %v", x.shape, len(x.shape), y.shape)
		}
		part := y
		part.shape = slices.Clone(y.shape)
		part.shape[d] = x.shape[d]
		part.offset = y.offset + at*y.strides[d]
		at += x.shape[d]
		ls, err := unaryLaunch(n, c, uCopy, x, part, 0, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	if at != y.shape[d] {
		return nil, failf(n, c, "parts of %d along dimension %d into %d", at, d, y.shape[d])
	}
	return out, nil
}

// lowerMM lowers mm, bmm and addmm onto the matmul kernel: one launch
// (chunked over the inner dimension) per batch element, every operand a
// strided 2-D view, the output contiguous; addmm then adds its bias.
func lowerMM(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	ai, bi := 0, 1
	if c.Target == "aten::addmm.default" {
		ai, bi = 1, 2
		for i, name := range []string{"beta", "alpha"} {
			if f, err := argFloat(c, 3+i, 1); err != nil || f != 1 {
				return nil, failf(n, c, "%s %v (only 1 is supported)", name, f)
			}
		}
	}
	a, err := l.view(n, argT(c, ai))
	if err != nil {
		return nil, err
	}
	b, err := l.view(n, argT(c, bi))
	if err != nil {
		return nil, err
	}
	y, err := l.view(n, result(c, 0))
	if err != nil {
		return nil, err
	}
	if a.dt != dtF32 || b.dt != dtF32 || y.dt != dtF32 || !y.contiguous() {
		return nil, failf(n, c, "matmul of fp32 operands into a contiguous output only")
	}
	batch := uint64(1)
	if len(a.shape) == 3 {
		batch = a.shape[0]
		if len(b.shape) != 3 || b.shape[0] != batch || len(y.shape) != 3 {
			return nil, failf(n, c, "bmm of %v and %v", a.shape, b.shape)
		}
	} else if len(a.shape) != 2 || len(b.shape) != 2 {
		return nil, failf(n, c, "mm of %v and %v", a.shape, b.shape)
	}
	r := len(a.shape)
	M, K, N := a.shape[r-2], a.shape[r-1], b.shape[r-1]
	if b.shape[r-2] != K || y.numel() != batch*M*N {
		return nil, failf(n, c, "%v × %v into %v", a.shape, b.shape, y.shape)
	}
	var out []Launch
	for i := range batch {
		var ea, eb uint64
		if r == 3 {
			ea, eb = i*a.strides[0], i*b.strides[0]
		}
		out, err = mm(out, at(a, ea), at(b, eb), at(y, i*M*N), M, N, K, a.strides[r-2], a.strides[r-1], b.strides[r-2], b.strides[r-1])
		if err != nil {
			return nil, err
		}
	}
	if c.Target == "aten::addmm.default" {
		bias, err := l.view(n, argT(c, 0))
		if err != nil {
			return nil, err
		}
		bias, ok := broadcast(bias, y.shape)
		if !ok {
			return nil, failf(n, c, "bias %v against %v", bias.shape, y.shape)
		}
		x, err := alaunch("a_binary", y.numel(), []aview{y, bias, y}, u32(y.numel()), bAdd, f32(1))
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// mm appends the launches of y[M,N] = a[M,K]·b[K,N] (element (i,r) of a
// at word i·as0 + r·as1 of ao, of b at r·bs0 + j·bs1 of bo; y
// contiguous at yo), chunked over K.
func mm(out []Launch, ao, bo, yo operand, M, N, K, as0, as1, bs0, bs1 uint64) ([]Launch, error) {
	tiles := ((M + matmulTile - 1) / matmulTile) * ((N + matmulTile - 1) / matmulTile)
	o := []operand{ao, bo, yo}
	return chunked(out, K, func(r0, r1 uint64) (Launch, error) {
		return grouped(launch("matmul", 0, o, u32(M), u32(N), u32(K), u32(as0), u32(as1), u32(bs0), u32(bs1), u32(r0), u32(r1)))(tiles, r1-r0+4+4*4)
	})
}

// at is v's operand moved to its element e (fp32 views).
func at(v aview, e uint64) operand {
	o := v.o
	o.word += v.offset + e
	return o
}

// convGeometry reads a 2-D convolution's geometry from its arguments
// (stride, padding, dilation at si, si+1, si+2; groups at gi).
func convGeometry(n *ir.Node, c *ir.Call, x, w, y aview, si, gi int) (conv, error) {
	if len(x.shape) != 4 || len(w.shape) != 4 || len(y.shape) != 4 {
		return conv{}, failf(n, c, "a convolution of %v by %v: 2-D (NCHW) only", x.shape, w.shape)
	}
	pair := func(i int, def int64) (uint32, uint32) {
		v := argInts(c, i)
		switch len(v) {
		case 0:
			return uint32(def), uint32(def)
		case 1:
			return uint32(v[0]), uint32(v[0])
		}
		return uint32(v[0]), uint32(v[1])
	}
	g := conv{N: u32(x.shape[0]), C: u32(x.shape[1]), H: u32(x.shape[2]), W: u32(x.shape[3]), Co: u32(w.shape[0]), KH: u32(w.shape[2]), KW: u32(w.shape[3]),
		Ho: u32(y.shape[2]), Wo: u32(y.shape[3]), G: uint32(argInt(c, gi, 1))}
	g.SH, g.SW = pair(si, 1)
	g.PH, g.PW = pair(si+1, 0)
	g.DH, g.DW = pair(si+2, 1)
	if g.G == 0 || g.C%g.G != 0 || g.Co%g.G != 0 || uint64(g.C/g.G) != w.shape[1] || g.SH == 0 || g.SW == 0 {
		return conv{}, failf(n, c, "groups %d for %d input and %d output channels, weight %v", g.G, g.C, g.Co, w.shape)
	}
	return g, nil
}

func lowerConvolution(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
	if argBool(c, 6) {
		return nil, failf(n, c, "transposed convolutions are not supported")
	}
	v, err := l.views(n, c, "0", "1", "r0")
	if err != nil {
		return nil, err
	}
	g, err := convGeometry(n, c, v[0], v[1], v[2], 3, 8)
	if err != nil {
		return nil, err
	}
	out, err := l.convForward(g, v[0], v[1], v[2])
	if err != nil {
		return nil, err
	}
	if argT(c, 2) != nil {
		bias, err := l.view(n, argT(c, 2))
		if err != nil {
			return nil, err
		}
		// bias [Co] against [N, Co, Ho, Wo].
		y := v[2]
		bb := bias
		bb.shape, bb.strides = slices.Clone(y.shape), []uint64{0, bias.strides[0], 0, 0}
		x, err := alaunch("a_binary", y.numel(), []aview{y, bb, y}, u32(y.numel()), bAdd, f32(1))
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// matmulReady says whether a convolution's tensors suit the matmul
// path: fp32, weight and output contiguous, the input and output
// gradient's spatial dimensions contiguous.
func matmulReady(views ...aview) bool {
	for _, v := range views {
		if v.dt != dtF32 || len(v.shape) != 4 || v.strides[3] != 1 || v.strides[2] != v.shape[3] {
			return false
		}
	}
	return true
}

// convForward is y = conv(x, w): per group, the columns of every image
// (im2col, [cin·KH·KW, N·P] in the workspace) times the group's weight
// [cout, cin·KH·KW] on the tiled matmul, into [cout, N·P] and copied
// into y's layout; or one invocation per output element, for grouped
// convolutions (whose groups are a few channels: a depthwise one loops
// over KH·KW products, where per-group matmuls would be thousands of
// launches) and for layouts the matmul path does not take.
func (l *lowerer) convForward(g conv, x, w, y aview) ([]Launch, error) {
	if g.G > 1 || !matmulReady(x, w, y) || !w.contiguous() || !y.contiguous() {
		x2, err := withIters(alaunch("a_conv", y.numel(), []aview{x, w, y}, g.words()...))(uint64(g.C/g.G) * uint64(g.KH*g.KW))
		return []Launch{x2}, err
	}
	cin, cout := uint64(g.C/g.G), uint64(g.Co/g.G)
	kc, P, N := cin*uint64(g.KH*g.KW), uint64(g.Ho*g.Wo), uint64(g.N)
	cols, yp := l.scratch(0, kc*N*P), l.scratch(kc*N*P, cout*N*P)
	var out []Launch
	for gr := range uint64(g.G) {
		ic, err := alaunch("a_im2col", kc*N*P, []aview{x, cols}, append(g.words(), 0, uint32(N), uint32(gr))...)
		if err != nil {
			return nil, err
		}
		out = append(out, ic)
		if out, err = mm(out, at(w, gr*cout*kc), at(cols, 0), at(yp, 0), cout, N*P, kc, kc, 1, N*P, 1); err != nil {
			return nil, err
		}
		cp, err := permuteGroup(yp, y, gr, cout, N, P, true)
		if err != nil {
			return nil, err
		}
		out = append(out, cp)
	}
	return out, nil
}

// permuteGroup copies between a workspace [cout, N, P] and group gr's
// channels of an [N, C, P] tensor t: into t (toT), or out of it.
func permuteGroup(ws, t aview, gr, cout, N, P uint64, toT bool) (Launch, error) {
	tv := t
	tv.shape = []uint64{cout, N, P}
	tv.strides = []uint64{t.strides[1], t.strides[0], 1}
	tv.offset = t.offset + gr*cout*t.strides[1]
	wv := ws
	wv.shape, wv.strides = []uint64{cout, N, P}, []uint64{N * P, P, 1}
	src, dst := wv, tv
	if !toT {
		src, dst = tv, wv
	}
	return alaunch("a_unary", cout*N*P, []aview{src, dst}, u32(cout*N*P), uCopy, 0, 0)
}

// convBackwardInput is dx = conv's input gradient: per group, the
// columns' gradient wᵀ·dy for every image ([cin·KH·KW, N·P], tiled
// matmul over dy's group channels copied to [cout, N·P]), gathered back
// onto each image (col2im).
func (l *lowerer) convBackwardInput(g conv, dy, w, dx aview) ([]Launch, error) {
	if g.G > 1 || !matmulReady(dy, w, dx) || !w.contiguous() {
		x2, err := withIters(alaunch("a_conv_bwd_x", dx.numel(), []aview{dy, w, dx}, g.words()...))(uint64(g.Co/g.G) * uint64(g.KH*g.KW))
		return []Launch{x2}, err
	}
	cin, cout := uint64(g.C/g.G), uint64(g.Co/g.G)
	kc, P, N := cin*uint64(g.KH*g.KW), uint64(g.Ho*g.Wo), uint64(g.N)
	dcols, dyp := l.scratch(0, kc*N*P), l.scratch(kc*N*P, cout*N*P)
	var out []Launch
	for gr := range uint64(g.G) {
		cp, err := permuteGroup(dyp, dy, gr, cout, N, P, false)
		if err != nil {
			return nil, err
		}
		out = append(out, cp)
		if out, err = mm(out, at(w, gr*cout*kc), at(dyp, 0), at(dcols, 0), kc, N*P, cout, 1, kc, N*P, 1); err != nil {
			return nil, err
		}
		for n := range N {
			ci, err := withIters(alaunch("a_col2im", cin*uint64(g.H*g.W), []aview{dcols, dx}, append(g.words(), uint32(n), uint32(N), uint32(gr))...))(uint64(g.KH * g.KW))
			if err != nil {
				return nil, err
			}
			out = append(out, ci)
		}
	}
	return out, nil
}

// convBackwardWeight is dw = conv's weight gradient: per group, dy's
// channels of the group as [cout, N·P] (copied in the workspace) times
// the columns of every image [cin·KH·KW, N·P] transposed, on the tiled
// matmul: each weight's sum runs over images, then positions.
func (l *lowerer) convBackwardWeight(g conv, dy, x, dw aview) ([]Launch, error) {
	if g.G > 1 || !matmulReady(dy, x, dw) || !dw.contiguous() {
		// Chunked over (image, output row) pairs, each launch adding
		// onto the last one's sums: the same order as one launch.
		per := max(rowChunk/uint64(g.Wo), 1)
		var out []Launch
		for r0 := uint64(0); r0 < uint64(g.N*g.Ho); r0 += per {
			r1 := min(r0+per, uint64(g.N*g.Ho))
			x2, err := withIters(alaunch("a_conv_bwd_w", dw.numel(), []aview{dy, x, dw}, append(g.words(), uint32(r0), uint32(r1))...))((r1 - r0) * uint64(g.Wo))
			if err != nil {
				return nil, err
			}
			out = append(out, x2)
		}
		return out, nil
	}
	cin, cout := uint64(g.C/g.G), uint64(g.Co/g.G)
	kc, P, N := cin*uint64(g.KH*g.KW), uint64(g.Ho*g.Wo), uint64(g.N)
	cols, dyp := l.scratch(0, kc*N*P), l.scratch(kc*N*P, cout*N*P)
	var out []Launch
	for gr := range uint64(g.G) {
		ic, err := alaunch("a_im2col", kc*N*P, []aview{x, cols}, append(g.words(), 0, uint32(N), uint32(gr))...)
		if err != nil {
			return nil, err
		}
		cp, err := permuteGroup(dyp, dy, gr, cout, N, P, false)
		if err != nil {
			return nil, err
		}
		out = append(out, ic, cp)
		if out, err = mm(out, at(dyp, 0), at(cols, 0), at(dw, gr*cout*kc), cout, kc, N*P, N*P, 1, 1, N*P); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func lowerConvolutionBackward(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (grad_output, input, weight, bias_sizes, stride, padding, dilation,
	// transposed, output_padding, groups, output_mask) → (dx, dw, db)
	if argBool(c, 7) {
		return nil, failf(n, c, "transposed convolutions are not supported")
	}
	v, err := l.views(n, c, "0", "1", "2")
	if err != nil {
		return nil, err
	}
	dy, x, w := v[0], v[1], v[2]
	g, err := convGeometry(n, c, x, w, dy, 4, 9)
	if err != nil {
		return nil, err
	}
	var out []Launch
	if r := result(c, 0); r != nil {
		dx, err := l.view(n, r)
		if err != nil {
			return nil, err
		}
		ls, err := l.convBackwardInput(g, dy, w, dx)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	if r := result(c, 1); r != nil {
		dw, err := l.view(n, r)
		if err != nil {
			return nil, err
		}
		ls, err := l.convBackwardWeight(g, dy, x, dw)
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	if r := result(c, 2); r != nil {
		db, err := l.view(n, r)
		if err != nil {
			return nil, err
		}
		ln, err := withIters(alaunch("a_reduce", db.numel(), []aview{dy, db}, u32(db.numel()), 1|1<<2|1<<3, rSum, f32(1)))(uint64(g.N) * uint64(g.Ho*g.Wo))
		if err != nil {
			return nil, err
		}
		out = append(out, ln)
	}
	return out, nil
}

func lowerBatchNorm(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (input, weight, bias, running_mean, running_var, training, momentum, eps)
	// → (out, save_mean, save_invstd); training updates the running
	// statistics in place.
	if !argBool(c, 5) {
		return nil, failf(n, c, "batch norm in eval mode is not supported yet (training mode is)")
	}
	x, err := l.view(n, argT(c, 0))
	if err != nil {
		return nil, err
	}
	y, err := l.view(n, result(c, 0))
	if err != nil {
		return nil, err
	}
	if len(x.shape) < 2 {
		return nil, failf(n, c, "an input of rank %d", len(x.shape))
	}
	ch := x.shape[1]
	mom, err1 := argFloat(c, 6, 0.1)
	eps, err2 := argFloat(c, 7, 1e-5)
	if err1 != nil || err2 != nil {
		return nil, failf(n, c, "momentum or eps is not a number")
	}
	mean, inv := l.scratch(0, ch), l.scratch(ch, ch)
	if r := result(c, 1); r != nil {
		if mean, err = l.view(n, r); err != nil {
			return nil, err
		}
	}
	if r := result(c, 2); r != nil {
		if inv, err = l.view(n, r); err != nil {
			return nil, err
		}
	}
	rm, rv, update := mean, inv, uint32(0)
	if argT(c, 3) != nil && argT(c, 4) != nil {
		if rm, err = l.view(n, argT(c, 3)); err != nil {
			return nil, err
		}
		if rv, err = l.view(n, argT(c, 4)); err != nil {
			return nil, err
		}
		update = 1
	}
	count := x.numel() / max(ch, 1)
	s, err := withIters(alaunch("a_bn_stats", ch, []aview{x, mean, inv, rm, rv}, u32(ch), f32(float32(eps)), f32(float32(mom)), update))(2 * count)
	if err != nil {
		return nil, err
	}
	w, b := x, x
	hasw, hasb := uint32(0), uint32(0)
	if argT(c, 1) != nil {
		if w, err = l.view(n, argT(c, 1)); err != nil {
			return nil, err
		}
		hasw = 1
	}
	if argT(c, 2) != nil {
		if b, err = l.view(n, argT(c, 2)); err != nil {
			return nil, err
		}
		hasb = 1
	}
	a, err := alaunch("a_bn_apply", y.numel(), []aview{x, mean, inv, w, b, y}, u32(y.numel()), hasw, hasb)
	return []Launch{s, a}, err
}

func lowerBatchNormBackward(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (grad_out, input, weight, running_mean, running_var, save_mean,
	// save_invstd, train, eps, output_mask) → (dx, dw, db)
	if !argBool(c, 7) {
		return nil, failf(n, c, "batch norm backward in eval mode is not supported yet")
	}
	v, err := l.views(n, c, "0", "1", "5", "6")
	if err != nil {
		return nil, err
	}
	dy, x, mean, inv := v[0], v[1], v[2], v[3]
	ch := x.shape[1]
	count := x.numel() / max(ch, 1)
	sdy, sdyx := l.scratch(0, ch), l.scratch(ch, ch)
	if r := result(c, 2); r != nil {
		if sdy, err = l.view(n, r); err != nil {
			return nil, err
		}
	}
	if r := result(c, 1); r != nil {
		if sdyx, err = l.view(n, r); err != nil {
			return nil, err
		}
	}
	s, err := withIters(alaunch("a_bn_bwd_sums", ch, []aview{dy, x, mean, inv, sdy, sdyx}, u32(ch)))(count)
	if err != nil {
		return nil, err
	}
	out := []Launch{s}
	if r := result(c, 0); r != nil {
		dx, err := l.view(n, r)
		if err != nil {
			return nil, err
		}
		w, hasw := x, uint32(0)
		if argT(c, 2) != nil {
			if w, err = l.view(n, argT(c, 2)); err != nil {
				return nil, err
			}
			hasw = 1
		}
		a, err := alaunch("a_bn_bwd_x", dx.numel(), []aview{dy, x, mean, inv, w, sdy, sdyx, dx}, u32(dx.numel()), u32(count), hasw)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// poolGeometry reads max_pool2d's kernel, stride, padding and dilation
// from arguments at ki.. (an empty stride is the kernel size).
func poolGeometry(n *ir.Node, c *ir.Call, x, y aview, ki int) (pool, error) {
	if len(x.shape) != 4 || len(y.shape) != 4 {
		return pool{}, failf(n, c, "pooling of %v: 2-D (NCHW) only", x.shape)
	}
	pair := func(i int, def []int64) (uint32, uint32) {
		v := argInts(c, i)
		if len(v) == 0 {
			v = def
		}
		if len(v) == 1 {
			return uint32(v[0]), uint32(v[0])
		}
		return uint32(v[0]), uint32(v[1])
	}
	p := pool{N: u32(x.shape[0]), C: u32(x.shape[1]), H: u32(x.shape[2]), W: u32(x.shape[3]), Ho: u32(y.shape[2]), Wo: u32(y.shape[3])}
	p.KH, p.KW = pair(ki, nil)
	p.SH, p.SW = pair(ki+1, argInts(c, ki))
	p.PH, p.PW = pair(ki+2, []int64{0})
	p.DH, p.DW = pair(ki+3, []int64{1})
	if p.KH == 0 || p.KW == 0 || p.SH == 0 || p.SW == 0 {
		return pool{}, failf(n, c, "a kernel or stride of 0")
	}
	return p, nil
}

func lowerMaxPool(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (self, kernel_size, stride, padding, dilation, ceil_mode) → (out, indices)
	v, err := l.views(n, c, "0", "r0", "r1")
	if err != nil {
		return nil, err
	}
	p, err := poolGeometry(n, c, v[0], v[1], 1)
	if err != nil {
		return nil, err
	}
	x, err := withIters(alaunch("a_maxpool", v[1].numel(), v, p.words()...))(uint64(p.KH * p.KW))
	return []Launch{x}, err
}

func lowerMaxPoolBackward(l *lowerer, n *ir.Node, c *ir.Call) ([]Launch, error) {
	// (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)
	v, err := l.views(n, c, "0", "7", "r0", "1")
	if err != nil {
		return nil, err
	}
	p, err := poolGeometry(n, c, v[3], v[0], 2)
	if err != nil {
		return nil, err
	}
	x, err := withIters(alaunch("a_maxpool_bwd", v[2].numel(), v[:3], p.words()...))(uint64((p.KH*p.DH/p.SH + 1) * (p.KW*p.DW/p.SW + 1)))
	return []Launch{x}, err
}

// lowerCall lowers an imported node by its call's target.
func (l *lowerer) lowerCall(n *ir.Node) ([]Launch, error) {
	f, ok := atenLowerings[n.Call.Target]
	if !ok {
		return nil, unsupported("node %q: %s has no kernel", n.ID, n.Call.Target)
	}
	return f(l, n, n.Call)
}
