// Package weights maps a graph's parameters to the names they carry
// outside tmmu, loads initial weights from a safetensors file and
// writes trained ones to one.
//
// # Names
//
// A graph imported from PyTorch (tmmu import torch) names every
// parameter and buffer as the module's state_dict does
// ("layer1.0.conv1.weight", "bn1.running_mean"): those ids are the
// names. The GPT-2 generator's parameters take Hugging Face's GPT-2
// names (GPT2LMHeadModel without its tied lm_head):
//
//	wte, wpe                 transformer.wte.weight, transformer.wpe.weight
//	h<i>.ln_1.w / .b         transformer.h.<i>.ln_1.weight / .bias
//	h<i>.attn.c_attn.w / .b  transformer.h.<i>.attn.c_attn.weight / .bias   [H,3H], x·w + b
//	h<i>.attn.c_proj.w / .b  transformer.h.<i>.attn.c_proj.weight / .bias
//	h<i>.ln_2.w / .b         transformer.h.<i>.ln_2.weight / .bias
//	h<i>.mlp.c_fc.w / .b     transformer.h.<i>.mlp.c_fc.weight / .bias      [H,4H]
//	h<i>.mlp.c_proj.w / .b   transformer.h.<i>.mlp.c_proj.weight / .bias    [4H,H]
//	ln_f.w / .b              transformer.ln_f.weight / .bias
//
// The shapes are Hugging Face's too (its Conv1D stores [in, out], as
// tmmu's y = x·w does), so its checkpoints load as they are. Load also
// takes GPT2Model's names (without "transformer.") and skips the
// entries that are not parameters there: the attention masks
// (h.<i>.attn.bias, h.<i>.attn.masked_bias) and the tied lm_head.weight.
// Any other graph (the Llama generator, hand-written IRs) uses its ids.
//
// # Loading
//
// Load reads every parameter of the graph from the file and reports, in
// one INVALID_WEIGHTS error, every tensor that is missing, extra, of
// another shape or of a dtype that does not widen to fp32 (F32, F16 and
// BF16 do). Nothing is loaded unless everything fits.
package weights

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/safetensors"
)

// Operator names the package in its failures.
const Operator = "tmmu.weights"

// Naming is how a graph's parameters are named outside tmmu.
type Naming struct {
	// Scheme is "gpt2" (the generator's GPT-2, Hugging Face names) or
	// "ids" (the tensor ids).
	Scheme string
	// Names maps each parameter id to its name.
	Names map[string]string
	// ids lists the parameters in id order.
	ids []string
}

// Params lists the graph's parameters in id order.
func (n Naming) Params() []string { return n.ids }

var gpt2Layer = regexp.MustCompile(`^h(\d+)\.(ln_1|ln_2|attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.([wb])$`)

// gpt2Name is the Hugging Face name of a GPT-2 generator parameter, or
// "" when id is not one.
func gpt2Name(id string) string {
	suffix := func(c string) string {
		if c == "w" {
			return "weight"
		}
		return "bias"
	}
	switch id {
	case "wte", "wpe":
		return "transformer." + id + ".weight"
	case "ln_f.w", "ln_f.b":
		return "transformer.ln_f." + suffix(id[len(id)-1:])
	}
	if m := gpt2Layer.FindStringSubmatch(id); m != nil {
		return fmt.Sprintf("transformer.h.%s.%s.%s", m[1], m[2], suffix(m[3]))
	}
	return ""
}

// NamingOf returns the naming of g's parameters: GPT-2's when every
// parameter is a GPT-2 generator parameter (and wte is one), else the
// ids.
func NamingOf(g *ir.Graph) Naming {
	n := Naming{Scheme: "gpt2", Names: map[string]string{}}
	for i := range g.Tensors {
		if t := &g.Tensors[i]; t.Role == ir.Parameter {
			n.ids = append(n.ids, t.ID)
		}
	}
	for _, id := range n.ids {
		name := gpt2Name(id)
		if name == "" {
			n.Scheme = "ids"
			break
		}
		n.Names[id] = name
	}
	if n.Scheme == "gpt2" && n.Names["wte"] == "" {
		n.Scheme = "ids"
	}
	if n.Scheme == "ids" {
		for _, id := range n.ids {
			n.Names[id] = id
		}
	}
	return n
}

