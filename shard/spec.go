package shard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// Operator names used in failures.
const (
	OpResolve  = "UML_OS.TMMU.ResolveShardSpec_v1"
	OpRankView = "UML_OS.TMMU.RankView_v1"
)

// Spec is a shard specification: how a job's world of ranks splits into
// data-parallel, tensor-parallel and pipeline groups, and how tensors are
// partitioned over them. It is what users write (JSON or CBOR, snake_case
// fields); Resolve validates it and fills in defaults, and Hash is the
// shard_spec_hash of the resolved form.
type Spec struct {
	// WorldSize is the number of ranks; it must equal
	// DataParallel.Degree × TensorParallel.Degree × pipeline stages.
	WorldSize      uint64         `json:"world_size" cbor:"world_size"`
	DataParallel   DataParallel   `json:"data_parallel" cbor:"data_parallel"`
	TensorParallel TensorParallel `json:"tensor_parallel" cbor:"tensor_parallel"`
	Pipeline       Pipeline       `json:"pipeline" cbor:"pipeline"`
	// SequenceParallel splits the activations between tensor-parallel
	// regions along the sequence dimension (dimension 1) over the
	// tensor-parallel group, as Megatron-LM's sequence parallelism does:
	// partial results are reduce-scattered instead of all-reduced, and
	// gathered again before a column-parallel matmul. Needs a
	// tensor-parallel degree above 1.
	SequenceParallel bool `json:"sequence_parallel,omitempty" cbor:"sequence_parallel"`
	// Padding says what happens when a tensor-parallel split does not
	// divide a dimension: PadNone (the default) rejects the spec,
	// PadCeil gives every rank ceil(d/degree) (Megatron pads its
	// vocabulary this way). ZeRO partitions always pad: each rank holds
	// ceil(numel/degree) elements of a partitioned tensor.
	Padding Padding `json:"padding,omitempty" cbor:"padding"`
	// Overrides change the sharding of single tensors, named exactly. Their
	// order carries no meaning (Resolve sorts them by tensor).
	Overrides []Override `json:"overrides,omitempty" cbor:"overrides"`
	// Preset names a model family (PresetGPT2, PresetLlama) whose
	// tensor-parallel rules are appended after the spec's own rules.
	// Resolve expands it and clears it, so a spec written with a preset
	// and the same spec spelled out have the same hash.
	Preset string `json:"preset,omitempty" cbor:"preset,omitempty"`
}

// DataParallel configures the data-parallel group and its ZeRO stage.
type DataParallel struct {
	// Degree is the number of data-parallel ranks; 0 means
	// world_size / (tensor degree × pipeline stages).
	Degree uint64 `json:"degree,omitempty" cbor:"degree"`
	// ZeROStage partitions model state over the data-parallel group as
	// DeepSpeed's stages do: 0 nothing, 1 optimizer state, 2 optimizer
	// state and gradients, 3 optimizer state, gradients and parameters.
	ZeROStage int `json:"zero_stage,omitempty" cbor:"zero_stage"`
}

// TensorParallel configures Megatron-style tensor parallelism.
type TensorParallel struct {
	// Degree is the number of tensor-parallel ranks; 0 means 1.
	Degree uint64 `json:"degree,omitempty" cbor:"degree"`
	// Rules split persistent tensors (parameters) whose id matches: the
	// first matching rule wins, and tensors no rule matches are
	// replicated. Activations and gradients are not named: their splits
	// follow from the operators that produce them.
	Rules []Rule `json:"rules,omitempty" cbor:"rules"`
}

// Rule splits the persistent tensors whose id matches Match (path.Match
// syntax: "h*.attn.c_attn.w").
type Rule struct {
	Match string `json:"match" cbor:"match"`
	Split Split  `json:"split" cbor:"split"`
}

// Split is how a tensor is split over the tensor-parallel group.
type Split string

// Splits. A matmul weight [K,N] split by column is column-parallel (each
// rank computes N/degree outputs), split by row it is row-parallel (each
// rank sums K/degree inputs, and the partial results are all-reduced). A
// bias [N] of a column-parallel layer is split by column as well. An
// embedding table [V,H] split by row is vocabulary-parallel.
const (
	Replicate Split = "replicate" // every rank holds the whole tensor
	Column    Split = "column"    // split along the last dimension
	Row       Split = "row"       // split along the first dimension
)

// Padding is the rule for tensor-parallel splits that do not divide.
type Padding string

