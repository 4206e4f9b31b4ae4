// Package onnx imports ONNX models as UML_Model_IR graphs: nodes with
// their ops and integer attributes, tensors with shapes and dtypes from
// the model's value_info (or inferred here for a common op set),
// initializers as parameters, graph inputs and outputs. Train extends an
// imported graph into a training step.
//
// Dynamic dimensions (dim_param, or no dimension at all) must be bound:
// Options.Batch binds the leading symbolic dimension of the graph inputs,
// Options.Dims binds a named dimension to a value or to a range (the
// plan sizes tensors at its maximum and records the range as a
// shape_envelope).
//
// Every failure is a *failure.Error naming the culprit (the file, the
// node or the tensor): INVALID_ENCODING for a file that is not an ONNX
// model, INVALID_IR_GRAPH for unknown ops or tensors, INVALID_IR_SHAPES
// for an unbound dimension, an unsupported dtype or a shape that can be
// neither read nor inferred.
package onnx

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/importer/onnx/onnxpb"
	"github.com/tmmu/tmmu/ir"
)

// OpImport names the operator in failures.
const OpImport = "import onnx"

// Options bind dynamic dimensions and name the graph.
type Options struct {
	// Name is the IR model's name; empty takes the ONNX graph's name.
	Name string
	// Batch, when positive, binds the leading dimension of every graph
	// input whose leading dimension is symbolic or missing.
	Batch uint64
	// Dims binds symbolic dimensions by name.
	Dims map[string]Bound
}

// Bound is the range of a symbolic dimension: Min = Max for a fixed value.
type Bound struct{ Min, Max uint64 }

// ParseBound reads "N" or "MIN:MAX".
func ParseBound(s string) (Bound, error) {
	lo, hi, ranged := strings.Cut(s, ":")
	a, err := strconv.ParseUint(lo, 10, 64)
	if err != nil || a == 0 {
		return Bound{}, fmt.Errorf("%q: want a positive size N or a range MIN:MAX", s)
	}
	if !ranged {
		return Bound{a, a}, nil
	}
	b, err := strconv.ParseUint(hi, 10, 64)
	if err != nil || b < a {
		return Bound{}, fmt.Errorf("%q: want a range MIN:MAX with 1 ≤ MIN ≤ MAX", s)
	}
	return Bound{a, b}, nil
}

// Stats says what an import found.
type Stats struct {
	Producer     string         // the program that wrote the file, and its version
	Opset        int64          // the default domain's opset
	Nodes        int            // nodes imported (Constant nodes become constant tensors)
	Folded       int            // nodes computed here from bound shapes (shape arithmetic), which become constant tensors
	Inferred     int            // tensors whose shapes were inferred here
	Ops          map[string]int // nodes per op
	DroppedAttrs int            // float, string and tensor attributes not carried (the IR keeps integers)
}

// Import decodes an ONNX model and builds its inference graph. The model
// is complete or an error is returned: nothing is returned half built.
func Import(data []byte, o Options) (*ir.Model, *Stats, error) {
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		return nil, nil, failure.Newf(failure.InvalidEncoding, OpImport, "not an ONNX model (%d bytes): the protobuf does not decode: %v", len(data), err)
	}
	g := mp.GetGraph()
	if mp.GetIrVersion() <= 0 || g == nil || len(g.GetNode()) == 0 {
		return nil, nil, failure.Newf(failure.InvalidEncoding, OpImport, "not an ONNX model (%d bytes): no ir_version or no graph with nodes", len(data))
	}
	im := &importer{o: o, g: g, stats: &Stats{Producer: strings.TrimSpace(mp.GetProducerName() + " " + mp.GetProducerVersion()), Ops: map[string]int{}},
		info: map[string]*tensorInfo{}, consts: map[string]*onnxpb.TensorProto{}, vals: map[string][]int64{}}
	for _, op := range mp.GetOpsetImport() {
		if op.GetDomain() == "" || op.GetDomain() == "ai.onnx" {
			im.stats.Opset = op.GetVersion()
		}
	}
	m, err := im.build()
	if err != nil {
		return nil, nil, err
	}
	return m, im.stats, nil
}

type importer struct {
	o      Options
	g      *onnxpb.GraphProto
	stats  *Stats
	info   map[string]*tensorInfo         // by ONNX name
	consts map[string]*onnxpb.TensorProto // initializers and Constant outputs, for shapes read from data
	vals   map[string][]int64             // small integer tensors computed from bound shapes (see fold)
}

