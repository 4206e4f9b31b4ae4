package onnx_test

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/importer/onnx"
	"github.com/tmmu/tmmu/importer/onnx/onnxpb"
	"github.com/tmmu/tmmu/internal/plantest"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

func read(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustImport(t *testing.T, name string, o onnx.Options) (*ir.Model, *onnx.Stats) {
	t.Helper()
	m, st, err := onnx.Import(read(t, name), o)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m, st
}

// plan compiles, plans and verifies an imported model.
func plan(t *testing.T, m *ir.Model) *planner.Plan {
	t.Helper()
	_, p := plantest.Verified(t, m)
	return p
}

func tensor(m *ir.Model, id string) *ir.Tensor {
	for i := range m.Tensors {
		if m.Tensors[i].ID == id {
			return &m.Tensors[i]
		}
	}
	return nil
}

// TestTinyCNN imports a CNN exported by PyTorch with onnx's shape
// inference, binds its dynamic batch and plans it.
func TestTinyCNN(t *testing.T) {
	m, st := mustImport(t, "tinycnn.onnx", onnx.Options{Batch: 4})
	if st.Nodes != 9 || st.Inferred != 0 || st.Ops["Conv"] != 2 || !strings.HasPrefix(st.Producer, "pytorch") {
		t.Fatalf("stats %+v", st)
	}
	x, y := tensor(m, "x"), tensor(m, "y")
	if x == nil || y == nil || x.Role != ir.Input || y.Role != ir.Output || !slices.Equal(x.Shape, []uint64{4, 3, 32, 32}) || !slices.Equal(y.Shape, []uint64{4, 10}) {
		t.Fatalf("x %+v, y %+v", x, y)
	}
	var params int
	for _, tt := range m.Tensors {
		if tt.Role == ir.Parameter {
			params++
		}
	}
	// conv1 (batchnorm folded in: weight, bias), conv2 weight and bias, fc weight and bias.
	if params != 6 {
		t.Fatalf("%d parameters, want 6", params)
	}
	plan(t, m)
}

// TestInferenceMatchesONNX checks tmmu's shape inference against onnx's
// own: the same graph without value_info imports to the same model.
func TestInferenceMatchesONNX(t *testing.T) {
	want, _ := mustImport(t, "tinycnn.onnx", onnx.Options{Batch: 3})
	got, st := mustImport(t, "tinycnn-noinfo.onnx", onnx.Options{Batch: 3})
	if st.Inferred == 0 {
		t.Fatal("nothing inferred")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("inferred shapes differ from onnx's (-onnx +tmmu):\n%s", d)
	}
}

// TestWindowAttentionMatchesONNX checks the shape arithmetic swin and
// maxvit export against onnx's own inference: pads computed with Mod,
// masks written by slice assignment (ScatterND on Range, Expand, Where),
// and Einsum with spaced, upper-case subscripts. The shape arithmetic
// folds to constants, so the planned model holds only tensors that hold
// data.
func TestWindowAttentionMatchesONNX(t *testing.T) {
	want, _ := mustImport(t, "tinywin.onnx", onnx.Options{})
	got, st := mustImport(t, "tinywin-noinfo.onnx", onnx.Options{})
	if st.Inferred == 0 || st.Folded == 0 || st.Ops["Einsum"] != 2 || st.Ops["Pad"] != 1 {
		t.Fatalf("stats %+v", st)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("inferred shapes differ from onnx's (-onnx +tmmu):\n%s", d)
	}
	// onnx 1.12 infers no shape for an equation with spaces: PyTorch's
	// shapes are the oracle there (36 positions, 2 heads of 4).
	for id, shape := range map[string][]uint64{"/Einsum_output_0": {1, 1, 2, 36, 36}, "/Einsum_1_output_0": {1, 1, 2, 36, 4}} {
		if x := tensor(got, id); x == nil || !slices.Equal(x.Shape, shape) {
			t.Fatalf("%s: %+v, want shape %v", id, x, shape)
		}
	}
	plan(t, got)
}

// TestDynamicReshape imports a transformer block whose reshapes take
// their targets from Shape, Gather and Concat on the dynamic axes: with
// the axes bound the targets fold to constants.
func TestDynamicReshape(t *testing.T) {
	m, st := mustImport(t, "tinyattn.onnx", onnx.Options{Batch: 2, Dims: map[string]onnx.Bound{"seq": {Min: 1, Max: 8}}})
	if y := tensor(m, "y"); !slices.Equal(y.Shape, []uint64{2, 8, 16}) || len(y.ShapeEnvelope) != 3 || y.ShapeEnvelope[1] != (ir.DimRange{Min: 1, Max: 8}) {
		t.Fatalf("y %+v", y)
	}
	if st.Ops["Softmax"] != 1 || st.Ops["Constant"] != 0 {
		t.Fatalf("ops %v", st.Ops)
	}
	plan(t, m)
}

// mutate decodes an ONNX file, lets f change it and encodes it again.
func mutate(t *testing.T, name string, f func(*onnxpb.ModelProto)) []byte {
	t.Helper()
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(read(t, name), &m); err != nil {
		t.Fatal(err)
	}
	f(&m)
	data, err := proto.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestBadInput(t *testing.T) {
	cnn := read(t, "tinycnn.onnx")
	setOp := func(k int, op, domain string) func(*onnxpb.ModelProto) {
		return func(m *onnxpb.ModelProto) {
			m.Graph.Node[k].OpType, m.Graph.Node[k].Domain = proto.String(op), proto.String(domain)
		}
	}
	for _, c := range []struct {
		name string
		data []byte
		o    onnx.Options
		code failure.Code
		want string
	}{
		{"empty", nil, onnx.Options{Batch: 1}, failure.InvalidEncoding, "not an ONNX model"},
		{"json", []byte(`{"tensors": []}`), onnx.Options{Batch: 1}, failure.InvalidEncoding, "not an ONNX model"},
		{"truncated", cnn[:len(cnn)/2], onnx.Options{Batch: 1}, failure.InvalidEncoding, "does not decode"},
		{"no batch", cnn, onnx.Options{}, failure.InvalidIRShapes, `graph input "x": dimension 0 is the dynamic dimension "batch" with no bound: give --batch N or --dim batch=N`},
		{"attn no seq", read(t, "tinyattn.onnx"), onnx.Options{Batch: 2}, failure.InvalidIRShapes, `dynamic dimension "seq"`},
		{"no value_info, unbound", read(t, "tinycnn-noinfo.onnx"), onnx.Options{}, failure.InvalidIRShapes, `"batch"`},
		{"unknown op", mutate(t, "tinycnn.onnx", setOp(2, "FancyPool", "")), onnx.Options{Batch: 1}, failure.InvalidIRGraph, `node /pool/MaxPool: unknown op "FancyPool"`},
		{"custom domain", mutate(t, "tinycnn.onnx", setOp(2, "MaxPool", "com.example")), onnx.Options{Batch: 1}, failure.InvalidIRGraph, `op MaxPool of domain "com.example" is not a standard ONNX op`},
		{"no shape rule", mutate(t, "tinycnn-noinfo.onnx", setOp(6, "Det", "")), onnx.Options{Batch: 1}, failure.InvalidIRShapes, `tensor "/GlobalAveragePool_output_0" (output 0 of node /GlobalAveragePool, Det): no shape in the model and tmmu infers none for this op`},
		{"string dtype", mutate(t, "tinycnn.onnx", func(m *onnxpb.ModelProto) {
			m.Graph.Input[0].Type.GetTensorType().ElemType = proto.Int32(int32(onnxpb.TensorProto_STRING))
		}), onnx.Options{Batch: 1}, failure.InvalidIRShapes, `tensor "x": element type STRING is not supported`},
		{"control flow", mutate(t, "tinycnn.onnx", func(m *onnxpb.ModelProto) {
			n := m.Graph.Node[2]
			n.OpType = proto.String("If")
			n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String("then_branch"), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: &onnxpb.GraphProto{}})
		}), onnx.Options{Batch: 1}, failure.InvalidIRGraph, `node /pool/MaxPool (If): subgraphs (control flow: If, Loop, Scan) are not imported`},
		{"undefined tensor", mutate(t, "tinycnn.onnx", func(m *onnxpb.ModelProto) { m.Graph.Node[3].Input[0] = "ghost" }), onnx.Options{Batch: 1}, failure.InvalidIRGraph, `reads tensor "ghost", which no node, input or initializer defines`},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, _, err := onnx.Import(c.data, c.o)
			if m != nil || !errors.Is(err, c.code) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, %v; want %s containing %q", m != nil, err, c.code, c.want)
			}
		})
	}
}