// Paddings.
const (
	PadNone Padding = "none"
	PadCeil Padding = "ceil"
)

// ZeRO placement of a tensor in an Override.
const (
	ZeROPartition = "partition" // follow the stage (the default)
	ZeROReplicate = "replicate" // never partition this tensor's model state
)

// Override changes the sharding of one tensor (a parameter).
type Override struct {
	Tensor string `json:"tensor" cbor:"tensor"`
	// TensorParallel replaces the split the rules give ("" keeps it).
	TensorParallel Split `json:"tensor_parallel,omitempty" cbor:"tensor_parallel,omitempty"`
	// ZeRO is ZeROPartition (default) or ZeROReplicate: keep this
	// parameter, its gradient and its optimizer state whole on every
	// data-parallel rank whatever the stage.
	ZeRO string `json:"zero,omitempty" cbor:"zero,omitempty"`
}

// Pipeline configures pipeline parallelism: each stage holds a contiguous
// range of layers.
type Pipeline struct {
	// Stages lists each stage's layers as [first, end); they must be
	// contiguous, non-empty and start at layer 0. Empty means one stage.
	Stages []LayerRange `json:"stages,omitempty" cbor:"stages"`
	// LayerPattern is a regular expression applied to node ids; its first
	// capture group is the node's decimal layer index. The default,
	// DefaultLayerPattern, reads the layer of tmmu's generated models
	// (fwd/h3.attn.c_attn, bwd/l12.mlp.down_proj.dw, opt/h0.ln_1.w).
	// Nodes without a layer run on the first stage when they come before
	// the layers (forward) or after them (backward), and on the last stage
	// otherwise; an optimizer node runs on every stage that holds its
	// parameter.
	LayerPattern string `json:"layer_pattern,omitempty" cbor:"layer_pattern"`
}

// LayerRange is the layers [First, End) of a pipeline stage. It encodes as
// a two-element array.
type LayerRange struct {
	_     struct{} `cbor:",toarray"`
	First uint64
	End   uint64
}

// MarshalJSON writes [first, end].
func (r LayerRange) MarshalJSON() ([]byte, error) { return json.Marshal([2]uint64{r.First, r.End}) }

// UnmarshalJSON reads [first, end].
func (r *LayerRange) UnmarshalJSON(b []byte) error {
	var a []uint64
	if err := json.Unmarshal(b, &a); err != nil || len(a) != 2 {
		return fmt.Errorf("a pipeline stage is [first_layer, end_layer], got %s", b)
	}
	r.First, r.End = a[0], a[1]
	return nil
}

// DefaultLayerPattern is Pipeline.LayerPattern's default: the digits after
// the leading letters of the first component after the phase prefix, when
// a dot follows them.
const DefaultLayerPattern = `^[^/]+/[A-Za-z_]*([0-9]+)\.`

// Model-family presets for TensorParallel rules.
const (
	PresetGPT2  = "gpt2"
	PresetLlama = "llama"
)

// Presets lists the preset names.
var Presets = []string{PresetGPT2, PresetLlama}

// presetRules are Megatron-LM's splits for the two generated families:
// column-parallel QKV and MLP-up projections, row-parallel output and
// MLP-down projections, a vocabulary-parallel embedding and lm_head.
func presetRules(name string) []Rule {
	switch name {
	case PresetGPT2:
		return []Rule{
			{"h*.attn.c_attn.w", Column}, {"h*.attn.c_attn.b", Column},
			{"h*.attn.c_proj.w", Row},
			{"h*.mlp.c_fc.w", Column}, {"h*.mlp.c_fc.b", Column},
			{"h*.mlp.c_proj.w", Row},
			{"wte", Row},
		}
	case PresetLlama:
		return []Rule{
			{"l*.attn.q_proj.w", Column}, {"l*.attn.k_proj.w", Column}, {"l*.attn.v_proj.w", Column},
			{"l*.attn.o_proj.w", Row},
			{"l*.mlp.gate_proj.w", Column}, {"l*.mlp.up_proj.w", Column},
			{"l*.mlp.down_proj.w", Row},
			{"embed_tokens.w", Row}, {"lm_head.w", Column},
		}
	}
	return nil
}

