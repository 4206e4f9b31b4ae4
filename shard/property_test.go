package shard

import (
	"errors"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/ir/irtest"
	"github.com/tmmu/tmmu/planner"
)

// TestPropertyAnySpecOnAnyGraph draws random graphs (views, alias groups,
// in-place updates, envelopes) and random specs over them. A view either
// comes back with a failure code or compiles, plans and verifies; it never
// panics.
func TestPropertyAnySpecOnAnyGraph(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := irtest.Model(t, irtest.Options{MaxNodes: 24})
		dp := rapid.Uint64Range(1, 3).Draw(t, "dp")
		tp := rapid.Uint64Range(1, 3).Draw(t, "tp")
		spec := &Spec{DataParallel: DataParallel{Degree: dp, ZeROStage: rapid.IntRange(0, 3).Draw(t, "zero")},
			TensorParallel: TensorParallel{Degree: tp}}
		if rapid.Bool().Draw(t, "ceil") {
			spec.Padding = PadCeil
		}
		spec.SequenceParallel = tp > 1 && rapid.Bool().Draw(t, "sp")
		for _, x := range m.Tensors {
			if x.Role.Persistent() && rapid.IntRange(0, 2).Draw(t, "rule?") == 0 {
				split := rapid.SampledFrom([]Split{Column, Row, Replicate}).Draw(t, "split")
				spec.TensorParallel.Rules = append(spec.TensorParallel.Rules, Rule{Match: x.ID, Split: split})
			}
		}
		stages := uint64(1)
		if len(m.Nodes) >= 10 && rapid.Bool().Draw(t, "pp") {
			// Node ids are n000…: the tens digit is the layer.
			layers := uint64(len(m.Nodes)-1)/10 + 1
			cut := rapid.Uint64Range(1, layers).Draw(t, "cut")
			if cut < layers {
				spec.Pipeline = Pipeline{Stages: []LayerRange{{First: 0, End: cut}, {First: cut, End: layers}}, LayerPattern: `^n0*?([0-9]*)[0-9]$`}
				stages = 2
			}
		}
		spec.WorldSize = dp * tp * stages
		rank := rapid.Uint64Range(0, spec.WorldSize-1).Draw(t, "rank")
		v, err := RankView(m, spec, rank)
		if err != nil {
			var fe *failure.Error
			if !errors.As(err, &fe) {
				t.Fatalf("error without a failure code: %v", err)
			}
			if errors.Is(err, failure.InvalidShardSpec) && fe.Operator == OpRankView && fe.Diagnostics["stage"] != "" {
				t.Fatalf("the passes built an invalid view: %v", err)
			}
			return
		}
		opts := planner.DefaultOptions(v.Graph)
		opts.Rank, opts.WorldSize = rank, spec.WorldSize
		p, err := planner.PlanMemory(v.Graph, opts)
		if err != nil {
			t.Fatalf("planning the view: %v", err)
		}
		if err := planner.Verify(v.Graph, p); err != nil {
			t.Fatalf("verifying the view's plan: %v", err)
		}
		_ = ir.Arenas
		_ = strconv.Itoa
	})
}