// gpt2Skip matches the entries of Hugging Face GPT-2 files that are not
// parameters of tmmu's GPT-2: attention mask buffers and the tied head.
var gpt2Skip = regexp.MustCompile(`^(transformer\.)?h\.\d+\.attn\.(masked_)?bias$|^lm_head\.weight$`)

// Check checks f's header against g's parameters (see Load), reading
// no tensor data.
func Check(f *safetensors.File, g *ir.Graph) error {
	_, err := match(f, g)
	return err
}

// Load reads g's parameters from f, whole (a rank holding a ZeRO
// partition cuts its part; engine.Options.Weights). The result maps
// parameter ids to their values.
func Load(f *safetensors.File, g *ir.Graph) (map[string][]float32, error) {
	infos, err := match(f, g)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]float32, len(infos))
	for id, info := range infos {
		v, err := values(f, info)
		if err != nil {
			return nil, err
		}
		out[id] = v
	}
	return out, nil
}

// fits says whether a file's tensor of type d can stand for a parameter
// of dtype t: floats for floats (widened exactly), integers for integers.
func fits(d safetensors.DType, t ir.DType) bool {
	switch t {
	case ir.I64, ir.I32, ir.U8, ir.Bool:
		return d == safetensors.I64 || d == safetensors.I32 || d == safetensors.U8 || d == safetensors.Bool
	}
	return safetensors.Widens(d)
}

// values reads a tensor as float32 values (integers converted; the
// engine writes them back in their dtype).
func values(f *safetensors.File, info safetensors.Info) ([]float32, error) {
	if safetensors.Widens(info.DType) {
		return f.Float32s(info)
	}
	b, err := f.Read(info)
	if err != nil {
		return nil, err
	}
	v := make([]float32, info.Elements())
	for i := range v {
		switch info.DType {
		case safetensors.I64:
			v[i] = float32(int64(binary.LittleEndian.Uint64(b[8*i:])))
		case safetensors.I32:
			v[i] = float32(int32(binary.LittleEndian.Uint32(b[4*i:])))
		default:
			v[i] = float32(b[i])
		}
	}
	return v, nil
}

// match pairs every parameter of g with its tensor in f, or reports
// every problem at once.
func match(f *safetensors.File, g *ir.Graph) (map[string]safetensors.Info, error) {
	n := NamingOf(g)
	// In a GPT2Model file the names lack "transformer.".
	prefix := ""
	if n.Scheme == "gpt2" {
		if _, ok := f.Lookup("transformer.wte.weight"); !ok {
			if _, ok := f.Lookup("wte.weight"); ok {
				prefix = "transformer."
			}
		}
	}
	used := map[string]bool{}
	var missing, shapes, dtypes []string
	out := map[string]safetensors.Info{}
	for _, id := range n.ids {
		name := strings.TrimPrefix(n.Names[id], prefix)
		ti, _ := g.TensorIndex(id)
		t := &g.Tensors[ti]
		info, ok := f.Lookup(name)
		if !ok {
			missing = append(missing, fmt.Sprintf("%s %v", name, t.Shape))
			continue
		}
		used[name] = true
		switch {
		case !slices.Equal(info.Shape, t.Shape):
			shapes = append(shapes, fmt.Sprintf("%s is %v, the graph's %s is %v", name, info.Shape, id, t.Shape))
		case !fits(info.DType, t.DType):
			dtypes = append(dtypes, fmt.Sprintf("%s is %s, the graph's %s is %s", name, info.DType, id, t.DType))
		default:
			out[id] = info
		}
	}
	var extra []string
	for _, info := range f.Tensors {
		if used[info.Name] || (n.Scheme == "gpt2" && gpt2Skip.MatchString(info.Name)) {
			continue
		}
		extra = append(extra, info.Name)
	}
	if len(missing)+len(shapes)+len(dtypes)+len(extra) == 0 {
		return out, nil
	}
	var parts []string
	add := func(what string, list []string) {
		if len(list) == 0 {
			return
		}
		more := ""
		if len(list) > 20 {
			more = fmt.Sprintf(" and %d more", len(list)-20)
			list = list[:20]
		}
		parts = append(parts, fmt.Sprintf("%d %s: %s%s", len(list), what, strings.Join(list, ", "), more))
	}
	add("missing", missing)
	add("of another shape", shapes)
	add("of a dtype that does not fit (fp32 parameters take F32, F16 or BF16; integer ones I64, I32 or U8)", dtypes)
	add("not parameters of the graph", extra)
	e := failure.New(failure.InvalidWeights, Operator,
		fmt.Sprintf("the weights do not fit %s's %d parameters (names: %s): %s", g.Name, len(n.ids), n.Scheme, strings.Join(parts, "; ")))
	if len(missing) > 0 {
		e.With("missing", len(missing))
	}
	if len(extra) > 0 {
		e.With("extra", len(extra))
	}
	return nil, e
}

