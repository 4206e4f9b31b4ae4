package onnx

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/importer/onnx/onnxpb"
	"github.com/tmmu/tmmu/ir"
)

// unary ops give each output their first input's shape and dtype.
var unary = map[string]bool{
	"Abs": true, "Acos": true, "Asin": true, "Atan": true, "Ceil": true, "Celu": true, "Clip": true, "Cos": true, "Cosh": true,
	"CumSum": true, "Dropout": true, "Elu": true, "Erf": true, "Exp": true, "Floor": true, "Gelu": true, "HardSigmoid": true,
	"HardSwish": true, "Hardmax": true, "Identity": true, "InstanceNormalization": true, "LRN": true, "LeakyRelu": true,
	"Log": true, "LogSoftmax": true, "LpNormalization": true, "Mish": true, "Neg": true, "Not": true, "PRelu": true,
	"Reciprocal": true, "Relu": true, "Round": true, "Selu": true, "Shrink": true, "Sigmoid": true, "Sign": true,
	"Sin": true, "Sinh": true, "Softmax": true, "Softplus": true, "Softsign": true, "Sqrt": true, "Tan": true, "Tanh": true,
	"ThresholdedRelu": true, "BatchNormalization": true, "LayerNormalization": true, "Trilu": true, "IsNaN": true, "IsInf": true,
	"ScatterND": true, "ScatterElements": true, "Scatter": true,
}

// broadcast ops give their output the inputs' broadcast shape; compare
// ops make it bool.
var broadcast = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Max": true, "Min": true, "Sum": true, "Mean": true,
	"Mod": true, "BitShift": true, "Where": true, "Equal": true, "Less": true, "Greater": true, "LessOrEqual": true,
	"GreaterOrEqual": true, "And": true, "Or": true, "Xor": true,
}

var compare = map[string]bool{"Equal": true, "Less": true, "Greater": true, "LessOrEqual": true, "GreaterOrEqual": true, "And": true, "Or": true, "Xor": true}

