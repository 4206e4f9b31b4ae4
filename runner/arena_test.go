package runner

import (
	"context"
	"testing"

	"github.com/tmmu/tmmu/internal/plantest"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
)

func TestArenaExecutorIsDeterministic(t *testing.T) {
	g, p := plantest.Verified(t, gpt2(t, models.GPT2Config{Layers: 2, Hidden: 32, Heads: 2, Seq: 8, Context: 8, Batch: 2, Vocab: 64, DType: ir.BF16, Train: true}))
	run := func() []StepStats {
		x, err := NewArenaExecutor(g, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []StepStats
		for s := range uint64(3) {
			st, err := x.Step(context.Background(), s+1)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, st)
		}
		return out
	}
	a, b := run(), run()
	var want uint64
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			i, _ := g.TensorIndex(o)
			want += g.Bytes[i]
		}
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("step %d: %+v vs %+v", i+1, a[i], b[i])
		}
		if a[i].Nodes != len(g.Nodes) || a[i].BytesWritten != want {
			t.Errorf("step %d: %d nodes, %d bytes; want %d, %d", i+1, a[i].Nodes, a[i].BytesWritten, len(g.Nodes), want)
		}
	}
	if a[0].Checksum == a[1].Checksum {
		t.Error("steps 1 and 2 wrote the same bytes")
	}
	if _, err := NewArenaExecutor(g, p, 1024); err == nil {
		t.Error("no error above the byte limit")
	}
}

// TestArenaExecutorAliasVersions: a node may write a new version of its
// input into the same storage (an alias group, as imported in-place ops
// are), but not over an unrelated input.
func TestArenaExecutorAliasVersions(t *testing.T) {
	m := &ir.Model{
		Tensors: []ir.Tensor{
			{ID: "x", Shape: []uint64{64}, DType: ir.F32, Role: ir.Input},
			{ID: "a", Shape: []uint64{64}, DType: ir.F32, Role: ir.Activation, AliasGroupID: "g"},
			{ID: "a2", Shape: []uint64{64}, DType: ir.F32, Role: ir.Activation, AliasGroupID: "g"},
			{ID: "y", Shape: []uint64{64}, DType: ir.F32, Role: ir.Output},
		},
		Nodes: []ir.Node{
			{ID: "n0", Op: "neg", Inputs: []string{"x"}, Outputs: []string{"a"}},
			{ID: "n1", Op: "relu_", Inputs: []string{"a"}, Outputs: []string{"a2"}},
			{ID: "n2", Op: "neg", Inputs: []string{"a2"}, Outputs: []string{"y"}},
		},
		ExecutionOrder: []string{"n0", "n1", "n2"},
	}
	g, p := plantest.Verified(t, m)
	x, err := NewArenaExecutor(g, p, 0)
	if err != nil {
		t.Fatalf("a version written over its own storage is refused: %v", err)
	}
	if _, err := x.Step(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
}

// TestDefaultIsPlanOnlyPastTheBound: the default executor moves a plan's
// memory traffic, unless the plan reserves more than DefaultMaxBytes.
func TestDefaultIsPlanOnlyPastTheBound(t *testing.T) {
	g, p := plantest.Verified(t, gpt2(t, models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 8, Context: 8, Batch: 1, Vocab: 64, DType: ir.F32, Train: true}))
	if x, err := Default(g, p); err != nil {
		t.Fatal(err)
	} else if _, ok := x.(*ArenaExecutor); !ok {
		t.Fatalf("a %d-byte plan got %T", p.Metrics.ReservedBytes, x)
	}
	big := *p
	big.Metrics.ReservedBytes = DefaultMaxBytes + 1
	if x, err := Default(g, &big); err != nil || x != (PlanOnly{}) {
		t.Fatalf("a plan past the bound got %T, %v", x, err)
	}
}

// gpt2 is a GPT-2 model of config c.
func gpt2(t *testing.T, c models.GPT2Config) *ir.Model {
	t.Helper()
	m, err := models.GPT2(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