// stDType is the safetensors type of an IR dtype.
var stDType = map[ir.DType]safetensors.DType{ir.F32: safetensors.F32, ir.F16: safetensors.F16, ir.BF16: safetensors.BF16, ir.F64: safetensors.F64,
	ir.I64: safetensors.I64, ir.I32: safetensors.I32, ir.I16: safetensors.I16, ir.I8: safetensors.I8, ir.U8: safetensors.U8, ir.Bool: safetensors.Bool}

// Export returns the safetensors tensors of a whole (unpartitioned)
// state: every parameter under its name, in its dtype, and with
// optimizer true the AdamW moments too, as "<name>.exp_avg" and
// "<name>.exp_avg_sq". words maps tensor ids to their little-endian
// 32-bit words (an int64 takes two, a byte a quarter of one); the
// optimizer state of parameter p is looked up under the generators' ids
// (adam.m/p, adam.v/p) and the importer's (p.exp_avg, p.exp_avg_sq).
func Export(g *ir.Graph, words map[string][]uint32, optimizer bool) ([]safetensors.Tensor, error) {
	n := NamingOf(g)
	var out []safetensors.Tensor
	tensor := func(name, id string, shape []uint64, dt ir.DType) (safetensors.Tensor, error) {
		w, ok := words[id]
		if !ok {
			return safetensors.Tensor{}, fmt.Errorf("weights: the state has no tensor %q", id)
		}
		st, ok := stDType[dt]
		if !ok {
			return safetensors.Tensor{}, fmt.Errorf("weights: %q is %s, which safetensors has no type for", id, dt)
		}
		numel, _ := ir.Numel(shape)
		size := numel * st.Size()
		b := make([]byte, 4*len(w))
		for i, x := range w {
			binary.LittleEndian.PutUint32(b[4*i:], x)
		}
		if uint64(len(b)) < size {
			return safetensors.Tensor{}, fmt.Errorf("weights: %q holds %d bytes, its %d elements of %s take %d", id, len(b), numel, dt, size)
		}
		return safetensors.Tensor{Name: name, DType: st, Shape: shape, Data: b[:size]}, nil
	}
	for _, id := range n.ids {
		ti, _ := g.TensorIndex(id)
		t := &g.Tensors[ti]
		x, err := tensor(n.Names[id], id, t.Shape, t.DType)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
		if !optimizer || t.DType != ir.F32 {
			continue
		}
		for _, m := range [][3]string{{"adam.m/" + id, id + ".exp_avg", ".exp_avg"}, {"adam.v/" + id, id + ".exp_avg_sq", ".exp_avg_sq"}} {
			sid := m[0]
			if _, ok := words[sid]; !ok {
				sid = m[1]
			}
			if _, ok := words[sid]; !ok {
				return nil, fmt.Errorf("weights: the state has no %s of %q (optimizer state is written for AdamW)", m[2][1:], id)
			}
			x, err := tensor(n.Names[id]+m[2], sid, t.Shape, ir.F32)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
	}
	return out, nil
}