// infer resolves the shapes of node n's outputs that the model does not
// give, for the ops it knows; any other op's outputs need a value_info.
func (im *importer) infer(n *onnxpb.NodeProto, k int) error {
	outs := n.GetOutput()
	missing := false
	for _, o := range outs {
		if o != "" && !im.info[o].known {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	var in []*tensorInfo
	for _, name := range n.GetInput() {
		if name == "" {
			in = append(in, nil)
			continue
		}
		in = append(in, im.info[name])
	}
	op := n.GetOpType()
	shapes, dtypes, err := im.rule(n, in)
	if err != nil {
		return im.fail(failure.InvalidIRShapes, "node %s (%s): %v", nodeName(n, k), op, err)
	}
	for i, o := range outs {
		if o == "" || im.info[o].known {
			continue
		}
		if i >= len(shapes) || shapes[i] == nil {
			return im.fail(failure.InvalidIRShapes, "tensor %q (output %d of node %s, %s): no shape in the model and tmmu infers none for this op (run onnx.shape_inference.infer_shapes on the model first)", o, i, nodeName(n, k), op)
		}
		for d, v := range shapes[i] {
			if v == 0 {
				return im.fail(failure.InvalidIRShapes, "tensor %q (output of node %s, %s): dimension %d is 0 (zero-size tensors are not planned)", o, nodeName(n, k), op, d)
			}
		}
		ti := im.info[o]
		ti.shape, ti.known = shapes[i], true
		if ti.dtype == "" {
			ti.dtype = dtypes[i]
		}
		im.stats.Inferred++
	}
	return nil
}

// known returns the inputs' shapes, or an error naming the first input
// whose shape is unknown.
func known(n *onnxpb.NodeProto, in []*tensorInfo, want int) error {
	if len(in) < want {
		return fmt.Errorf("has %d inputs, want at least %d", len(in), want)
	}
	for i := range want {
		if in[i] == nil || !in[i].known {
			return fmt.Errorf("input %d (%q) has no known shape", i, n.GetInput()[i])
		}
	}
	return nil
}

// rule computes output shapes and dtypes; a nil shape means not inferred.
func (im *importer) rule(n *onnxpb.NodeProto, in []*tensorInfo) ([][]uint64, []ir.DType, error) {
	op, outs := n.GetOpType(), len(n.GetOutput())
	var r shapeRule
	switch {
	case unary[op]:
		r = ruleUnary
	case broadcast[op]:
		r = ruleBroadcast
	default:
		r = shapeRules[op]
	}
	if r == nil {
		return make([][]uint64, outs), make([]ir.DType, outs), nil
	}
	return r(im, n, in, op, outs)
}

// shapeRule computes the output shapes and dtypes of one kind of node
// (op, with outs outputs), from its inputs in.
type shapeRule func(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error)

// shapeRules are the rules by op, beside unary and broadcast ones.
var shapeRules = map[string]shapeRule{
	"Cast":              ruleCast,
	"MatMul":            ruleMatMul,
	"Gemm":              ruleGemm,
	"Conv":              ruleWindow,
	"MaxPool":           ruleWindow,
	"AveragePool":       ruleWindow,
	"LpPool":            ruleWindow,
	"GlobalAveragePool": ruleGlobalPool,
	"GlobalMaxPool":     ruleGlobalPool,
	"GlobalLpPool":      ruleGlobalPool,
	"Flatten":           ruleFlatten,
	"Reshape":           ruleReshape,
	"Transpose":         ruleTranspose,
	"Concat":            ruleConcat,
	"Unsqueeze":         ruleSqueeze,
	"Squeeze":           ruleSqueeze,
	"ReduceMean":        ruleReduce,
	"ReduceSum":         ruleReduce,
	"ReduceMax":         ruleReduce,
	"ReduceMin":         ruleReduce,
	"ReduceProd":        ruleReduce,
	"ReduceL2":          ruleReduce,
	"ReduceL1":          ruleReduce,
	"ReduceLogSumExp":   ruleReduce,
	"ReduceSumSquare":   ruleReduce,
	"Shape":             ruleShape,
	"Split":             ruleSplit,
	"Slice":             ruleSlice,
	"Expand":            ruleFill,
	"ConstantOfShape":   ruleFill,
	"Range":             ruleRange,
	"Gather":            ruleGather,
	"Pad":               rulePad,
	"Einsum":            ruleEinsum,
}

// same gives each of outs outputs shape and dtype dt.
func same(outs int, shape []uint64, dt ir.DType) ([][]uint64, []ir.DType, error) {
	s := make([][]uint64, outs)
	d := make([]ir.DType, outs)
	for i := range outs {
		s[i], d[i] = slices.Clone(shape), dt
	}
	return s, d, nil
}

// one gives the first of outs outputs shape and dtype dt.
func one(outs int, shape []uint64, dt ir.DType) ([][]uint64, []ir.DType, error) {
	return wrap(shape, dt, outs, nil)
}

// ruleUnary infers the ops whose outputs are shaped like their first input.
func ruleUnary(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	s, d, _ := same(outs, in[0].shape, in[0].dtype)
	if op == "Dropout" && outs > 1 {
		d[1] = ir.Bool
	}
	switch op {
	case "BatchNormalization":
		// Training mode: the running mean and variance (opset 14+), or
		// (opset < 14) those and the saved mean and variance, all
		// shaped like the scale [C].
		for i := 1; i < outs; i++ {
			s[i] = nil
			if len(in) > 1 && in[1] != nil && in[1].known {
				s[i], d[i] = slices.Clone(in[1].shape), in[1].dtype
			}
		}
	case "LayerNormalization":
		// The mean and inverse standard deviation: the input's shape
		// with the normalised axes (axis … rank−1) of size 1, fp32.
		axis := attrInt(n, "axis", -1)
		r := int64(len(in[0].shape))
		if axis < 0 {
			axis += r
		}
		for i := 1; i < outs; i++ {
			s[i], d[i] = nil, ir.F32
			if axis >= 0 && axis < r {
				s[i] = slices.Clone(in[0].shape)
				for k := axis; k < r; k++ {
					s[i][k] = 1
				}
			}
		}
	}
	return s, d, nil
}

// rulePad infers Pad: each dimension grows by its constant pads (begin
// and end; negative pads crop), on the axes given (opset 18), or all.
func rulePad(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	x := in[0].shape
	pads := attrInts(n, "pads") // opset < 11
	if len(n.GetInput()) > 1 && n.GetInput()[1] != "" {
		var ok bool
		if pads, ok = im.ints(n.GetInput()[1]); !ok {
			return nil, nil, fmt.Errorf("the pads %q are not a constant", n.GetInput()[1])
		}
	}
	axes := make([]int64, len(x))
	for i := range axes {
		axes[i] = int64(i)
	}
	if len(n.GetInput()) > 3 && n.GetInput()[3] != "" {
		var ok bool
		if axes, ok = im.ints(n.GetInput()[3]); !ok {
			return nil, nil, fmt.Errorf("the axes %q are not a constant", n.GetInput()[3])
		}
	}
	if len(pads) != 2*len(axes) {
		return nil, nil, fmt.Errorf("%d pads for %d axes", len(pads), len(axes))
	}
	s := slices.Clone(x)
	for i, a := range axes {
		if a < 0 {
			a += int64(len(x))
		}
		if a < 0 || int(a) >= len(x) {
			return nil, nil, fmt.Errorf("axis %d of a rank-%d input", axes[i], len(x))
		}
		v := int64(s[a]) + pads[i] + pads[i+len(axes)]
		if v < 1 {
			return nil, nil, fmt.Errorf("pads %v leave dimension %d of %v empty", pads, a, x)
		}
		s[a] = uint64(v)
	}
	return wrap(s, in[0].dtype, outs, nil)
}

// ruleBroadcast infers the elementwise ops that broadcast their inputs
// (numpy rules).
func ruleBroadcast(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, len(in)); err != nil {
		return nil, nil, err
	}
	shape := in[0].shape
	for _, t := range in[1:] {
		var err error
		if shape, err = broadcastShapes(shape, t.shape); err != nil {
			return nil, nil, err
		}
	}
	dt := in[0].dtype
	if op == "Where" {
		dt = in[1].dtype
	}
	if compare[op] {
		dt = ir.Bool
	}
	return one(outs, shape, dt)
}

// ruleCast infers Cast.
func ruleCast(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	dt, err := im.dtype(n.GetOutput()[0], int32(attrInt(n, "to", 0)))
	if err != nil {
		return nil, nil, err
	}
	return one(outs, in[0].shape, dt)
}

// ruleMatMul infers MatMul.
func ruleMatMul(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 2); err != nil {
		return nil, nil, err
	}
	s, err := matmulShape(in[0].shape, in[1].shape)
	return wrap(s, in[0].dtype, outs, err)
}