// TestTinyGPT imports the exporter's GPT-2 at toy size (embedding
// gathers, an arange, a causal mask), with onnx's value_info and without
// it: tmmu's inference gives the same model.
func TestTinyGPT(t *testing.T) {
	want, st := mustImport(t, "tinygpt.onnx", onnx.Options{Batch: 2})
	if y := tensor(want, "logits"); y == nil || !slices.Equal(y.Shape, []uint64{2, 16, 64}) || y.Role != ir.Output {
		t.Fatalf("logits %+v", y)
	}
	if st.Ops["Gather"] == 0 || st.Ops["Softmax"] != 1 {
		t.Fatalf("ops %v", st.Ops)
	}
	plan(t, want)
	bare := mutate(t, "tinygpt.onnx", func(m *onnxpb.ModelProto) { m.Graph.ValueInfo = nil })
	got, st, err := onnx.Import(bare, onnx.Options{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if st.Inferred == 0 {
		t.Fatal("nothing inferred")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("inferred shapes differ from onnx's (-onnx +tmmu):\n%s", d)
	}
}

// TestTrain extends imported graphs into training steps: every parameter
// gets a gradient and an in-place update, the backward nodes keep what
// they read saved, and the plan verifies.
func TestTrain(t *testing.T) {
	for _, c := range []struct {
		file      string
		optimizer string
		states    int // optimizer state tensors per parameter
	}{
		{"tinycnn.onnx", "adamw", 2},
		{"tinycnn.onnx", "sgd", 1},
		{"tinygpt.onnx", "adamw", 2},
	} {
		t.Run(c.file+"/"+c.optimizer, func(t *testing.T) {
			m, _ := mustImport(t, c.file, onnx.Options{Batch: 2})
			m, err := onnx.Train(m, c.optimizer)
			if err != nil {
				t.Fatal(err)
			}
			roles := map[ir.Role]int{}
			var params, inPlace, saved int
			for _, tt := range m.Tensors {
				roles[tt.Role]++
				if tt.Role == ir.Parameter && (tt.DType == ir.F32) {
					params++
				}
				if tt.InPlaceWrite {
					inPlace++
				}
				if tt.SavedForBackward {
					saved++
				}
			}
			if roles[ir.Output] != 1 || roles[ir.OptimizerState] != c.states*params || inPlace != (c.states+1)*params || saved == 0 || roles[ir.Gradient] < params {
				t.Fatalf("roles %v, %d parameters, %d in place, %d saved", roles, params, inPlace, saved)
			}
			phases := map[ir.Phase]int{}
			for _, n := range m.Nodes {
				phases[n.Phase]++
			}
			if phases[ir.Optimizer] != params || phases[ir.Backward] == 0 {
				t.Fatalf("phases %v for %d parameters", phases, params)
			}
			p := plan(t, m)
			if p.Mode != planner.TrainFull {
				t.Fatalf("mode %s", p.Mode)
			}
		})
	}
	m, _ := mustImport(t, "tinycnn.onnx", onnx.Options{Batch: 2})
	if _, err := onnx.Train(m, "lion"); !errors.Is(err, failure.InvalidOptions) {
		t.Fatalf("unknown optimizer: %v", err)
	}
}