// Decode reads a spec written as JSON (first non-space byte '{') or CBOR.
// Unknown fields are errors (INVALID_ENCODING). It checks the encoding
// only; Resolve checks the content.
func Decode(data []byte) (*Spec, error) {
	var s Spec
	if ir.IsJSON(data) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err := dec.Decode(&s)
		if err == nil {
			if _, tok := dec.Token(); tok != io.EOF {
				err = errors.New("trailing data after the spec")
			}
		}
		if err != nil {
			return nil, failure.New(failure.InvalidEncoding, OpResolve, "cannot decode json shard spec: "+err.Error()).Wrap(err)
		}
		return &s, nil
	}
	if err := ir.UnmarshalCBOR(data, &s); err != nil {
		return nil, failure.New(failure.InvalidEncoding, OpResolve, "cannot decode cbor shard spec: "+err.Error()).Wrap(err)
	}
	return &s, nil
}

// Resolve validates s and returns its resolved form: degrees filled in
// (data-parallel from the world size, tensor-parallel 1, one pipeline
// stage), the preset expanded into rules, the default layer pattern and
// padding, overrides sorted by tensor. It reports every problem at once as
// one INVALID_SHARD_SPEC error. s is not modified.
func (s *Spec) Resolve() (*Spec, error) {
	r := *s
	r.TensorParallel.Rules = slices.Clone(s.TensorParallel.Rules)
	r.Pipeline.Stages = slices.Clone(s.Pipeline.Stages)
	r.Overrides = slices.Clone(s.Overrides)
	var p problems

	if r.WorldSize == 0 {
		p.add("world_size must be positive")
	}
	if r.TensorParallel.Degree == 0 {
		r.TensorParallel.Degree = 1
	}
	stages := uint64(max(len(r.Pipeline.Stages), 1))
	if r.DataParallel.Degree == 0 && r.WorldSize != 0 {
		if r.WorldSize%(r.TensorParallel.Degree*stages) == 0 {
			r.DataParallel.Degree = r.WorldSize / (r.TensorParallel.Degree * stages)
		}
	}
	if r.DataParallel.Degree == 0 {
		r.DataParallel.Degree = 1
	}
	if prod, ok := mul3(r.DataParallel.Degree, r.TensorParallel.Degree, stages); r.WorldSize != 0 && (!ok || prod != r.WorldSize) {
		p.add("degrees do not multiply to world_size: data_parallel %d × tensor_parallel %d × pipeline stages %d ≠ world_size %d",
			r.DataParallel.Degree, r.TensorParallel.Degree, stages, r.WorldSize)
	}
	if r.DataParallel.ZeROStage < 0 || r.DataParallel.ZeROStage > 3 {
		p.add("data_parallel.zero_stage %d is not 0, 1, 2 or 3", r.DataParallel.ZeROStage)
	}
	if r.SequenceParallel && r.TensorParallel.Degree < 2 {
		p.add("sequence_parallel needs a tensor_parallel degree above 1 (it splits activations over the tensor-parallel group)")
	}
	switch r.Padding {
	case "":
		r.Padding = PadNone
	case PadNone, PadCeil:
	default:
		p.add("padding %q is not %q or %q", r.Padding, PadNone, PadCeil)
	}
	if r.Preset != "" {
		rules := presetRules(r.Preset)
		if rules == nil {
			p.add("unknown preset %q (presets: %s)", r.Preset, strings.Join(Presets, ", "))
		}
		r.TensorParallel.Rules = append(r.TensorParallel.Rules, rules...)
		r.Preset = ""
	}
	if len(r.TensorParallel.Rules) == 0 {
		r.TensorParallel.Rules = nil
	}
	for i, rule := range r.TensorParallel.Rules {
		if _, err := path.Match(rule.Match, ""); err != nil || rule.Match == "" {
			p.add("tensor_parallel.rules[%d]: match %q is not a valid pattern", i, rule.Match)
		}
		if !rule.Split.valid() {
			p.add("tensor_parallel.rules[%d]: split %q is not %q, %q or %q", i, rule.Split, Column, Row, Replicate)
		}
	}
	for i, st := range r.Pipeline.Stages {
		switch {
		case st.End <= st.First:
			p.add("pipeline.stages[%d] = [%d, %d) holds no layer", i, st.First, st.End)
		case i == 0 && st.First != 0:
			p.add("pipeline.stages[0] starts at layer %d; the first stage starts at layer 0", st.First)
		case i > 0 && st.First != r.Pipeline.Stages[i-1].End:
			p.add("pipeline.stages[%d] starts at layer %d but stage %d ends at %d; stages must be contiguous", i, st.First, i-1, r.Pipeline.Stages[i-1].End)
		}
	}
	if len(r.Pipeline.Stages) == 0 {
		r.Pipeline.Stages = nil
	}
	if r.Pipeline.LayerPattern == "" {
		r.Pipeline.LayerPattern = DefaultLayerPattern
	}
	if re, err := regexp.Compile(r.Pipeline.LayerPattern); err != nil {
		p.add("pipeline.layer_pattern %q is not a regular expression: %v", r.Pipeline.LayerPattern, err)
	} else if re.NumSubexp() < 1 {
		p.add("pipeline.layer_pattern %q has no capture group for the layer index", r.Pipeline.LayerPattern)
	}
	slices.SortStableFunc(r.Overrides, func(a, b Override) int { return strings.Compare(a.Tensor, b.Tensor) })
	for i, o := range r.Overrides {
		if o.Tensor == "" {
			p.add("overrides[%d] names no tensor", i)
		}
		if i > 0 && o.Tensor == r.Overrides[i-1].Tensor {
			p.add("tensor %q has two overrides", o.Tensor)
		}
		if o.TensorParallel != "" && !o.TensorParallel.valid() {
			p.add("override of %q: tensor_parallel %q is not %q, %q or %q", o.Tensor, o.TensorParallel, Column, Row, Replicate)
		}
		if o.ZeRO != "" && o.ZeRO != ZeROPartition && o.ZeRO != ZeROReplicate {
			p.add("override of %q: zero %q is not %q or %q", o.Tensor, o.ZeRO, ZeROPartition, ZeROReplicate)
		}
	}
	if len(r.Overrides) == 0 {
		r.Overrides = nil
	}
	if err := p.err(OpResolve); err != nil {
		return nil, err
	}
	return &r, nil
}