// ruleEinsum infers Einsum from its equation: each input's subscripts
// name its axes (an ellipsis stands for the leading axes the letters do
// not name, broadcast across inputs); the output is the subscripts after
// "->", or without one the letters used once, in alphabetical order,
// after the ellipsis.
func ruleEinsum(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, len(in)); err != nil {
		return nil, nil, err
	}
	var eq string
	for _, a := range n.GetAttribute() {
		if a.GetName() == "equation" && a.GetType() == onnxpb.AttributeProto_STRING {
			eq = strings.ReplaceAll(string(a.GetS()), " ", "")
		}
	}
	s, err := einsumShape(eq, in)
	return wrap(s, in[0].dtype, outs, err)
}

// einsumShape computes the output shape of Einsum equation eq.
func einsumShape(eq string, in []*tensorInfo) ([]uint64, error) {
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if eq == "" || len(terms) != len(in) {
		return nil, fmt.Errorf("equation %q names %d inputs, the node has %d", eq, len(terms), len(in))
	}
	dim := map[rune]uint64{}
	count := map[rune]int{}
	var ell []uint64
	for i, term := range terms {
		pre, post, hasEll := strings.Cut(term, "...")
		letters := []rune(pre + post)
		shape := in[i].shape
		if len(letters) > len(shape) || (!hasEll && len(letters) != len(shape)) {
			return nil, fmt.Errorf("term %q of equation %q does not fit input %d of rank %d", term, eq, i, len(shape))
		}
		e := len(shape) - len(letters)
		if hasEll {
			var err error
			if ell, err = broadcastShapes(ell, shape[len([]rune(pre)):len([]rune(pre))+e]); err != nil {
				return nil, fmt.Errorf("equation %q: ellipsis: %v", eq, err)
			}
		}
		ax := 0
		for j, c := range letters {
			if j == len([]rune(pre)) && hasEll {
				ax += e
			}
			if !unicode.IsLetter(c) {
				return nil, fmt.Errorf("equation %q: %q is not a subscript letter", eq, c)
			}
			d := shape[ax]
			if old, ok := dim[c]; ok && old != d && old != 1 && d != 1 {
				return nil, fmt.Errorf("equation %q: subscript %c is %d in one input and %d in another", eq, c, old, d)
			}
			if old := dim[c]; d > old {
				dim[c] = d
			}
			count[c]++
			ax++
		}
	}
	if !explicit {
		var once []rune
		for c, k := range count {
			if k == 1 {
				once = append(once, c)
			}
		}
		slices.Sort(once)
		rhs = "..." + string(once)
	}
	out := []uint64{} // a scalar is a known shape, not a missing one
	pre, post, hasEll := strings.Cut(rhs, "...")
	for _, c := range pre {
		d, ok := dim[c]
		if !ok {
			return nil, fmt.Errorf("equation %q: output subscript %c names no input axis", eq, c)
		}
		out = append(out, d)
	}
	if hasEll {
		out = append(out, ell...)
	}
	for _, c := range post {
		d, ok := dim[c]
		if !ok {
			return nil, fmt.Errorf("equation %q: output subscript %c names no input axis", eq, c)
		}
		out = append(out, d)
	}
	return out, nil
}

// ruleGemm infers Gemm.
func ruleGemm(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 2); err != nil {
		return nil, nil, err
	}
	a, b := in[0].shape, in[1].shape
	if len(a) != 2 || len(b) != 2 {
		return nil, nil, fmt.Errorf("takes 2-D operands, got %v and %v", a, b)
	}
	m, ka := a[0], a[1]
	if attrInt(n, "transA", 0) != 0 {
		m, ka = a[1], a[0]
	}
	kb, nn := b[0], b[1]
	if attrInt(n, "transB", 0) != 0 {
		kb, nn = b[1], b[0]
	}
	if ka != kb {
		return nil, nil, fmt.Errorf("inner dimensions differ: %v and %v", a, b)
	}
	return one(outs, []uint64{m, nn}, in[0].dtype)
}

// ruleWindow infers Conv, MaxPool, AveragePool, LpPool.
func ruleWindow(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	s, err := im.window(n, in)
	if err != nil {
		return nil, nil, err
	}
	shapes, dts, _ := same(outs, s, in[0].dtype)
	if op == "MaxPool" && outs > 1 {
		dts[1] = ir.I64
	}
	return shapes, dts, nil
}

// ruleGlobalPool infers GlobalAveragePool, GlobalMaxPool, GlobalLpPool.
func ruleGlobalPool(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	x := in[0].shape
	if len(x) < 3 {
		return nil, nil, fmt.Errorf("%s takes [N,C,...], got %v", op, x)
	}
	s := slices.Clone(x)
	for i := 2; i < len(s); i++ {
		s[i] = 1
	}
	return one(outs, s, in[0].dtype)
}

// ruleFlatten infers Flatten.
func ruleFlatten(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	x := in[0].shape
	axis, err := normAxis(attrInt(n, "axis", 1), len(x)+1)
	if err != nil {
		return nil, nil, err
	}
	return one(outs, []uint64{prod(x[:axis]), prod(x[axis:])}, in[0].dtype)
}

// ruleReshape infers Reshape.
func ruleReshape(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 2); err != nil {
		return nil, nil, err
	}
	target, ok := im.ints(n.GetInput()[1])
	if !ok {
		return nil, nil, fmt.Errorf("the target shape %q is not a constant", n.GetInput()[1])
	}
	s, err := reshape(in[0].shape, target, attrInt(n, "allowzero", 0) != 0)
	return wrap(s, in[0].dtype, outs, err)
}