// tensorInfo is what is known of a tensor: its dtype and shape once
// resolved, the range of each dimension, and its role.
type tensorInfo struct {
	dtype    ir.DType
	shape    []uint64 // nil until known
	envelope []ir.DimRange
	role     ir.Role
	known    bool // shape resolved
}

func (im *importer) fail(code failure.Code, format string, args ...any) error {
	return failure.Newf(code, OpImport, format, args...)
}

func (im *importer) build() (*ir.Model, error) {
	if err := im.declareAll(); err != nil {
		return nil, err
	}
	m := &ir.Model{Name: im.o.Name}
	if m.Name == "" {
		m.Name = im.g.GetName()
	}
	nodeIDs := map[string]bool{}
	defined := map[string]string{} // tensor → defining node
	for k, n := range im.g.GetNode() {
		node, err := im.node(n, k, defined)
		if err != nil {
			return nil, err
		}
		if node == nil {
			continue // a Constant: its output is a constant tensor
		}
		if nodeIDs[node.ID] {
			node.ID = fmt.Sprintf("%s#%d", node.ID, k)
		}
		nodeIDs[node.ID] = true
		m.Nodes = append(m.Nodes, *node)
		m.ExecutionOrder = append(m.ExecutionOrder, node.ID)
		im.stats.Nodes++
		im.stats.Ops[string(node.Op)]++
	}
	for _, vi := range im.g.GetOutput() {
		if _, ok := defined[vi.GetName()]; !ok && im.info[vi.GetName()].role == ir.Output {
			return nil, im.fail(failure.InvalidIRGraph, "graph output %q is not written by any node", vi.GetName())
		}
	}
	var err error
	m.Tensors, err = im.tensors(m.Nodes)
	return m, err
}

// declareAll records initializers, then graph inputs, outputs and
// value_info, in that order of authority.
func (im *importer) declareAll() error {
	for _, t := range im.g.GetInitializer() {
		name := t.GetName()
		if name == "" {
			return im.fail(failure.InvalidIRGraph, "an initializer has no name")
		}
		dt, err := im.dtype(name, t.GetDataType())
		if err != nil {
			return err
		}
		shape, err := im.dims(name, t.GetDims())
		if err != nil {
			return err
		}
		im.info[name] = &tensorInfo{dtype: dt, shape: shape, role: ir.Parameter, known: true}
		im.consts[name] = t
	}
	im.bindBatch()
	for _, vi := range im.g.GetInput() {
		if _, init := im.info[vi.GetName()]; init {
			continue // an initializer listed as an input (IR < 4): a parameter
		}
		if err := im.declare(vi, ir.Input, true); err != nil {
			return err
		}
	}
	for _, vi := range im.g.GetOutput() {
		if err := im.declare(vi, ir.Output, false); err != nil {
			return err
		}
	}
	for _, vi := range im.g.GetValueInfo() {
		if err := im.declare(vi, ir.Activation, false); err != nil {
			return err
		}
	}
	return nil
}

