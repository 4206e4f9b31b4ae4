package shard

import (
	"errors"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

func decodeResolve(t *testing.T, js string) *Spec {
	t.Helper()
	s, err := Decode([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestHashIgnoresSpelling: key order, omitted defaults, override order and
// a preset written out do not change shard_spec_hash.
func TestHashIgnoresSpelling(t *testing.T) {
	same := [][]string{
		{
			`{"world_size": 8, "data_parallel": {"degree": 4, "zero_stage": 2}, "tensor_parallel": {"degree": 2}, "preset": "gpt2"}`,
			`{"preset": "gpt2", "tensor_parallel": {"degree": 2}, "data_parallel": {"zero_stage": 2, "degree": 4}, "world_size": 8}`,
			// data-parallel degree derived, padding and layer pattern defaulted
			`{"world_size": 8, "data_parallel": {"zero_stage": 2}, "tensor_parallel": {"degree": 2}, "preset": "gpt2", "padding": "none",
			  "pipeline": {"layer_pattern": "^[^/]+/[A-Za-z_]*([0-9]+)\\."}}`,
			// the preset spelled out
			`{"world_size": 8, "data_parallel": {"degree": 4, "zero_stage": 2}, "tensor_parallel": {"degree": 2, "rules": [
			  {"match": "h*.attn.c_attn.w", "split": "column"}, {"match": "h*.attn.c_attn.b", "split": "column"},
			  {"match": "h*.attn.c_proj.w", "split": "row"},
			  {"match": "h*.mlp.c_fc.w", "split": "column"}, {"match": "h*.mlp.c_fc.b", "split": "column"},
			  {"match": "h*.mlp.c_proj.w", "split": "row"}, {"match": "wte", "split": "row"}]}}`,
		},
		{
			`{"world_size": 2, "overrides": [{"tensor": "wte", "zero": "replicate"}, {"tensor": "wpe", "tensor_parallel": "replicate"}]}`,
			`{"overrides": [{"tensor": "wpe", "tensor_parallel": "replicate"}, {"zero": "replicate", "tensor": "wte"}], "world_size": 2}`,
		},
	}
	for _, group := range same {
		want := decodeResolve(t, group[0]).Hash()
		for _, js := range group[1:] {
			if got := decodeResolve(t, js).Hash(); got != want {
				t.Errorf("hash %s, want %s for\n%s", got.Short(), want.Short(), js)
			}
		}
	}
}

// TestHashSeesEveryChange: each semantic change gives a new hash.
func TestHashSeesEveryChange(t *testing.T) {
	base := `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
	          "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "c", "zero": "replicate"}]}`
	changes := map[string]string{
		"world_size": `{"world_size": 32, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "c", "zero": "replicate"}]}`,
		"zero_stage": `{"world_size": 16, "data_parallel": {"zero_stage": 2}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "c", "zero": "replicate"}]}`,
		"degrees": `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 4, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "c", "zero": "replicate"}]}`,
		"rule split": `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "row"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "c", "zero": "replicate"}]}`,
		"rule order": `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "b", "split": "row"}, {"match": "a*", "split": "column"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "c", "zero": "replicate"}]}`,
		"stage boundary": `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 3], [3, 4]]}, "overrides": [{"tensor": "c", "zero": "replicate"}]}`,
		"layer pattern": `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]], "layer_pattern": "l([0-9]+)"}, "overrides": [{"tensor": "c", "zero": "replicate"}]}`,
		"sequence parallel": `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "c", "zero": "replicate"}], "sequence_parallel": true}`,
		"padding": `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "c", "zero": "replicate"}], "padding": "ceil"}`,
		"override": `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "d", "zero": "replicate"}]}`,
		"no override": `{"world_size": 16, "data_parallel": {"zero_stage": 1}, "tensor_parallel": {"degree": 2, "rules": [{"match": "a*", "split": "column"}, {"match": "b", "split": "row"}]},
		          "pipeline": {"stages": [[0, 2], [2, 4]]}}`,
	}
	seen := map[ir.Hash]string{decodeResolve(t, base).Hash(): "base"}
	for name, js := range changes {
		h := decodeResolve(t, js).Hash()
		if prev, dup := seen[h]; dup {
			t.Errorf("%s: same hash as %s", name, prev)
		}
		seen[h] = name
	}
	if NoShardSpec := planner.NoShardSpecHash; seen[NoShardSpec] != "" {
		t.Errorf("a spec hashes like no spec")
	}
}

// TestRankPlanHashes: ranks with identical views get identical layouts,
// and their plan hashes differ only through the rank in the preimage (spec
// II.K puts rank in tmmu_plan_hash); ranks with different views differ;
// the same view under another shard spec gets another plan hash.
func TestRankPlanHashes(t *testing.T) {
	m := tinyLlama()
	spec := &Spec{WorldSize: 8, DataParallel: DataParallel{ZeROStage: 3}, TensorParallel: TensorParallel{Degree: 2},
		Pipeline: Pipeline{Stages: []LayerRange{{First: 0, End: 2}, {First: 2, End: 4}}}, Preset: PresetLlama}
	gp, plans, err := PlanRanks(m, spec, planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range plans {
		for _, b := range plans {
			if a.Rank >= b.Rank {
				continue
			}
			sameView := a.ViewHash == b.ViewHash
			if sameView != (a.Coord.Stage == b.Coord.Stage) {
				t.Errorf("ranks %d %+v and %d %+v: view hashes equal = %v", a.Rank, a.Coord, b.Rank, b.Coord, sameView)
			}
			if a.Plan.PlanHash == b.Plan.PlanHash {
				t.Errorf("ranks %d and %d share a plan hash", a.Rank, b.Rank)
			}
			restamped, err := a.Plan.WithRank(b.Rank)
			if err != nil {
				t.Fatal(err)
			}
			if (restamped.PlanHash == b.Plan.PlanHash) != sameView {
				t.Errorf("ranks %d and %d: rank %d's plan restamped for rank %d matches = %v, views equal = %v", a.Rank, b.Rank, a.Rank, b.Rank, !sameView, sameView)
			}
		}
	}
	if gp.Hash != gp.ComputeHash() || gp.ShardSpecHash != must(spec.Resolve()).Hash() || gp.IRHash != m.IRHash() {
		t.Errorf("global plan hashes inconsistent: %+v", gp)
	}
	// Another rank's plan hash changes the global hash.
	changed := *gp
	changed.Ranks = append([]RankEntry(nil), gp.Ranks...)
	changed.Ranks[3].PlanHash[0] ^= 1
	if changed.ComputeHash() == gp.Hash {
		t.Error("global hash ignores rank plan hashes")
	}
	// dp 1 makes the ZeRO stage moot: the same view, another spec hash.
	a, err := PlanRank(m, &Spec{WorldSize: 2, TensorParallel: TensorParallel{Degree: 2}, Preset: PresetLlama}, 1, planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := PlanRank(m, &Spec{WorldSize: 2, TensorParallel: TensorParallel{Degree: 2}, Preset: PresetLlama, DataParallel: DataParallel{ZeROStage: 3}}, 1, planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a.ViewHash != b.ViewHash || a.Plan.PlanHash == b.Plan.PlanHash {
		t.Errorf("same view %v, same plan hash %v: the plan hash must cover shard_spec_hash", a.ViewHash == b.ViewHash, a.Plan.PlanHash == b.Plan.PlanHash)
	}
}

// TestBadSpecs: every validation rule names its problem.
func TestBadSpecs(t *testing.T) {
	gpt := tinyGPT2(101)
	for _, tc := range []struct {
		name, spec string
		want       string
	}{
		{"world size zero", `{"world_size": 0}`, "world_size must be positive"},
		{"degrees", `{"world_size": 8, "data_parallel": {"degree": 2}, "tensor_parallel": {"degree": 2}}`, "degrees do not multiply to world_size: data_parallel 2 × tensor_parallel 2 × pipeline stages 1 ≠ world_size 8"},
		{"degrees not divisible", `{"world_size": 6, "tensor_parallel": {"degree": 4}}`, "data_parallel 1 × tensor_parallel 4"},
		{"zero stage", `{"world_size": 1, "data_parallel": {"zero_stage": 4}}`, "zero_stage 4 is not 0, 1, 2 or 3"},
		{"sequence parallel alone", `{"world_size": 2, "sequence_parallel": true}`, "sequence_parallel needs a tensor_parallel degree above 1"},
		{"padding", `{"world_size": 1, "padding": "floor"}`, `padding "floor" is not "none" or "ceil"`},
		{"preset", `{"world_size": 1, "preset": "bert"}`, `unknown preset "bert"`},
		{"rule pattern", `{"world_size": 1, "tensor_parallel": {"rules": [{"match": "h[", "split": "row"}]}}`, `rules[0]: match "h[" is not a valid pattern`},
		{"rule split", `{"world_size": 1, "tensor_parallel": {"rules": [{"match": "wte", "split": "diagonal"}]}}`, `rules[0]: split "diagonal" is not`},
		{"empty stage", `{"world_size": 2, "pipeline": {"stages": [[0, 2], [2, 2]]}}`, "pipeline.stages[1] = [2, 2) holds no layer"},
		{"first stage", `{"world_size": 1, "pipeline": {"stages": [[1, 4]]}}`, "pipeline.stages[0] starts at layer 1"},
		{"gap", `{"world_size": 2, "pipeline": {"stages": [[0, 2], [3, 4]]}}`, "pipeline.stages[1] starts at layer 3 but stage 0 ends at 2"},
		{"layer pattern", `{"world_size": 1, "pipeline": {"layer_pattern": "h(["}}`, "is not a regular expression"},
		{"layer pattern group", `{"world_size": 1, "pipeline": {"layer_pattern": "h[0-9]+"}}`, "has no capture group"},
		{"override twice", `{"world_size": 1, "overrides": [{"tensor": "wte"}, {"tensor": "wte"}]}`, `tensor "wte" has two overrides`},
		{"override unnamed", `{"world_size": 1, "overrides": [{"zero": "replicate"}]}`, "overrides[0] names no tensor"},
		{"override split", `{"world_size": 1, "overrides": [{"tensor": "wte", "tensor_parallel": "both"}]}`, `override of "wte": tensor_parallel "both"`},
		{"override zero", `{"world_size": 1, "overrides": [{"tensor": "wte", "zero": "sometimes"}]}`, `override of "wte": zero "sometimes"`},
		{"unknown field", `{"world_size": 1, "zero": 3}`, `unknown field "zero"`},
		{"stage syntax", `{"world_size": 1, "pipeline": {"stages": [[0, 1, 2]]}}`, "a pipeline stage is [first_layer, end_layer]"},
		{"several at once", `{"world_size": 0, "data_parallel": {"zero_stage": -1}}`, "2 problems: world_size must be positive; data_parallel.zero_stage -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Decode([]byte(tc.spec))
			if err == nil {
				_, err = s.Resolve()
			}
			checkErr(t, err, tc.want)
		})
	}
	// Rules that need the IR.
	for _, tc := range []struct {
		name string
		spec Spec
		rank uint64
		want string
	}{
		{"override unknown tensor", Spec{WorldSize: 1, Overrides: []Override{{Tensor: "wtf", ZeRO: ZeROReplicate}}}, 0, `override names tensor "wtf", which the IR does not have`},
		{"override activation", Spec{WorldSize: 1, Overrides: []Override{{Tensor: "logits", TensorParallel: Column}}}, 0, `override names activation tensor "logits"`},
		{"rule matches nothing", Spec{WorldSize: 2, TensorParallel: TensorParallel{Degree: 2, Rules: []Rule{{"l*.attn.q_proj.w", Column}}}}, 0, `rules[0] (match "l*.attn.q_proj.w") matches no tensor`},
		{"rule matches activation", Spec{WorldSize: 2, TensorParallel: TensorParallel{Degree: 2, Rules: []Rule{{"h*.mlp.fc", Column}}}}, 0, `matches activation tensor "h0.mlp.fc"`},
		{"not divisible", Spec{WorldSize: 2, TensorParallel: TensorParallel{Degree: 2}, Preset: PresetGPT2}, 1, `tensor "wte": dimension 0 (101) is not divisible by tensor_parallel degree 2 (set padding "ceil" to round up)`},
		{"heads", Spec{WorldSize: 8, TensorParallel: TensorParallel{Degree: 8}, Preset: PresetGPT2, Padding: PadCeil}, 0, `heads 4 is not divisible by tensor_parallel degree 8`},
		{"stages short", Spec{WorldSize: 2, Pipeline: Pipeline{Stages: []LayerRange{{First: 0, End: 1}, {First: 1, End: 3}}}}, 0, "node \"fwd/h3.ln_1\" is in layer 3, which no pipeline stage holds"},
		{"stages long", Spec{WorldSize: 2, Pipeline: Pipeline{Stages: []LayerRange{{First: 0, End: 1}, {First: 1, End: 9}}}}, 0, "pipeline stages cover layers [0, 9) but the IR has layers [0, 4)"},
		{"pattern matches nothing", Spec{WorldSize: 2, Pipeline: Pipeline{Stages: []LayerRange{{First: 0, End: 1}, {First: 1, End: 4}}, LayerPattern: "^layer([0-9]+)$"}}, 0, "matches no node id"},
		{"rank", Spec{WorldSize: 2}, 2, "rank 2 is not below world_size 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RankView(gpt, &tc.spec, tc.rank)
			checkErr(t, err, tc.want)
		})
	}
	t.Run("scalar", func(t *testing.T) {
		m := &ir.Model{Tensors: []ir.Tensor{
			{ID: "s", Shape: []uint64{}, DType: ir.F32, Role: ir.Parameter},
			{ID: "y", Shape: []uint64{}, DType: ir.F32, Role: ir.Output},
		}, Nodes: []ir.Node{{ID: "n", Op: "copy", Inputs: []string{"s"}, Outputs: []string{"y"}}}}
		_, err := RankView(m, &Spec{WorldSize: 2, TensorParallel: TensorParallel{Degree: 2, Rules: []Rule{{"s", Column}}}}, 0)
		checkErr(t, err, `tensor "s" is a scalar and cannot be split column`)
	})
	t.Run("bad IR keeps its code", func(t *testing.T) {
		m := &ir.Model{Tensors: []ir.Tensor{{ID: "x", Shape: []uint64{2}, DType: "fp13", Role: ir.Input}}}
		_, err := RankView(m, &Spec{WorldSize: 1}, 0)
		if !errors.Is(err, failure.InvalidIRShapes) {
			t.Errorf("got %v, want INVALID_IR_SHAPES", err)
		}
	})
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	if !errors.Is(err, failure.InvalidShardSpec) && !errors.Is(err, failure.InvalidEncoding) {
		t.Errorf("error %v has neither INVALID_SHARD_SPEC nor INVALID_ENCODING", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}