// ruleTranspose infers Transpose.
func ruleTranspose(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	x := in[0].shape
	perm := attrInts(n, "perm")
	if perm == nil {
		for i := len(x) - 1; i >= 0; i-- {
			perm = append(perm, int64(i))
		}
	}
	if len(perm) != len(x) {
		return nil, nil, fmt.Errorf("perm %v does not match rank %d", perm, len(x))
	}
	s := make([]uint64, len(x))
	seen := make([]bool, len(x))
	for i, p := range perm {
		if p < 0 || int(p) >= len(x) || seen[p] {
			return nil, nil, fmt.Errorf("perm %v is not a permutation", perm)
		}
		seen[p] = true
		s[i] = x[p]
	}
	return one(outs, s, in[0].dtype)
}

// ruleConcat infers Concat.
func ruleConcat(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, len(in)); err != nil {
		return nil, nil, err
	}
	s := slices.Clone(in[0].shape)
	axis, err := normAxis(attrInt(n, "axis", 0), len(s))
	if err != nil {
		return nil, nil, err
	}
	for _, t := range in[1:] {
		if len(t.shape) != len(s) {
			return nil, nil, fmt.Errorf("inputs of ranks %d and %d", len(s), len(t.shape))
		}
		s[axis] += t.shape[axis]
	}
	return one(outs, s, in[0].dtype)
}

// ruleSqueeze infers Unsqueeze, Squeeze.
func ruleSqueeze(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	axes, err := im.listArg(n, "axes")
	if err != nil {
		return nil, nil, err
	}
	s, err := squeeze(in[0].shape, axes, op == "Unsqueeze")
	return wrap(s, in[0].dtype, outs, err)
}

// ruleReduce infers the Reduce ops (Mean, Sum, Max, Min, Prod, L2, L1,
// LogSumExp, SumSquare).
func ruleReduce(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	axes, err := im.listArg(n, "axes")
	if err != nil {
		return nil, nil, err
	}
	s, err := reduce(in[0].shape, axes, attrInt(n, "keepdims", 1) != 0)
	return wrap(s, in[0].dtype, outs, err)
}

// ruleShape infers Shape.
func ruleShape(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	r := int64(len(in[0].shape))
	start, end := attrInt(n, "start", 0), attrInt(n, "end", r)
	start, end = clampAxis(start, r), clampAxis(end, r)
	if end <= start {
		return nil, nil, fmt.Errorf("empty range [%d, %d)", start, end)
	}
	return one(outs, []uint64{uint64(end - start)}, ir.I64)
}

// ruleSplit infers Split.
func ruleSplit(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	x := in[0].shape
	axis, err := normAxis(attrInt(n, "axis", 0), len(x))
	if err != nil {
		return nil, nil, err
	}
	sizes, err := im.listArg(n, "split")
	if err != nil {
		return nil, nil, err
	}
	if sizes == nil {
		per := (int64(x[axis]) + int64(outs) - 1) / int64(outs)
		for left := int64(x[axis]); left > 0; left -= per {
			sizes = append(sizes, min(per, left))
		}
	}
	if len(sizes) != outs {
		return nil, nil, fmt.Errorf("%d split sizes for %d outputs", len(sizes), outs)
	}
	shapes, dts := make([][]uint64, outs), make([]ir.DType, outs)
	var total int64
	for i, sz := range sizes {
		if sz <= 0 {
			return nil, nil, fmt.Errorf("split size %d", sz)
		}
		total += sz
		shapes[i] = slices.Clone(x)
		shapes[i][axis], dts[i] = uint64(sz), in[0].dtype
	}
	if total != int64(x[axis]) {
		return nil, nil, fmt.Errorf("split sizes %v do not add up to dimension %d of %v", sizes, axis, x)
	}
	return shapes, dts, nil
}

// ruleSlice infers Slice.
func ruleSlice(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 3); err != nil {
		return nil, nil, err
	}
	s, err := im.slice(n, in[0].shape)
	return wrap(s, in[0].dtype, outs, err)
}

// ruleFill infers Expand, ConstantOfShape.
func ruleFill(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if len(n.GetInput()) == 0 {
		return nil, nil, fmt.Errorf("has no inputs")
	}
	target := n.GetInput()[len(n.GetInput())-1]
	v, ok := im.ints(target)
	if !ok {
		return nil, nil, fmt.Errorf("the shape %q is not a constant", target)
	}
	s := []uint64{}
	for _, d := range v {
		if d <= 0 {
			return nil, nil, fmt.Errorf("shape %v", v)
		}
		s = append(s, uint64(d))
	}
	if op == "ConstantOfShape" {
		dt := ir.F32 // the default fill: a float 0
		for _, a := range n.GetAttribute() {
			if a.GetName() == "value" && a.GetT() != nil {
				var err error
				if dt, err = im.dtype(n.GetOutput()[0], a.GetT().GetDataType()); err != nil {
					return nil, nil, err
				}
			}
		}
		return one(outs, s, dt)
	}
	if err := known(n, in, 1); err != nil {
		return nil, nil, err
	}
	s, err := broadcastShapes(in[0].shape, s)
	return wrap(s, in[0].dtype, outs, err)
}

// ruleRange infers Range.
func ruleRange(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 3); err != nil {
		return nil, nil, err
	}
	var v [3]int64
	for i := range v {
		x, ok := im.ints(n.GetInput()[i])
		if !ok || len(x) != 1 {
			return nil, nil, fmt.Errorf("input %q is not a constant integer scalar", n.GetInput()[i])
		}
		v[i] = x[0]
	}
	if v[2] == 0 {
		return nil, nil, fmt.Errorf("delta 0")
	}
	count := (v[1] - v[0] + v[2] - 1) / v[2]
	if v[2] < 0 {
		count = (v[0] - v[1] - v[2] - 1) / -v[2]
	}
	if count <= 0 {
		return nil, nil, fmt.Errorf("Range(%d, %d, %d) is empty", v[0], v[1], v[2])
	}
	return one(outs, []uint64{uint64(count)}, in[0].dtype)
}

