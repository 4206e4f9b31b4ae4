package shard

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// View is one rank's share of a job: its rank-local IR and what it holds.
type View struct {
	Rank  uint64 `json:"rank"`
	Coord Coord  `json:"coord"`
	// Model is the rank-local IR: sharded tensors with their local shapes
	// and the rank's collectives as nodes (see the package documentation);
	// Graph is Model compiled.
	Model *ir.Model `json:"-"`
	Graph *ir.Graph `json:"-"`
	// ModelState is the model state the rank keeps: parameters,
	// gradients the optimizer reads, and optimizer state.
	ModelState ModelState `json:"model_state"`
	// Collective lists, sorted, the tensors that exist only for
	// communication: gathered copies, partial sums before their
	// reduction, and activations received from another pipeline stage.
	Collective []string `json:"collective_tensors"`
}

// ModelState is the bytes of model state one rank keeps.
type ModelState struct {
	Parameters     uint64 `json:"parameters"`
	Gradients      uint64 `json:"gradients"`
	OptimizerState uint64 `json:"optimizer_state"`
}

// Total returns the sum of the three.
func (m ModelState) Total() uint64 { return m.Parameters + m.Gradients + m.OptimizerState }

// RankView returns the view of rank: the part of m that the rank runs
// under spec, with local shapes and collectives. spec is resolved first;
// problems with the spec or with how it fits m come back as one
// INVALID_SHARD_SPEC error listing every problem, problems with m itself
// with m's own failure code. It is pure: m and spec are not modified.
func RankView(m *ir.Model, spec *Spec, rank uint64) (*View, error) {
	rs, err := spec.Resolve()
	if err != nil {
		return nil, err
	}
	c, err := rs.Coord(rank)
	if err != nil {
		return nil, err
	}
	views, err := stageViews(m, rs, []uint64{c.Stage})
	if err != nil {
		return nil, err
	}
	v := views[0]
	v.Rank, v.Coord = rank, c
	return v, nil
}

// Check resolves spec and checks that it fits m (rules and overrides name
// tensors of m, pipeline stages cover its layers, splits divide), by
// building the view of every pipeline stage.
func Check(m *ir.Model, spec *Spec) (*Spec, error) {
	rs, err := spec.Resolve()
	if err != nil {
		return nil, err
	}
	all := make([]uint64, rs.Stages())
	for i := range all {
		all[i] = uint64(i)
	}
	if _, err := stageViews(m, rs, all); err != nil {
		return nil, err
	}
	return rs, nil
}

// stageViews builds the views of the given pipeline stages of a resolved
// spec; Rank and Coord are left for the caller.
func stageViews(m *ir.Model, spec *Spec, stages []uint64) ([]*View, error) {
	g, _, err := newGraph(m)
	if err != nil {
		return nil, err
	}
	var probs problems
	assignStages(g, spec, &probs)
	if err := probs.err(OpRankView); err != nil {
		return nil, err
	}
	tensorParallel(g, spec, &probs)
	if err := probs.err(OpRankView); err != nil {
		return nil, err
	}
	out := make([]*View, len(stages))
	for i, s := range stages {
		sg := g // one stage: the passes may consume g
		if spec.Stages() > 1 {
			sg = selectStage(g, s, &probs)
		}
		zeroPass(sg, spec, &probs)
		if err := probs.err(OpRankView); err != nil {
			return nil, err
		}
		sg.name = fmt.Sprintf("%s@stage%d/%d,tp%d,dp%d", g.name, s, spec.Stages(), spec.TensorParallel.Degree, spec.DataParallel.Degree)
		if spec.DataParallel.Degree > 1 {
			sg.name += fmt.Sprintf(",zero%d", spec.DataParallel.ZeROStage)
		}
		model := sg.model()
		cg, err := ir.Compile(model)
		if err != nil {
			// The passes only build valid graphs from valid ones; a
			// failure here is a combination they do not support.
			msg := "the rank view of pipeline stage " + fmt.Sprint(s) + " is not a valid IR: "
			var fe *failure.Error
			if errors.As(err, &fe) {
				msg += fe.Message
			} else {
				msg += err.Error()
			}
			return nil, failure.New(failure.InvalidShardSpec, OpRankView, msg, "stage", s).Wrap(err)
		}
		out[i] = &View{Coord: Coord{Stage: s}, Model: model, Graph: cg, ModelState: modelState(sg),
			Collective: slices.Sorted(maps.Keys(sg.coll))}
	}
	return out, nil
}

// modelState sums the resident model state of a view.
func modelState(g *graph) ModelState {
	var m ModelState
	bytes := func(t *ir.Tensor) uint64 { b, _ := t.Bytes(); return b }
	for _, id := range sortedIDs(g.tensors) {
		t := g.tensors[id]
		switch t.Role {
		case ir.Parameter:
			m.Parameters += bytes(t)
		case ir.OptimizerState:
			m.OptimizerState += bytes(t)
		}
	}
	seen := map[string]bool{}
	for _, n := range g.nodes {
		if _, ok := g.updateOf(n); !ok {
			continue
		}
		for _, in := range n.Inputs {
			if t := g.tensors[in]; t.Role == ir.Gradient && !seen[in] {
				seen[in] = true
				m.Gradients += bytes(t)
			}
		}
	}
	return m
}