// node checks node k, resolves its outputs' shapes and returns it as an
// IR node; a Constant becomes a constant tensor and no node (nil).
func (im *importer) node(n *onnxpb.NodeProto, k int, defined map[string]string) (*ir.Node, error) {
	name, op := nodeName(n, k), n.GetOpType()
	if d := n.GetDomain(); d != "" && d != "ai.onnx" {
		return nil, im.fail(failure.InvalidIRGraph, "node %s: op %s of domain %q is not a standard ONNX op (only the default domain is imported)", name, op, d)
	}
	if !knownOps[op] {
		return nil, im.fail(failure.InvalidIRGraph, "node %s: unknown op %q (not a standard ONNX operator)", name, op)
	}
	for _, a := range n.GetAttribute() {
		if t := a.GetType(); t == onnxpb.AttributeProto_GRAPH || t == onnxpb.AttributeProto_GRAPHS {
			// A subgraph reads outer tensors it does not list as inputs:
			// their lifetimes would end too early.
			return nil, im.fail(failure.InvalidIRGraph, "node %s (%s): subgraphs (control flow: If, Loop, Scan) are not imported", name, op)
		}
	}
	for _, in := range n.GetInput() {
		if in == "" {
			continue // an omitted optional input
		}
		if _, ok := im.info[in]; !ok {
			return nil, im.fail(failure.InvalidIRGraph, "node %s (%s) reads tensor %q, which no node, input or initializer defines", name, op, in)
		}
		if _, ok := defined[in]; !ok && im.info[in].role == ir.Activation {
			return nil, im.fail(failure.InvalidIRGraph, "node %s (%s) reads tensor %q before a node defines it (the nodes are not in topological order)", name, op, in)
		}
	}
	if op == "Constant" {
		if err := im.constant(n, k); err != nil {
			return nil, err
		}
		for _, out := range n.GetOutput() {
			defined[out] = name
		}
		return nil, nil
	}
	for _, out := range n.GetOutput() {
		if out == "" {
			continue
		}
		if by, dup := defined[out]; dup {
			return nil, im.fail(failure.InvalidIRGraph, "tensor %q is written by node %s and node %s (ONNX tensors are written once)", out, by, name)
		}
		defined[out] = name
		if _, ok := im.info[out]; !ok {
			im.info[out] = &tensorInfo{role: ir.Activation}
		}
		if ti := im.info[out]; ti.role == ir.Input || ti.role == ir.Parameter {
			return nil, im.fail(failure.InvalidIRGraph, "node %s (%s) writes %q, a graph input or initializer", name, op, out)
		}
	}
	if im.foldNode(n) {
		return nil, nil
	}
	if err := im.infer(n, k); err != nil {
		return nil, err
	}
	return &ir.Node{ID: name, Op: ir.Op(op), Inputs: nonEmpty(n.GetInput()), Outputs: nonEmpty(n.GetOutput()), Attrs: im.attrs(n)}, nil
}

// tensors lists the tensors the nodes read or write, by name (a stable
// order): unused inputs and initializers are left out.
func (im *importer) tensors(nodes []ir.Node) ([]ir.Tensor, error) {
	used := map[string]bool{}
	for _, n := range nodes {
		for _, t := range n.Inputs {
			used[t] = true
		}
		for _, t := range n.Outputs {
			used[t] = true
		}
	}
	var out []ir.Tensor
	for _, name := range slices.Sorted(maps.Keys(used)) {
		ti := im.info[name]
		if !ti.known {
			return nil, im.fail(failure.InvalidIRShapes, "tensor %q: no shape in the model and none inferred (run onnx.shape_inference.infer_shapes on the model first)", name)
		}
		t := ir.Tensor{ID: name, Shape: slices.Clone(ti.shape), DType: ti.dtype, Role: ti.role}
		if t.Shape == nil {
			t.Shape = []uint64{}
		}
		if slices.ContainsFunc(ti.envelope, func(r ir.DimRange) bool { return r.Min != r.Max }) {
			t.ShapeEnvelope = ti.envelope
		}
		out = append(out, t)
	}
	return out, nil
}

// nodeName is a node's name, or its op and position when it has none.
func nodeName(n *onnxpb.NodeProto, k int) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	return fmt.Sprintf("%s_%d", n.GetOpType(), k)
}

