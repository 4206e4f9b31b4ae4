package ir_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/ir/irtest"
	"github.com/tmmu/tmmu/models"
)

func mustCompile(t *testing.T, src string) *ir.Graph {
	t.Helper()
	g, err := ir.Load([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The same graph written with other key order, whitespace and listing
// order has the same ir_hash; a changed shape does not.
func TestIRHashIgnoresFormatting(t *testing.T) {
	a := mustCompile(t, `{"name":"m","tensors":[{"id":"x","shape":[4],"dtype":"fp32","role":"input"},
		{"id":"y","shape":[4],"dtype":"fp32","role":"output"}],
		"nodes":[{"id":"n","op":"relu","inputs":["x"],"outputs":["y"]}]}`)
	b := mustCompile(t, `{
	  "nodes": [ { "outputs": ["y"], "op": "relu", "phase": "forward", "id": "n", "inputs": ["x"] } ],
	  "tensors": [
	    { "role": "output", "dtype": "fp32", "shape": [4], "id": "y" },
	    { "shape": [4], "id": "x", "role": "input", "dtype": "fp32" }
	  ],
	  "name": "m"
	}`)
	if a.IRHash != b.IRHash {
		t.Fatalf("ir_hash differs: %s vs %s", a.IRHash, b.IRHash)
	}
	c := mustCompile(t, `{"name":"m","tensors":[{"id":"x","shape":[8],"dtype":"fp32","role":"input"},
		{"id":"y","shape":[4],"dtype":"fp32","role":"output"}],
		"nodes":[{"id":"n","op":"relu","inputs":["x"],"outputs":["y"]}]}`)
	if a.IRHash == c.IRHash {
		t.Fatal("ir_hash ignores a shape change")
	}
	// CBOR and JSON of one model hash the same.
	m, _ := ir.Decode([]byte(`{"tensors":[{"id":"x","shape":[4],"dtype":"fp32","role":"input"}],"nodes":[]}`))
	cb, err := m.EncodeCBOR()
	if err != nil {
		t.Fatal(err)
	}
	m2, err := ir.Decode(cb)
	if err != nil {
		t.Fatal(err)
	}
	if m.IRHash() != m2.IRHash() {
		t.Fatal("CBOR and JSON forms hash differently")
	}
}

// Without execution_order, Compile orders nodes topologically, ready nodes
// by phase then id.
func TestDerivedOrder(t *testing.T) {
	g := mustCompile(t, `{"tensors":[
		{"id":"x","shape":[1],"dtype":"fp32","role":"input"},
		{"id":"a","shape":[1],"dtype":"fp32","role":"activation"},
		{"id":"b","shape":[1],"dtype":"fp32","role":"activation"},
		{"id":"c","shape":[1],"dtype":"fp32","role":"output"},
		{"id":"g","shape":[1],"dtype":"fp32","role":"gradient"}],
	  "nodes":[
		{"id":"z_last","op":"f","inputs":["a","b"],"outputs":["c"]},
		{"id":"bwd","op":"f","phase":"backward","inputs":["x"],"outputs":["g"]},
		{"id":"y_b","op":"f","inputs":["x"],"outputs":["b"]},
		{"id":"y_a","op":"f","inputs":["x"],"outputs":["a"]}]}`)
	want := []string{"y_a", "y_b", "z_last", "bwd"}
	if !g.OrderDerived || !slices.Equal(g.OrderIDs, want) {
		t.Fatalf("order %v (derived %v), want %v", g.OrderIDs, g.OrderDerived, want)
	}
}

// Strided views are checked against their byte_length.
func TestViewExtent(t *testing.T) {
	base := `{"id":"b","shape":[4,6],"dtype":"fp32","role":"input"}`
	ok := `{"tensors":[` + base + `,{"id":"v","shape":[4,2],"dtype":"fp32","role":"input",
		"view_descriptor":{"base_tensor":"b","byte_offset":8,"byte_length":80,"strides":[6,1]}}],"nodes":[]}`
	g := mustCompile(t, ok)
	if v, _ := g.TensorIndex("v"); g.RootOffset[v] != 8 || g.Bytes[v] != 80 {
		t.Fatalf("view offset %d bytes %d", g.RootOffset[v], g.Bytes[v])
	}
	// (3*6 + 1*1 + 1) * 4 = 80 bytes touched; 76 is too short.
	short := `{"tensors":[` + base + `,{"id":"v","shape":[4,2],"dtype":"fp32","role":"input",
		"view_descriptor":{"base_tensor":"b","byte_offset":8,"byte_length":76,"strides":[6,1]}}],"nodes":[]}`
	if _, err := ir.Load([]byte(short)); !errors.Is(err, failure.InvalidIRShapes) {
		t.Fatalf("short view: %v", err)
	}
}

func TestNumel(t *testing.T) {
	if n, ok := ir.Numel(nil); n != 1 || !ok {
		t.Fatal("scalar")
	}
	if _, ok := ir.Numel([]uint64{1 << 32, 1 << 32}); ok {
		t.Fatal("2^64 elements should overflow")
	}
}

// TestCanonicalHashMatchesLibrary: ir_hash, streamed field by field, equals
// SHA-256 over fxamacker/cbor's core deterministic encoding of the
// canonical model, for random models with every IR feature.
func TestCanonicalHashMatchesLibrary(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := irtest.Model(t, irtest.Options{})
		// Exercise the fields irtest leaves alone.
		if len(m.Nodes) > 0 {
			m.Nodes[0].Attrs = map[string]int64{"heads": 12, "a": -3, "transpose_b": 1, "zz": 1 << 40}
			if rapid.Bool().Draw(t, "call") {
				m.Nodes[0].Call = &ir.Call{Target: "aten::add.Tensor", Args: []ir.Arg{{K: "t", T: &ir.TensorRef{ID: "x", Shape: []uint64{2}, Strides: []uint64{1}}}, {K: "f", F: "-inf"}, {K: "il"}},
					Results: []*ir.TensorRef{nil, {ID: "y", Shape: []uint64{}, Strides: []uint64{}}}}
			}
		}
		if len(m.Tensors) > 0 && rapid.Bool().Draw(t, "strided") {
			m.Tensors[0].View = &ir.ViewDescriptor{BaseTensor: "b", ByteOffset: 7, ByteLength: 1 << 33, Strides: []uint64{3, 1}}
		}
		m.Name = rapid.SampledFrom([]string{"", "n", "a-much-longer-model-name-over-24"}).Draw(t, "name")
		want, err := ir.Sum(m.Canonical())
		if err != nil {
			t.Fatal(err)
		}
		if got := m.IRHash(); got != want {
			t.Fatalf("streamed ir_hash %s, library %s", got, want)
		}
	})
}

// The generated models (GPT-2 has strided views) hash the same both ways.
func TestCanonicalHashMatchesLibraryOnModels(t *testing.T) {
	gc := models.DefaultGPT2Config()
	gc.Layers, gc.Seq, gc.Train = 2, 64, true
	lc := models.DefaultLlamaConfig()
	lc.Layers, lc.Seq, lc.KVHeads, lc.Train = 2, 64, 8, true
	for name, gen := range map[string]func() (*ir.Model, error){
		"gpt2":  func() (*ir.Model, error) { return models.GPT2(gc) },
		"llama": func() (*ir.Model, error) { return models.Llama(lc) },
	} {
		m, err := gen()
		if err != nil {
			t.Fatal(err)
		}
		want, err := ir.Sum(m.Canonical())
		if err != nil {
			t.Fatal(err)
		}
		if got := m.IRHash(); got != want {
			t.Errorf("%s: streamed ir_hash %s, library %s", name, got, want)
		}
	}
}

func TestCanonOrder(t *testing.T) {
	g := mustCompile(t, `{"tensors":[
		{"id":"bb","shape":[1],"dtype":"fp32","role":"input"},
		{"id":"a","shape":[1],"dtype":"fp32","role":"input"},
		{"id":"ccc","shape":[1],"dtype":"fp32","role":"input"},
		{"id":"ab","shape":[1],"dtype":"fp32","role":"input"},
		{"id":"b","shape":[1],"dtype":"fp32","role":"input"}],"nodes":[]}`)
	var got []string
	for _, i := range g.CanonOrder {
		got = append(got, g.Tensors[i].ID)
	}
	if want := []string{"a", "b", "ab", "bb", "ccc"}; !slices.Equal(got, want) {
		t.Fatalf("canonical order %v, want %v", got, want)
	}
}

// TestDecodeMessages: bad documents are refused in words a user acts on,
// never with Go type names.
func TestDecodeMessages(t *testing.T) {
	for _, c := range []struct {
		data string
		code failure.Code
		want string
	}{
		{"hello world, not a graph\n", failure.InvalidEncoding, `expected JSON (an object, starting with '{') or CBOR (a map); found text starting "hello world, not a graph"`},
		{"", failure.InvalidEncoding, "found nothing (0 bytes)"},
		{"\x7fELF\x02\x01", failure.InvalidEncoding, "found binary data starting 7f 45 4c 46 02 01"},
		{`{"tensors":[{"id":"a","shape":[2],"dtype":"fp32","role":"input"},{"id":"x","shape":[3,-4],"dtype":"fp32","role":"input"}],"nodes":[]}`,
			failure.InvalidIRShapes, `tensor "x": dimension 1 of its shape is -4: dimensions are positive integers`},
		{`{"tensors":[{"id":"x","shape":[4],"dtype":"fp32","role":"input","shape_envelope":[[1,-2]]}],"nodes":[]}`,
			failure.InvalidIRShapes, `tensor "x": shape_envelope entry 0 is [1,-2]`},
		{`{"tensors":[{"id":"x","shape":[4],"dtype":7,"role":"input"}],"nodes":[]}`, failure.InvalidEncoding, "tensors.dtype takes a string, found number"},
	} {
		_, err := ir.Decode([]byte(c.data))
		if failure.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Go struct") || strings.Contains(err.Error(), "uint64") {
			t.Errorf("%q: %v; want %s containing %q", c.data, err, c.code, c.want)
		}
	}
}