// ruleGather infers Gather.
func ruleGather(im *importer, n *onnxpb.NodeProto, in []*tensorInfo, op string, outs int) ([][]uint64, []ir.DType, error) {
	if err := known(n, in, 2); err != nil {
		return nil, nil, err
	}
	x := in[0].shape
	axis, err := normAxis(attrInt(n, "axis", 0), len(x))
	if err != nil {
		return nil, nil, err
	}
	s := append(append(append([]uint64{}, x[:axis]...), in[1].shape...), x[axis+1:]...)
	return one(outs, s, in[0].dtype)
}

// listArg reads an integer list that older opsets give as the attribute
// name and newer ones as a constant second input.
func (im *importer) listArg(n *onnxpb.NodeProto, name string) ([]int64, error) {
	if in := n.GetInput(); len(in) > 1 && in[1] != "" {
		v, ok := im.ints(in[1])
		if !ok {
			return nil, fmt.Errorf("the %s %q are not a constant", name, in[1])
		}
		return v, nil
	}
	return attrInts(n, name), nil
}

// wrap gives the first of outs outputs shape s and dtype dt (the others
// are not inferred), or passes err on.
func wrap(s []uint64, dt ir.DType, outs int, err error) ([][]uint64, []ir.DType, error) {
	if err != nil {
		return nil, nil, err
	}
	shapes := make([][]uint64, outs)
	dts := make([]ir.DType, outs)
	shapes[0], dts[0] = s, dt
	return shapes, dts, nil
}

