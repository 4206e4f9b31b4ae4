package weights

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/safetensors"
)

func gpt2(t *testing.T) *ir.Graph {
	t.Helper()
	c := models.DefaultGPT2Config()
	c.Layers, c.Hidden, c.Heads, c.Seq, c.Context, c.Vocab, c.Train = 2, 8, 2, 4, 4, 16, true
	m, err := models.GPT2(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func open(t *testing.T, ts []safetensors.Tensor) *safetensors.File {
	t.Helper()
	var b bytes.Buffer
	if err := safetensors.Write(&b, ts, nil); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Open(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// whole returns a tensor per parameter under its name, values i + id length.
func whole(g *ir.Graph, rename func(string) string) []safetensors.Tensor {
	n := NamingOf(g)
	var ts []safetensors.Tensor
	for _, id := range n.Params() {
		ti, _ := g.TensorIndex(id)
		num, _ := ir.Numel(g.Tensors[ti].Shape)
		v := make([]float32, num)
		for i := range v {
			v[i] = float32(i) + float32(len(id))
		}
		ts = append(ts, safetensors.F32Tensor(rename(n.Names[id]), g.Tensors[ti].Shape, v))
	}
	return ts
}

func TestGPT2NamesRoundTrip(t *testing.T) {
	g := gpt2(t)
	n := NamingOf(g)
	if n.Scheme != "gpt2" || n.Names["h1.attn.c_attn.w"] != "transformer.h.1.attn.c_attn.weight" || n.Names["ln_f.b"] != "transformer.ln_f.bias" || n.Names["wpe"] != "transformer.wpe.weight" {
		t.Fatalf("%+v", n.Names)
	}
	ts := whole(g, func(s string) string { return s })
	w, err := Load(open(t, ts), g)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != len(n.Params()) || w["wte"][3] != 3+3 {
		t.Fatalf("%d parameters loaded, wte[3] %v", len(w), w["wte"][3])
	}
	// Export writes them back under the same names, in the same layout.
	words := map[string][]uint32{}
	for id, v := range w {
		for _, x := range v {
			words[id] = append(words[id], math.Float32bits(x))
		}
	}
	out, err := Export(g, words, false)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ts, func(a, b safetensors.Tensor) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out, func(a, b safetensors.Tensor) int { return strings.Compare(a.Name, b.Name) })
	for i := range ts {
		if ts[i].Name != out[i].Name || !bytes.Equal(ts[i].Data, out[i].Data) {
			t.Fatalf("%s did not round-trip", ts[i].Name)
		}
	}
	// GPT2Model's names, with its mask buffers and a tied head: loaded.
	hf := whole(g, func(s string) string { return strings.TrimPrefix(s, "transformer.") })
	hf = append(hf, safetensors.F32Tensor("h.0.attn.bias", []uint64{1}, []float32{1}), safetensors.F32Tensor("h.1.attn.masked_bias", []uint64{1}, []float32{1}),
		safetensors.F32Tensor("lm_head.weight", []uint64{1}, []float32{1}))
	if _, err := Load(open(t, hf), g); err != nil {
		t.Fatal(err)
	}
}

func TestLoadNamesEveryProblem(t *testing.T) {
	g := gpt2(t)
	ts := whole(g, func(s string) string { return s })
	var kept []safetensors.Tensor
	for _, x := range ts {
		switch x.Name {
		case "transformer.ln_f.bias": // missing
		case "transformer.h.0.ln_1.weight": // another shape
			kept = append(kept, safetensors.F32Tensor(x.Name, []uint64{9}, make([]float32, 9)))
		case "transformer.h.1.ln_2.bias": // an integer type
			kept = append(kept, safetensors.Tensor{Name: x.Name, DType: safetensors.I32, Shape: []uint64{8}, Data: make([]byte, 32)})
		default:
			kept = append(kept, x)
		}
	}
	kept = append(kept, safetensors.F32Tensor("classifier.weight", []uint64{2}, []float32{1, 2}))
	_, err := Load(open(t, kept), g)
	var fe *failure.Error
	if !errors.As(err, &fe) || fe.Code != failure.InvalidWeights {
		t.Fatalf("%v", err)
	}
	for _, want := range []string{"1 missing: transformer.ln_f.bias [8]", "transformer.h.0.ln_1.weight is [9], the graph's h0.ln_1.w is [8]",
		"transformer.h.1.ln_2.bias is I32", "1 not parameters of the graph: classifier.weight"} {
		if !strings.Contains(fe.Message, want) {
			t.Errorf("the error does not say %q:\n%s", want, fe.Message)
		}
	}
	// BF16 and F16 widen: accepted.
	for i, x := range ts {
		if x.Name == "transformer.ln_f.bias" {
			ts[i] = safetensors.Tensor{Name: x.Name, DType: safetensors.BF16, Shape: x.Shape, Data: make([]byte, 16)}
		}
	}
	if w, err := Load(open(t, ts), g); err != nil || w["ln_f.b"][0] != 0 {
		t.Fatal(err)
	}
}

func TestIdsNaming(t *testing.T) {
	c := models.DefaultLlamaConfig()
	c.Layers, c.Hidden, c.Heads, c.KVHeads, c.Intermediate, c.Seq, c.Vocab, c.DType, c.Train = 1, 8, 2, 2, 16, 4, 16, ir.F32, true
	m, err := models.Llama(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	n := NamingOf(g)
	if n.Scheme != "ids" {
		t.Fatalf("llama named %s", n.Scheme)
	}
	for id, name := range n.Names {
		if id != name {
			t.Fatalf("%s named %s", id, name)
		}
	}
}
