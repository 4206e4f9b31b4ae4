package dsa

import (
	"fmt"
	"slices"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/planner/pack"
)

// Model returns the instance as a UML_Model_IR graph that the planner
// plans exactly as the instance asks: one node per distinct lower value
// (in time order), each writing the buffers that start there and reading
// those whose last instant it is, every buffer a uint8 activation of its
// size. Under ArenaConfig (alignment 1), the plan's activations arena
// holds exactly these buffers, two of them live at one position exactly
// when their intervals intersect.
func (in *Instance) Model() *ir.Model {
	ps := in.positions()
	m := &ir.Model{Name: in.Name, Tensors: make([]ir.Tensor, len(in.Buffers)), Nodes: make([]ir.Node, len(ps))}
	for k := range ps {
		m.Nodes[k] = ir.Node{ID: fmt.Sprintf("t%d", k), Op: "dsa"}
	}
	for i, b := range in.Buffers {
		m.Tensors[i] = ir.Tensor{ID: b.ID, Shape: []uint64{b.Size}, DType: ir.U8, Role: ir.Activation}
		first, last := in.span(ps, b)
		m.Nodes[first].Outputs = append(m.Nodes[first].Outputs, b.ID)
		if last > first {
			m.Nodes[last].Inputs = append(m.Nodes[last].Inputs, b.ID)
		}
	}
	m.ExecutionOrder = make([]string, len(ps))
	for k := range ps {
		m.ExecutionOrder[k] = m.Nodes[k].ID
	}
	return m
}

// ArenaConfig is the arena configuration DSA instances are planned with:
// alignment 1, since the instances are in their own units.
func ArenaConfig() planner.ArenaConfig {
	return planner.ArenaConfig{ir.ArenaActivations: {AlignmentBytes: 1}}
}

// Plan compiles the instance's model and plans it with the strategy and
// effort given (inference mode, ArenaConfig). It returns the graph too, for
// the verifier.
func (in *Instance) Plan(strategy planner.Strategy, effort pack.Effort) (*planner.Plan, *ir.Graph, error) {
	g, err := ir.Compile(in.Model())
	if err != nil {
		return nil, nil, err
	}
	opts := planner.DefaultOptions(g)
	opts.Mode, opts.Strategy, opts.Arenas = planner.Inference, strategy, ArenaConfig()
	opts.Effort = effort
	p, err := planner.PlanMemory(g, opts)
	return p, g, err
}

// positions returns the distinct lower values, ascending: the instants at
// which the set of live buffers can grow. Two buffers intersect exactly
// when both are live at one of them.
func (in *Instance) positions() []int64 {
	ps := make([]int64, len(in.Buffers))
	for i, b := range in.Buffers {
		ps[i] = b.Lower
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}

// span returns the first and last of ps at which b is live.
func (in *Instance) span(ps []int64, b Buffer) (first, last int) {
	first, _ = slices.BinarySearch(ps, b.Lower)
	end, _ := slices.BinarySearch(ps, b.Upper)
	return first, end - 1
}

// Row is one buffer of a placed instance.
type Row struct {
	ID           string `json:"-"`
	Lower, Upper int64  `json:"-"`
	Offset       uint64 `json:"offset"`
	Size         uint64 `json:"size"`
	// Lifetime is [lower, upper) in the instance's own units.
	Lifetime [2]int64 `json:"lifetime"`
}

// Rows returns the buffers with their offsets from a plan of the
// instance, in file order.
func (in *Instance) Rows(p *planner.Plan) ([]Row, error) {
	at := make(map[string]uint64, len(p.Tensors))
	for _, t := range p.Tensors {
		at[t.ID] = t.Offset
	}
	rows := make([]Row, len(in.Buffers))
	for i, b := range in.Buffers {
		off, ok := at[b.ID]
		if !ok {
			return nil, fmt.Errorf("dsa: the plan does not place buffer %q", b.ID)
		}
		rows[i] = Row{ID: b.ID, Lower: b.Lower, Upper: b.Upper, Offset: off, Size: b.Size, Lifetime: [2]int64{b.Lower, b.Upper}}
	}
	return rows, nil
}
