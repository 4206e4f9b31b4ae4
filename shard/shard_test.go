package shard

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
)

// Mixed-precision training graphs: bf16 parameters and gradients, fp32
// master weights, m and v (16 bytes a parameter).
var (
	gpt2Once, llamaOnce sync.Once
	gpt2Model, llamaMod *ir.Model
)

func gpt2Small(t testing.TB) *ir.Model {
	gpt2Once.Do(func() {
		c := models.DefaultGPT2Config()
		c.DType, c.Train = ir.BF16, true
		gpt2Model = must(models.GPT2(c))
	})
	return gpt2Model
}

func llama7B(t testing.TB) *ir.Model {
	llamaOnce.Do(func() {
		c := models.DefaultLlamaConfig()
		c.DType, c.Train = ir.BF16, true
		llamaMod = must(models.Llama(c))
	})
	return llamaMod
}

func tinyGPT2(vocab uint64) *ir.Model {
	return must(models.GPT2(models.GPT2Config{Layers: 4, Hidden: 64, Heads: 4, Seq: 16, Context: 32, Batch: 2, Vocab: vocab, DType: ir.BF16, Train: true}))
}

func tinyLlama() *ir.Model {
	return must(models.Llama(models.LlamaConfig{Layers: 4, Hidden: 64, Heads: 8, KVHeads: 4, Intermediate: 96, Vocab: 128, Seq: 16, Batch: 2, DType: ir.BF16, Train: true}))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func tensorsByID(m *ir.Model) map[string]*ir.Tensor {
	out := make(map[string]*ir.Tensor, len(m.Tensors))
	for i := range m.Tensors {
		out[m.Tensors[i].ID] = &m.Tensors[i]
	}
	return out
}

func bytesOf(t *ir.Tensor) uint64 {
	b, _ := t.Bytes()
	return b
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// TestZeROAccounting checks every rank's model state against DeepSpeed's
// ZeRO accounting for GPT-2 small and Llama-2-7B in mixed-precision Adam:
// stage 0: 16Ψ; 1: 4Ψ + 12Ψ/N; 2: 2Ψ + 14Ψ/N; 3: 16Ψ/N. Each partition
// rounds its tensor up to whole elements per rank, so the view may exceed
// the closed form by less than 16 bytes a parameter tensor; the exact
// per-tensor sum is checked too.
func TestZeROAccounting(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    func(testing.TB) *ir.Model
	}{{"gpt2-small", gpt2Small}, {"llama-7b", llama7B},
		// Vocabulary 101 and odd layer norms: partitions that pad.
		{"gpt2-tiny-padded", func(testing.TB) *ir.Model {
			return must(models.GPT2(models.GPT2Config{Layers: 2, Hidden: 36, Heads: 4, Seq: 8, Context: 9, Batch: 1, Vocab: 101, DType: ir.F16, Train: true}))
		}}} {
		m := tc.m(t)
		var psi uint64
		var numels []uint64
		for _, x := range m.Tensors {
			if x.Role == ir.Parameter {
				n, _ := ir.Numel(x.Shape)
				psi += n
				numels = append(numels, n)
			}
		}
		for _, n := range []uint64{1, 2, 8, 64} {
			for stage := range 4 {
				t.Run(fmt.Sprintf("%s/N=%d/zero%d", tc.name, n, stage), func(t *testing.T) {
					spec := &Spec{WorldSize: n, DataParallel: DataParallel{Degree: n, ZeROStage: stage}}
					v, err := RankView(m, spec, n-1)
					if err != nil {
						t.Fatal(err)
					}
					closed := map[int]uint64{0: 16 * psi, 1: 4*psi + 12*psi/n, 2: 2*psi + 14*psi/n, 3: 16 * psi / n}[stage]
					var exact uint64
					for _, k := range numels {
						part := k
						if n > 1 {
							part = ceilDiv(k, n)
						}
						switch stage {
						case 0:
							exact += 16 * k
						case 1:
							exact += 4*k + 12*part
						case 2:
							exact += 2*k + 14*part
						case 3:
							exact += 16 * part
						}
					}
					got := v.ModelState.Total()
					if got != exact {
						t.Errorf("model state %d bytes, want %d (per-tensor partitions)", got, exact)
					}
					if got < closed || got-closed >= 16*uint64(len(numels)) {
						t.Errorf("model state %d bytes, closed form %d: padding %d exceeds the bound %d", got, closed, got-closed, 16*len(numels))
					}
					t.Logf("Ψ=%d N=%d stage %d: %d bytes (closed form %d, padding %d)", psi, n, stage, got, closed, got-closed)
				})
			}
		}
	}
}

// TestModelStateIsWhatThePlanHolds checks that the parameter and optimizer
// arenas of a rank's plan hold exactly the view's model state (persistent
// tensors are live together, so the arenas' lower bounds are their sums).
func TestModelStateIsWhatThePlanHolds(t *testing.T) {
	m := tinyGPT2(128)
	for stage := range 4 {
		spec := &Spec{WorldSize: 4, DataParallel: DataParallel{ZeROStage: stage}, TensorParallel: TensorParallel{Degree: 2}, Preset: PresetGPT2}
		rp, err := PlanRank(m, spec, 3, planner.Options{})
		if err != nil {
			t.Fatal(err)
		}
		lb := map[string]uint64{}
		for _, a := range rp.Plan.Arenas {
			lb[a.Name] = a.LowerBoundBytes
		}
		if lb[ir.ArenaParameters] != rp.ModelState.Parameters || lb[ir.ArenaOptimizerState] != rp.ModelState.OptimizerState {
			t.Errorf("zero %d: arenas hold parameters %d, optimizer state %d; model state says %+v", stage, lb[ir.ArenaParameters], lb[ir.ArenaOptimizerState], rp.ModelState)
		}
	}
}

// TestTensorParallelShapes checks Megatron's per-rank weight shapes.
func TestTensorParallelShapes(t *testing.T) {
	t.Run("gpt2-small/tp2", func(t *testing.T) {
		spec := &Spec{WorldSize: 2, TensorParallel: TensorParallel{Degree: 2}, Preset: PresetGPT2, Padding: PadCeil}
		v, err := RankView(gpt2Small(t), spec, 1)
		if err != nil {
			t.Fatal(err)
		}
		ts := tensorsByID(v.Model)
		want := map[string][]uint64{
			"h0.attn.c_attn.w": {768, 1152}, "h0.attn.c_attn.b": {1152},
			"h0.attn.c_proj.w": {384, 768}, "h0.attn.c_proj.b": {768},
			"h11.mlp.c_fc.w": {768, 1536}, "h11.mlp.c_fc.b": {1536},
			"h11.mlp.c_proj.w": {1536, 768}, "h11.ln_2.w": {768},
			"wte": {25129, 768}, "wpe": {1024, 768}, // 50257 rows padded to 2 × 25129
			"logits": {1, 1024, 25129}, "h3.attn.qkv": {1, 1024, 1152}, "h3.attn.q": {1, 1024, 384},
			"h3.mlp.fc": {1, 1024, 1536}, "h3.out": {1, 1024, 768},
			"grad/h0.attn.c_attn.w": {768, 1152}, "adam.m/h0.mlp.c_proj.w": {1536, 768},
		}
		checkShapes(t, ts, want)
		if k := ts["h3.attn.k"].View; k.ByteOffset != 384*2 || !slices.Equal(k.Strides, []uint64{1024 * 1152, 1152, 1}) {
			t.Errorf("view h3.attn.k: offset %d strides %v, want 768 and [1179648 1152 1]", k.ByteOffset, k.Strides)
		}
		for _, n := range v.Model.Nodes {
			if n.ID == "fwd/h3.attn.causal" && n.Attrs["heads"] != 6 {
				t.Errorf("attention heads per rank %d, want 6", n.Attrs["heads"])
			}
		}
	})
	t.Run("llama-7b/tp8", func(t *testing.T) {
		spec := &Spec{WorldSize: 8, TensorParallel: TensorParallel{Degree: 8}, Preset: PresetLlama}
		v, err := RankView(llama7B(t), spec, 5)
		if err != nil {
			t.Fatal(err)
		}
		checkShapes(t, tensorsByID(v.Model), map[string][]uint64{
			"l0.attn.q_proj.w": {4096, 512}, "l0.attn.k_proj.w": {4096, 512}, "l0.attn.v_proj.w": {4096, 512},
			"l0.attn.o_proj.w": {512, 4096}, "l31.mlp.gate_proj.w": {4096, 1376}, "l31.mlp.up_proj.w": {4096, 1376},
			"l31.mlp.down_proj.w": {1376, 4096}, "embed_tokens.w": {4000, 4096}, "lm_head.w": {4096, 4000},
			"l5.attn_norm.w": {4096}, "norm.w": {4096}, "l7.mlp.h": {1, 2048, 1376}, "logits": {1, 2048, 4000},
			"master/l0.attn.q_proj.w": {4096, 512},
		})
	})
}

func checkShapes(t *testing.T, ts map[string]*ir.Tensor, want map[string][]uint64) {
	t.Helper()
	for _, id := range slices.Sorted(mapsKeys(want)) {
		if x := ts[id]; x == nil {
			t.Errorf("%s: missing from the view", id)
		} else if !slices.Equal(x.Shape, want[id]) {
			t.Errorf("%s: shape %v, want %v", id, x.Shape, want[id])
		}
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestPipelineRanksHoldOnlyTheirLayers splits GPT-2 small's 12 blocks over
// three stages: each stage holds its blocks' parameters; the embeddings
// live on the first stage, ln_f on the last, and the tied wte on both.
func TestPipelineRanksHoldOnlyTheirLayers(t *testing.T) {
	spec := &Spec{WorldSize: 3, Pipeline: Pipeline{Stages: []LayerRange{{First: 0, End: 4}, {First: 4, End: 8}, {First: 8, End: 12}}}}
	m := gpt2Small(t)
	held := map[string]int{}
	for rank := range uint64(3) {
		v, err := RankView(m, spec, rank)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range v.Model.Tensors {
			if x.Role != ir.Parameter {
				continue
			}
			held[x.ID]++
			var layer uint64
			ok := false
			if _, err := fmt.Sscanf(x.ID, "h%d.", &layer); err == nil {
				ok = layer >= 4*rank && layer < 4*rank+4
			} else {
				switch x.ID {
				case "wpe":
					ok = rank == 0
				case "ln_f.w", "ln_f.b":
					ok = rank == 2
				case "wte":
					ok = rank == 0 || rank == 2
				}
			}
			if !ok {
				t.Errorf("stage %d holds %s", rank, x.ID)
			}
		}
		sends, recvs := 0, 0
		for _, n := range v.Model.Nodes {
			sends += b2i(n.Op == "pp.send")
			recvs += b2i(n.Op == "pp.recv")
		}
		t.Logf("stage %d: %d sends, %d receives, model state %+v", rank, sends, recvs, v.ModelState)
	}
	for _, x := range m.Tensors {
		if x.Role == ir.Parameter {
			want := 1
			if x.ID == "wte" {
				want = 2
			}
			if held[x.ID] != want {
				t.Errorf("%s is held by %d stages, want %d", x.ID, held[x.ID], want)
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestPartitionedBytesSumToTheWhole sums every persistent tensor's bytes
// over the ranks of a dp 4 × tp 2 × pp 2 job: a tensor partitioned by both
// ZeRO and tensor parallelism sums to its unsharded bytes over the ranks of
// a stage that holds it; one that tensor parallelism replicates sums to
// its bytes once per tensor-parallel rank; and below ZeRO stage 3
// parameters appear whole on every data-parallel rank.
func TestPartitionedBytesSumToTheWhole(t *testing.T) {
	for _, tc := range []struct {
		name   string
		m      *ir.Model
		preset string
		split  func(id string) bool // split by tensor parallelism
	}{
		{"gpt2", tinyGPT2(128), PresetGPT2, func(id string) bool {
			return id == "wte" || strings.Contains(id, ".c_attn.") || strings.Contains(id, ".c_fc.") || strings.HasSuffix(id, ".c_proj.w")
		}},
		{"llama", tinyLlama(), PresetLlama, func(id string) bool {
			return strings.HasSuffix(id, "_proj.w") || id == "embed_tokens.w" || id == "lm_head.w"
		}},
	} {
		for _, stage := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/zero%d", tc.name, stage), func(t *testing.T) {
				spec := &Spec{WorldSize: 16, DataParallel: DataParallel{ZeROStage: stage}, TensorParallel: TensorParallel{Degree: 2},
					Pipeline: Pipeline{Stages: []LayerRange{{First: 0, End: 2}, {First: 2, End: 4}}}, Preset: tc.preset}
				whole := tensorsByID(tc.m)
				// sum[stage][tensor], perRank[tensor] = bytes on each rank of a stage
				sum := map[uint64]map[string]uint64{}
				perRank := map[string]map[uint64]bool{}
				for rank := range uint64(16) {
					v, err := RankView(tc.m, spec, rank)
					if err != nil {
						t.Fatal(err)
					}
					if sum[v.Coord.Stage] == nil {
						sum[v.Coord.Stage] = map[string]uint64{}
					}
					for _, x := range v.Model.Tensors {
						if !x.Role.Persistent() {
							continue
						}
						sum[v.Coord.Stage][x.ID] += bytesOf(&x)
						if perRank[x.ID] == nil {
							perRank[x.ID] = map[uint64]bool{}
						}
						perRank[x.ID][bytesOf(&x)] = true
					}
				}
				for s, byID := range sum {
					for id, got := range byID {
						base := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(id, "master/"), "adam.m/"), "adam.v/")
						full := bytesOf(whole[id])
						want := full
						if !tc.split(base) {
							want *= 2 // replicated over the tensor-parallel pair
						}
						partitioned := stage == 3 || whole[id].Role == ir.OptimizerState
						if !partitioned {
							want *= 4 // whole on each data-parallel rank
						}
						if got != want {
							t.Errorf("stage %d: %s sums to %d bytes over the ranks, want %d (unsharded %d)", s, id, got, want, full)
						}
						if len(perRank[id]) != 1 {
							t.Errorf("%s has different sizes on different ranks: %v", id, perRank[id])
						}
					}
				}
			})
		}
	}
}

// TestViewsPlanAndVerify plans every rank of combined jobs and runs the
// planner's verifier on each plan.
func TestViewsPlanAndVerify(t *testing.T) {
	stages := Pipeline{Stages: []LayerRange{{First: 0, End: 1}, {First: 1, End: 3}, {First: 3, End: 4}}}
	for _, tc := range []struct {
		name string
		m    *ir.Model
		spec Spec
	}{
		{"gpt2/dp2-zero3-tp2-pp3", tinyGPT2(101), Spec{WorldSize: 12, DataParallel: DataParallel{ZeROStage: 3}, TensorParallel: TensorParallel{Degree: 2}, Pipeline: stages, Preset: PresetGPT2, Padding: PadCeil}},
		{"gpt2/tp4-sp", tinyGPT2(128), Spec{WorldSize: 4, TensorParallel: TensorParallel{Degree: 4}, Preset: PresetGPT2, SequenceParallel: true}},
		{"llama/dp2-zero2-tp2-sp-pp3", tinyLlama(), Spec{WorldSize: 12, DataParallel: DataParallel{ZeROStage: 2}, TensorParallel: TensorParallel{Degree: 2}, Pipeline: stages, Preset: PresetLlama, SequenceParallel: true}},
		{"llama/dp4-zero1", tinyLlama(), Spec{WorldSize: 4, DataParallel: DataParallel{ZeROStage: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gp, plans, err := PlanRanks(tc.m, &tc.spec, planner.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(plans) != int(tc.spec.WorldSize) || len(gp.Ranks) != len(plans) {
				t.Fatalf("%d plans, %d global entries for world size %d", len(plans), len(gp.Ranks), tc.spec.WorldSize)
			}
			for _, rp := range plans {
				v, err := RankView(tc.m, &tc.spec, rp.Rank)
				if err != nil {
					t.Fatal(err)
				}
				if v.Graph.IRHash != rp.ViewHash {
					t.Errorf("rank %d: PlanRanks view hash %s, RankView %s", rp.Rank, rp.ViewHash.Short(), v.Graph.IRHash.Short())
				}
				if err := planner.Verify(v.Graph, rp.Plan); err != nil {
					t.Errorf("rank %d: %v", rp.Rank, err)
				}
				one, err := PlanRank(tc.m, &tc.spec, rp.Rank, planner.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if one.Plan.PlanHash != rp.Plan.PlanHash {
					t.Errorf("rank %d: PlanRank hash %s, PlanRanks %s", rp.Rank, one.Plan.PlanHash.Short(), rp.Plan.PlanHash.Short())
				}
			}
		})
	}
}