func nonEmpty(xs []string) []string {
	var out []string
	for _, x := range xs {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

// bindBatch makes Options.Batch the value of the symbol that names a
// graph input's leading dimension, wherever it appears, unless Dims binds
// that symbol already.
func (im *importer) bindBatch() {
	if im.o.Batch == 0 {
		return
	}
	dims := map[string]Bound{}
	for k, v := range im.o.Dims {
		dims[k] = v
	}
	for _, vi := range im.g.GetInput() {
		d := vi.GetType().GetTensorType().GetShape().GetDim()
		if len(d) > 0 && d[0].GetDimParam() != "" {
			if _, set := dims[d[0].GetDimParam()]; !set {
				dims[d[0].GetDimParam()] = Bound{im.o.Batch, im.o.Batch}
			}
		}
	}
	im.o.Dims = dims
}

// declare records a value_info: its dtype and, when every dimension can
// be bound, its shape. A leading symbolic dimension of a graph input
// takes Options.Batch.
func (im *importer) declare(vi *onnxpb.ValueInfoProto, role ir.Role, input bool) error {
	name := vi.GetName()
	if name == "" {
		return im.fail(failure.InvalidIRGraph, "a graph input, output or value_info has no name")
	}
	ti := im.info[name]
	if ti == nil {
		ti = &tensorInfo{role: role}
		im.info[name] = ti
	} else if role == ir.Output && ti.role == ir.Activation {
		ti.role = ir.Output
	}
	tt := vi.GetType().GetTensorType()
	if tt == nil {
		if input {
			return im.fail(failure.InvalidIRShapes, "graph input %q is not a tensor (sequences, maps and optionals are not imported)", name)
		}
		return nil
	}
	if tt.GetElemType() != 0 && ti.dtype == "" {
		dt, err := im.dtype(name, tt.GetElemType())
		if err != nil {
			return err
		}
		ti.dtype = dt
	}
	if ti.known || tt.GetShape() == nil {
		if input && !ti.known && tt.GetShape() == nil {
			return im.fail(failure.InvalidIRShapes, "graph input %q has no shape", name)
		}
		return nil
	}
	dims := tt.GetShape().GetDim()
	shape := make([]uint64, len(dims))
	env := make([]ir.DimRange, len(dims))
	for i, d := range dims {
		var b Bound
		switch {
		case d.GetDimValue() > 0:
			b = Bound{uint64(d.GetDimValue()), uint64(d.GetDimValue())}
		case d.GetDimParam() != "" && im.o.Dims[d.GetDimParam()] != (Bound{}):
			b = im.o.Dims[d.GetDimParam()]
		case input && i == 0 && im.o.Batch > 0:
			b = Bound{im.o.Batch, im.o.Batch}
		case input:
			what := "an unnamed dynamic dimension"
			if p := d.GetDimParam(); p != "" {
				what = fmt.Sprintf("the dynamic dimension %q", p)
			}
			flag := "--dim NAME=N (or MIN:MAX)"
			if p := d.GetDimParam(); p != "" {
				flag = fmt.Sprintf("--dim %s=N (or MIN:MAX)", p)
			}
			if i == 0 {
				flag = "--batch N or " + flag
			}
			return im.fail(failure.InvalidIRShapes, "graph input %q: dimension %d is %s with no bound: give %s", name, i, what, flag)
		default:
			return nil // infer it from the node instead
		}
		shape[i], env[i] = b.Max, ir.DimRange{Min: b.Min, Max: b.Max}
	}
	ti.shape, ti.envelope, ti.known = shape, env, true
	return nil
}

// dims converts an initializer's dimensions.
func (im *importer) dims(name string, dims []int64) ([]uint64, error) {
	shape := make([]uint64, len(dims))
	for i, d := range dims {
		if d <= 0 {
			return nil, im.fail(failure.InvalidIRShapes, "tensor %q: dimension %d is %d (zero-size and negative dimensions are not planned)", name, i, d)
		}
		shape[i] = uint64(d)
	}
	return shape, nil
}

// dtypes maps ONNX element types to the IR's (17 and 19 are ONNX 1.14's
// FLOAT8E4M3FN and FLOAT8E5M2).
var dtypes = map[int32]ir.DType{
	int32(onnxpb.TensorProto_FLOAT): ir.F32, int32(onnxpb.TensorProto_DOUBLE): ir.F64,
	int32(onnxpb.TensorProto_FLOAT16): ir.F16, int32(onnxpb.TensorProto_BFLOAT16): ir.BF16,
	int32(onnxpb.TensorProto_INT64): ir.I64, int32(onnxpb.TensorProto_INT32): ir.I32,
	int32(onnxpb.TensorProto_INT16): ir.I16, int32(onnxpb.TensorProto_INT8): ir.I8,
	int32(onnxpb.TensorProto_UINT8): ir.U8, int32(onnxpb.TensorProto_BOOL): ir.Bool,
	17: ir.F8E4, 19: ir.F8E5,
}

// dtype maps an ONNX element type.
func (im *importer) dtype(name string, t int32) (ir.DType, error) {
	if d, ok := dtypes[t]; ok {
		return d, nil
	}
	kind := onnxpb.TensorProto_DataType(t).String()
	if _, ok := onnxpb.TensorProto_DataType_name[t]; !ok {
		kind = strconv.Itoa(int(t))
	}
	return "", im.fail(failure.InvalidIRShapes, "tensor %q: element type %s is not supported (supported: float, double, float16, bfloat16, float8, int64, int32, int16, int8, uint8, bool)", name, kind)
}

// constant turns a Constant node's output into a constant tensor.
func (im *importer) constant(n *onnxpb.NodeProto, k int) error {
	if len(n.GetOutput()) != 1 {
		return im.fail(failure.InvalidIRGraph, "node %s (Constant) has %d outputs, want 1", nodeName(n, k), len(n.GetOutput()))
	}
	out := n.GetOutput()[0]
	ti := &tensorInfo{role: ir.Constant, known: true}
	for _, a := range n.GetAttribute() {
		switch a.GetName() {
		case "value":
			t := a.GetT()
			dt, err := im.dtype(out, t.GetDataType())
			if err != nil {
				return err
			}
			shape, err := im.dims(out, t.GetDims())
			if err != nil {
				return err
			}
			ti.dtype, ti.shape = dt, shape
			im.consts[out] = t
		case "value_float":
			ti.dtype, ti.shape = ir.F32, []uint64{}
		case "value_floats":
			ti.dtype, ti.shape = ir.F32, []uint64{uint64(max(len(a.GetFloats()), 1))}
		case "value_int":
			ti.dtype, ti.shape = ir.I64, []uint64{}
			im.vals[out] = []int64{a.GetI()}
		case "value_ints":
			ti.dtype, ti.shape = ir.I64, []uint64{uint64(max(len(a.GetInts()), 1))}
			im.vals[out] = a.GetInts()
		default:
			return im.fail(failure.InvalidIRGraph, "node %s (Constant): attribute %q is not supported", nodeName(n, k), a.GetName())
		}
	}
	if ti.dtype == "" {
		return im.fail(failure.InvalidIRGraph, "node %s (Constant) has no value", nodeName(n, k))
	}
	if prev := im.info[out]; prev != nil && prev.role == ir.Output {
		return im.fail(failure.InvalidIRGraph, "graph output %q is a Constant: nothing to plan", out)
	}
	im.info[out] = ti
	return nil
}

// attrs keeps a node's integer attributes: INT as name, INTS as name.0,
// name.1, ... Others are counted in Stats.DroppedAttrs.
func (im *importer) attrs(n *onnxpb.NodeProto) map[string]int64 {
	var out map[string]int64
	put := func(k string, v int64) {
		if v == 0 {
			return // the IR omits zero attributes
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[k] = v
	}
	for _, a := range n.GetAttribute() {
		switch a.GetType() {
		case onnxpb.AttributeProto_INT:
			put(a.GetName(), a.GetI())
		case onnxpb.AttributeProto_INTS:
			for i, v := range a.GetInts() {
				put(a.GetName()+"."+strconv.Itoa(i), v)
			}
		default:
			im.stats.DroppedAttrs++
		}
	}
	return out
}

// ints reads a constant integer tensor (a Reshape's shape, axes), or
// reports that the tensor is not a known constant: an initializer, a
// Constant, or a shape computation folded by fold.
func (im *importer) ints(name string) ([]int64, bool) {
	if v, ok := im.vals[name]; ok {
		return v, true
	}
	if t, ok := im.consts[name]; ok {
		return tensorInts(t)
	}
	return nil, false
}

// tensorInts reads the values of an int64 or int32 tensor, from its typed
// field or its little-endian raw data.
func tensorInts(t *onnxpb.TensorProto) ([]int64, bool) {
	var out []int64
	switch onnxpb.TensorProto_DataType(t.GetDataType()) {
	case onnxpb.TensorProto_INT64:
		if len(t.GetInt64Data()) > 0 {
			return t.GetInt64Data(), true
		}
		raw := t.GetRawData()
		if len(raw)%8 != 0 {
			return nil, false
		}
		for i := 0; i < len(raw); i += 8 {
			out = append(out, int64(binary.LittleEndian.Uint64(raw[i:])))
		}
	case onnxpb.TensorProto_INT32:
		for _, v := range t.GetInt32Data() {
			out = append(out, int64(v))
		}
		if raw := t.GetRawData(); len(out) == 0 {
			if len(raw)%4 != 0 {
				return nil, false
			}
			for i := 0; i < len(raw); i += 4 {
				out = append(out, int64(int32(binary.LittleEndian.Uint32(raw[i:]))))
			}
		}
	default:
		return nil, false
	}
	return out, true
}

// attrInt returns an INT attribute, or def.
func attrInt(n *onnxpb.NodeProto, name string, def int64) int64 {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name && a.GetType() == onnxpb.AttributeProto_INT {
			return a.GetI()
		}
	}
	return def
}

// attrInts returns an INTS attribute, or nil.
func attrInts(n *onnxpb.NodeProto, name string) []int64 {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name && a.GetType() == onnxpb.AttributeProto_INTS {
			return a.GetInts()
		}
	}
	return nil
}