func prod(xs []uint64) uint64 {
	p := uint64(1)
	for _, x := range xs {
		p *= x
	}
	return p
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(a int64, rank int) (int, error) {
	if a < 0 {
		a += int64(rank)
	}
	if a < 0 || a >= int64(rank) {
		return 0, fmt.Errorf("axis %d out of range for rank %d", a, rank)
	}
	return int(a), nil
}

func clampAxis(a, r int64) int64 {
	if a < 0 {
		a += r
	}
	return min(max(a, 0), r)
}

// broadcastShapes is numpy broadcasting.
func broadcastShapes(a, b []uint64) ([]uint64, error) {
	n := max(len(a), len(b))
	out := make([]uint64, n)
	for i := range n {
		x, y := uint64(1), uint64(1)
		if j := len(a) - n + i; j >= 0 {
			x = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			y = b[j]
		}
		switch {
		case x == y || y == 1:
			out[i] = x
		case x == 1:
			out[i] = y
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}

// matmulShape is numpy matmul: 1-D operands are promoted and the added
// dimension removed, leading dimensions broadcast.
func matmulShape(a, b []uint64) ([]uint64, error) {
	if len(a) == 0 || len(b) == 0 {
		return nil, fmt.Errorf("a scalar operand")
	}
	pa, pb := slices.Clone(a), slices.Clone(b)
	if len(pa) == 1 {
		pa = []uint64{1, pa[0]}
	}
	if len(pb) == 1 {
		pb = []uint64{pb[0], 1}
	}
	if pa[len(pa)-1] != pb[len(pb)-2] {
		return nil, fmt.Errorf("inner dimensions differ: %v and %v", a, b)
	}
	lead, err := broadcastShapes(pa[:len(pa)-2], pb[:len(pb)-2])
	if err != nil {
		return nil, err
	}
	out := append(lead, pa[len(pa)-2], pb[len(pb)-1])
	if len(b) == 1 {
		out = out[:len(out)-1]
	}
	if len(a) == 1 {
		out = slices.Delete(out, len(lead), len(lead)+1)
	}
	return out, nil
}

// window is the output shape of a convolution or pooling over [N, C, ...].
func (im *importer) window(n *onnxpb.NodeProto, in []*tensorInfo) ([]uint64, error) {
	x := in[0].shape
	if len(x) < 3 {
		return nil, fmt.Errorf("takes [N,C,...], got %v", x)
	}
	spatial := len(x) - 2
	out := []uint64{x[0], x[1]}
	kernel := attrInts(n, "kernel_shape")
	if n.GetOpType() == "Conv" {
		if err := known(n, in, 2); err != nil {
			return nil, err
		}
		w := in[1].shape
		if len(w) != len(x) {
			return nil, fmt.Errorf("weight %v does not match input %v", w, x)
		}
		out[1] = w[0]
		if kernel == nil {
			for _, k := range w[2:] {
				kernel = append(kernel, int64(k))
			}
		}
	}
	if len(kernel) != spatial {
		return nil, fmt.Errorf("kernel_shape %v does not match input %v", kernel, x)
	}
	get := func(name string, size int, def int64) []int64 {
		v := attrInts(n, name)
		if v == nil {
			v = make([]int64, size)
			for i := range v {
				v[i] = def
			}
		}
		return v
	}
	strides, dil, pads := get("strides", spatial, 1), get("dilations", spatial, 1), get("pads", 2*spatial, 0)
	if len(strides) != spatial || len(dil) != spatial || len(pads) != 2*spatial {
		return nil, fmt.Errorf("strides %v, dilations %v or pads %v do not match %d spatial dimensions", strides, dil, pads, spatial)
	}
	autoPad := ""
	for _, a := range n.GetAttribute() {
		if a.GetName() == "auto_pad" {
			autoPad = string(a.GetS())
		}
	}
	ceil := attrInt(n, "ceil_mode", 0) != 0
	for i := range spatial {
		size := int64(x[2+i])
		if strides[i] <= 0 || dil[i] <= 0 || kernel[i] <= 0 {
			return nil, fmt.Errorf("non-positive kernel %v, strides %v or dilations %v", kernel, strides, dil)
		}
		var o int64
		switch autoPad {
		case "SAME_UPPER", "SAME_LOWER":
			o = (size + strides[i] - 1) / strides[i]
		default:
			span := size + pads[i] + pads[i+spatial] - dil[i]*(kernel[i]-1) - 1
			if span < 0 {
				return nil, fmt.Errorf("kernel %v larger than the padded input %v", kernel, x)
			}
			if ceil {
				o = (span+strides[i]-1)/strides[i] + 1
			} else {
				o = span/strides[i] + 1
			}
		}
		out = append(out, uint64(o))
	}
	return out, nil
}

// reshape applies an ONNX Reshape target: 0 copies the input's dimension
// (unless allowzero), -1 takes what is left.
func reshape(x []uint64, target []int64, allowZero bool) ([]uint64, error) {
	out := make([]uint64, len(target))
	infer := -1
	known := uint64(1)
	for i, t := range target {
		switch {
		case t == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("target shape %v has two -1", target)
			}
			infer = i
			continue
		case t == 0 && !allowZero:
			if i >= len(x) {
				return nil, fmt.Errorf("target shape %v copies dimension %d of %v", target, i, x)
			}
			out[i] = x[i]
		case t <= 0:
			return nil, fmt.Errorf("target shape %v has dimension %d", target, t)
		default:
			out[i] = uint64(t)
		}
		known *= out[i]
	}
	total := prod(x)
	if infer >= 0 {
		if known == 0 || total%known != 0 {
			return nil, fmt.Errorf("cannot reshape %v to %v", x, target)
		}
		out[infer] = total / known
	} else if known != total {
		return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v", x, total, target)
	}
	return out, nil
}

// squeeze removes (or, unsqueezing, inserts) dimensions of size 1.
func squeeze(x []uint64, axes []int64, insert bool) ([]uint64, error) {
	if insert {
		rank := len(x) + len(axes)
		mark := make([]bool, rank)
		for _, a := range axes {
			i, err := normAxis(a, rank)
			if err != nil || mark[i] {
				return nil, fmt.Errorf("bad Unsqueeze axes %v for rank %d", axes, len(x))
			}
			mark[i] = true
		}
		out := make([]uint64, 0, rank)
		j := 0
		for i := range rank {
			if mark[i] {
				out = append(out, 1)
			} else {
				out = append(out, x[j])
				j++
			}
		}
		return out, nil
	}
	drop := make([]bool, len(x))
	if len(axes) == 0 {
		for i, d := range x {
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		i, err := normAxis(a, len(x))
		if err != nil || x[i] != 1 {
			return nil, fmt.Errorf("cannot squeeze axes %v of %v", axes, x)
		}
		drop[i] = true
	}
	var out []uint64
	for i, d := range x {
		if !drop[i] {
			out = append(out, d)
		}
	}
	if out == nil {
		out = []uint64{}
	}
	return out, nil
}

// reduce is the shape of a reduction over axes (all when none).
func reduce(x []uint64, axes []int64, keep bool) ([]uint64, error) {
	mark := make([]bool, len(x))
	if len(axes) == 0 {
		for i := range mark {
			mark[i] = true
		}
	}
	for _, a := range axes {
		i, err := normAxis(a, len(x))
		if err != nil {
			return nil, err
		}
		mark[i] = true
	}
	out := []uint64{}
	for i, d := range x {
		switch {
		case !mark[i]:
			out = append(out, d)
		case keep:
			out = append(out, 1)
		}
	}
	return out, nil
}

// maxFold bounds the elements of a folded integer tensor: shape
// computations are short vectors.
const maxFold = 64

// foldNode computes a node's small integer output from bound shapes and
// known values, as exporters emit them for dynamic axes (Shape, Gather,
// Concat, Unsqueeze, ... ending in a Reshape's target or a Pad's pads):
// the output becomes a constant tensor holding the value (im.vals) and
// the node is not imported (it reports true), so the shapes after it
// can be inferred and the plan holds no shape arithmetic. A value may be
// empty (the shape of a slice past the end), as long as only other
// folded nodes read it. Ops it does not know, values it cannot compute
// and graph outputs are left to import.
func (im *importer) foldNode(n *onnxpb.NodeProto) bool {
	if len(n.GetOutput()) != 1 {
		return false
	}
	out := n.GetOutput()[0]
	f := folds[n.GetOpType()]
	if f == nil || im.info[out].role == ir.Output {
		return false
	}
	var args [][]int64
	var in []*tensorInfo
	for _, name := range n.GetInput() {
		v, ok := im.ints(name)
		if name == "" || !ok {
			args = append(args, nil)
		} else {
			args = append(args, v)
		}
		if name == "" {
			in = append(in, nil)
		} else {
			in = append(in, im.info[name])
		}
	}
	v := f(im, n, args)
	if v == nil || len(v) > maxFold {
		return false
	}
	shape, dt := []uint64{0}, ir.I64
	if len(v) > 0 {
		shapes, dtypes, err := im.rule(n, in)
		if err != nil || len(shapes) == 0 || shapes[0] == nil || prod(shapes[0]) != uint64(len(v)) {
			return false
		}
		shape, dt = shapes[0], dtypes[0]
	}
	ti := im.info[out]
	if ti.known && !slices.Equal(ti.shape, shape) && len(v) > 0 {
		return false // the model says otherwise: import the node as it is
	}
	ti.shape, ti.known, ti.role = shape, true, ir.Constant
	if ti.dtype == "" {
		ti.dtype = dt
	}
	im.vals[out] = v
	im.stats.Folded++
	return true
}

// folds compute the integer values of nodes whose inputs are known
// integer values (shape arithmetic), by op: nil when they cannot.
var folds = map[string]func(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64{
	"Shape":           foldShape,
	"Identity":        foldIdentity,
	"Cast":            foldIdentity,
	"Unsqueeze":       foldIdentity,
	"Squeeze":         foldIdentity,
	"Reshape":         foldIdentity,
	"Flatten":         foldIdentity,
	"Gather":          foldGather,
	"Concat":          foldConcat,
	"ConstantOfShape": foldConstantOfShape,
	"Where":           foldWhere,
	"Add":             foldAdd,
	"Sub":             foldAdd,
	"Mul":             foldAdd,
	"Div":             foldAdd,
	"Equal":           foldAdd,
	"Mod":             foldAdd,
	"Slice":           foldSlice,
	"Transpose":       foldTranspose,
}

// argAt is args[i], or nil past its end.
func argAt(args [][]int64, i int) []int64 {
	if i < len(args) {
		return args[i]
	}
	return nil
}

// foldShape folds Shape.
func foldShape(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64 {
	v := []int64{} // a scalar's shape is empty
	if len(n.GetInput()) == 0 {
		return nil
	}
	ti := im.info[n.GetInput()[0]]
	if ti == nil || !ti.known {
		return nil
	}
	r := int64(len(ti.shape))
	start, end := clampAxis(attrInt(n, "start", 0), r), clampAxis(attrInt(n, "end", r), r)
	for _, d := range ti.shape[start:max(start, end)] {
		v = append(v, int64(d))
	}
	return v
}

// foldIdentity folds Identity, Cast, Unsqueeze, Squeeze, Reshape and
// Flatten: the values pass through.
func foldIdentity(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64 {
	return argAt(args, 0)
}

// foldGather folds Gather.
func foldGather(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64 {
	var v []int64
	data, idx := argAt(args, 0), argAt(args, 1)
	if data == nil || idx == nil || attrInt(n, "axis", 0) != 0 {
		return nil
	}
	for _, i := range idx {
		if i < 0 {
			i += int64(len(data))
		}
		if i < 0 || i >= int64(len(data)) {
			return nil
		}
		v = append(v, data[i])
	}
	return v
}

// foldConcat folds Concat.
func foldConcat(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64 {
	var v []int64
	for i := range args {
		if argAt(args, i) == nil {
			return nil
		}
		v = append(v, argAt(args, i)...)
	}
	return v
}

// foldConstantOfShape folds ConstantOfShape.
func foldConstantOfShape(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64 {
	var v []int64
	shape := argAt(args, 0)
	if shape == nil || len(shape) > 1 || len(shape) == 1 && (shape[0] <= 0 || shape[0] > maxFold) {
		return nil
	}
	var fill int64
	for _, a := range n.GetAttribute() {
		if a.GetName() == "value" {
			val, ok := tensorInts(a.GetT())
			if !ok || len(val) != 1 {
				return nil // a float fill: not a shape computation
			}
			fill = val[0]
		}
	}
	count := int64(1)
	if len(shape) == 1 {
		count = shape[0]
	}
	for range count {
		v = append(v, fill)
	}
	return v
}

// foldWhere folds Where.
func foldWhere(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64 {
	var v []int64
	c, a, b := argAt(args, 0), argAt(args, 1), argAt(args, 2)
	if c == nil || a == nil || b == nil {
		return nil
	}
	size := max(len(c), len(a), len(b))
	for _, x := range [][]int64{c, a, b} {
		if len(x) != size && len(x) != 1 {
			return nil
		}
	}
	for i := range size {
		if c[min(i, len(c)-1)] != 0 {
			v = append(v, a[min(i, len(a)-1)])
		} else {
			v = append(v, b[min(i, len(b)-1)])
		}
	}
	return v
}

// foldAdd folds Add, Sub, Mul, Div, Equal and Mod (fmod 0: the
// result takes the divisor's sign, as Python's %; fmod 1: the
// dividend's, as C's).
func foldAdd(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64 {
	var v []int64
	a, b := argAt(args, 0), argAt(args, 1)
	if a == nil || b == nil || len(a) != len(b) && len(a) != 1 && len(b) != 1 {
		return nil
	}
	for i := range max(len(a), len(b)) {
		x, y := a[min(i, len(a)-1)], b[min(i, len(b)-1)]
		switch n.GetOpType() {
		case "Add":
			v = append(v, x+y)
		case "Sub":
			v = append(v, x-y)
		case "Mul":
			v = append(v, x*y)
		case "Div":
			if y == 0 {
				return nil
			}
			v = append(v, x/y)
		case "Equal":
			v = append(v, int64(boolInt(x == y)))
		case "Mod":
			if y == 0 {
				return nil
			}
			r := x % y
			if attrInt(n, "fmod", 0) == 0 && r != 0 && (r < 0) != (y < 0) {
				r += y
			}
			v = append(v, r)
		}
	}
	return v
}

// foldShapeOf is the shape of a folded value: its tensor's inferred
// shape, which must hold len(v) elements (nil when it is not known).
func (im *importer) foldShapeOf(name string, v []int64) []uint64 {
	ti := im.info[name]
	if ti == nil || !ti.known || prod(ti.shape) != uint64(len(v)) {
		return nil
	}
	return ti.shape
}

// foldSlice folds Slice over any axes and steps of a value whose
// shape is known (rank 1 or more).
func foldSlice(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64 {
	data := argAt(args, 0)
	if data == nil || len(n.GetInput()) < 3 {
		return nil
	}
	shape := im.foldShapeOf(n.GetInput()[0], data)
	if shape == nil {
		return nil
	}
	out, err := im.sliceShape(n, shape, true)
	if err != nil {
		return nil
	}
	if prod(out) == 0 {
		return []int64{}
	}
	starts, axes, steps := argAt(args, 1), argAt(args, 3), argAt(args, 4)
	if axes == nil {
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	// The first index kept along each axis, and the step.
	first, step := make([]int64, len(shape)), make([]int64, len(shape))
	for d := range shape {
		step[d] = 1
	}
	for i, a := range axes {
		ax, err := normAxis(a, len(shape))
		if err != nil {
			return nil
		}
		dim, st := int64(shape[ax]), int64(1)
		if steps != nil {
			st = steps[i]
		}
		b := starts[i]
		if b < 0 {
			b += dim
		}
		if st > 0 {
			b = min(max(b, 0), dim)
		} else {
			b = min(max(b, -1), dim-1)
		}
		first[ax], step[ax] = b, st
	}
	var v []int64
	idx := make([]int64, len(shape))
	for range prod(out) {
		at := int64(0)
		for d := range shape {
			at = at*int64(shape[d]) + first[d] + idx[d]*step[d]
		}
		v = append(v, data[at])
		for d := len(out) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < int64(out[d]) {
				break
			}
			idx[d] = 0
		}
	}
	return v
}

// foldTranspose folds Transpose of a value whose shape is known.
func foldTranspose(im *importer, n *onnxpb.NodeProto, args [][]int64) []int64 {
	data := argAt(args, 0)
	if data == nil {
		return nil
	}
	shape := im.foldShapeOf(n.GetInput()[0], data)
	if shape == nil {
		return nil
	}
	r := len(shape)
	perm := attrInts(n, "perm")
	if perm == nil {
		for d := range r {
			perm = append(perm, int64(r-1-d))
		}
	}
	if len(perm) != r {
		return nil
	}
	out := make([]uint64, r)
	seen := make([]bool, r)
	for d, p := range perm {
		if p < 0 || int(p) >= r || seen[p] {
			return nil // not a permutation: left to the shape rule's message
		}
		seen[p] = true
		out[d] = shape[p]
	}
	stride := make([]int64, r)
	acc := int64(1)
	for d := r - 1; d >= 0; d-- {
		stride[d], acc = acc, acc*int64(shape[d])
	}
	var v []int64
	idx := make([]int64, r)
	for range prod(out) {
		at := int64(0)
		for d := range r {
			at += idx[d] * stride[perm[d]]
		}
		v = append(v, data[at])
		for d := r - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < int64(out[d]) {
				break
			}
			idx[d] = 0
		}
	}
	return v
}

// slice is the shape of a Slice whose starts, ends, axes and steps are
// constants.
func (im *importer) slice(n *onnxpb.NodeProto, x []uint64) ([]uint64, error) {
	return im.sliceShape(n, x, false)
}

// sliceShape is slice; empty says whether an empty result is an answer
// (a folded value) rather than an error.
func (im *importer) sliceShape(n *onnxpb.NodeProto, x []uint64, empty bool) ([]uint64, error) {
	in := n.GetInput()
	get := func(i int) ([]int64, bool, error) {
		if i >= len(in) || in[i] == "" {
			return nil, false, nil
		}
		v, ok := im.ints(in[i])
		if !ok {
			return nil, false, fmt.Errorf("slice input %q is not a constant", in[i])
		}
		return v, true, nil
	}
	starts, _, err := get(1)
	if err != nil {
		return nil, err
	}
	ends, _, err := get(2)
	if err != nil {
		return nil, err
	}
	axes, hasAxes, err := get(3)
	if err != nil {
		return nil, err
	}
	steps, hasSteps, err := get(4)
	if err != nil {
		return nil, err
	}
	if !hasAxes {
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	if !hasSteps {
		for range starts {
			steps = append(steps, 1)
		}
	}
	if len(ends) != len(starts) || len(axes) != len(starts) || len(steps) != len(starts) {
		return nil, fmt.Errorf("slice starts %v, ends %v, axes %v and steps %v differ in length", starts, ends, axes, steps)
	}
	out := slices.Clone(x)
	for i, a := range axes {
		ax, err := normAxis(a, len(x))
		if err != nil {
			return nil, err
		}
		d, st := int64(x[ax]), steps[i]
		if st == 0 {
			return nil, fmt.Errorf("slice step 0")
		}
		clamp := func(v, lo, hi int64) int64 {
			if v < 0 {
				v += d
			}
			return min(max(v, lo), hi)
		}
		var cnt int64
		if st > 0 {
			b, e := clamp(starts[i], 0, d), clamp(ends[i], 0, d)
			cnt = max(0, (e-b+st-1)/st)
		} else {
			b, e := clamp(starts[i], -1, d-1), clamp(ends[i], -1, d-1)
			cnt = max(0, (b-e-st-1)/(-st))
		}
		if cnt == 0 && !empty {
			return nil, fmt.Errorf("slice of axis %d of %v is empty (zero-size tensors are not planned)", ax, x)
		}
		out[ax] = uint64(cnt)
	}
	return out, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