func (s Split) valid() bool { return s == Column || s == Row || s == Replicate }

func mul3(a, b, c uint64) (uint64, bool) {
	ab, ok := ir.Numel([]uint64{a, b, c})
	return ab, ok
}

// Stages returns the number of pipeline stages of a resolved spec.
func (s *Spec) Stages() uint64 { return uint64(max(len(s.Pipeline.Stages), 1)) }

// Hash returns shard_spec_hash (spec II.K): SHA-256 over the canonical
// CBOR (RFC 8949 core deterministic encoding) of the spec. Hash the
// resolved spec: its fields are explicit, so specs that differ only in key
// order, omitted defaults, override order or a preset written out give the
// same hash.
func (s *Spec) Hash() ir.Hash {
	h, err := ir.Sum(s)
	if err != nil {
		panic("shard: hashing a spec: " + err.Error()) // strings, ints and bools always encode
	}
	return h
}

// Coord is a rank's place in the job: its pipeline stage, its
// data-parallel index and its tensor-parallel index. Ranks are numbered
// Megatron-LM's way, tensor-parallel fastest, then data-parallel, then
// pipeline: rank = (stage × dp + data) × tp + tensor.
type Coord struct {
	Stage  uint64 `json:"stage" cbor:"stage"`
	Data   uint64 `json:"data" cbor:"data"`
	Tensor uint64 `json:"tensor" cbor:"tensor"`
}

// Coord returns the coordinates of rank in a resolved spec.
func (s *Spec) Coord(rank uint64) (Coord, error) {
	if rank >= s.WorldSize {
		return Coord{}, failure.New(failure.InvalidShardSpec, OpRankView,
			fmt.Sprintf("rank %d is not below world_size %d", rank, s.WorldSize), "rank", rank, "world_size", s.WorldSize)
	}
	tp, dp := s.TensorParallel.Degree, s.DataParallel.Degree
	return Coord{Stage: rank / (tp * dp), Data: rank / tp % dp, Tensor: rank % tp}, nil
}

// problems collects validation messages into one failure.
type problems struct{ msgs []string }

func (p *problems) add(format string, args ...any) {
	p.msgs = append(p.msgs, fmt.Sprintf(format, args...))
}

func (p *problems) err(op string) error {
	if len(p.msgs) == 0 {
		return nil
	}
	msg := p.msgs[0]
	if len(p.msgs) > 1 {
		msg = fmt.Sprintf("%d problems: %s", len(p.msgs), strings.Join(p.msgs, "; "))
	}
	return failure.New(failure.InvalidShardSpec, op, msg)
}
