package dsa

import (
	"fmt"
	"slices"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/planner/pack"
)

// Model returns the instance as a UML_Model_IR graph that the planner
// plans exactly as the instance asks: one node per section between
// consecutive distinct lower and upper values (in time order), each
// writing the buffers that start there and reading those whose last
// section it is, every buffer a uint8 activation of its size. Under
// ArenaConfig (alignment 1), the plan's activations arena holds exactly
// these buffers, two of them live at one position exactly when their
// intervals intersect. Times gives the instance's clock for the positions.
func (in *Instance) Model() *ir.Model {
	ts := in.Times()
	m := &ir.Model{Name: in.Name, Tensors: make([]ir.Tensor, len(in.Buffers)), Nodes: make([]ir.Node, len(ts)-1)}
	for k := range m.Nodes {
		m.Nodes[k] = ir.Node{ID: fmt.Sprintf("t%d", k), Op: "dsa"}
	}
	for i, b := range in.Buffers {
		m.Tensors[i] = ir.Tensor{ID: b.ID, Shape: []uint64{b.Size}, DType: ir.U8, Role: ir.Activation}
		first, _ := slices.BinarySearch(ts, b.Lower)
		end, _ := slices.BinarySearch(ts, b.Upper)
		m.Nodes[first].Outputs = append(m.Nodes[first].Outputs, b.ID)
		if last := end - 1; last > first {
			m.Nodes[last].Inputs = append(m.Nodes[last].Inputs, b.ID)
		}
	}
	m.ExecutionOrder = make([]string, len(m.Nodes))
	for k := range m.Nodes {
		m.ExecutionOrder[k] = m.Nodes[k].ID
	}
	return m
}

// Times returns the distinct lower and upper values, ascending: position k
// of Model's graph is the section [Times[k], Times[k+1]). Passed as
// planner.Options.PositionTimes, it lets the packing heuristics weigh
// lifetimes by the instance's own clock.
func (in *Instance) Times() []int64 {
	ts := make([]int64, 0, 2*len(in.Buffers))
	for _, b := range in.Buffers {
		ts = append(ts, b.Lower, b.Upper)
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

// ArenaConfig is the arena configuration DSA instances are planned with:
// alignment 1, since the instances are in their own units.
func ArenaConfig() planner.ArenaConfig {
	return planner.ArenaConfig{ir.ArenaActivations: {AlignmentBytes: 1}}
}

// Options returns the planner options for g, the instance's graph:
// inference, ArenaConfig and the instance's clock (Times).
func (in *Instance) Options(g *ir.Graph) planner.Options {
	opts := planner.DefaultOptions(g)
	opts.Mode, opts.Arenas, opts.PositionTimes = planner.Inference, ArenaConfig(), in.Times()
	return opts
}

// Plan compiles the instance's model and plans it with the strategy and
// effort given and the instance's Options. It returns the graph too, for
// the verifier.
func (in *Instance) Plan(strategy planner.Strategy, effort pack.Effort) (*planner.Plan, *ir.Graph, error) {
	g, err := ir.Compile(in.Model())
	if err != nil {
		return nil, nil, err
	}
	opts := in.Options(g)
	opts.Strategy, opts.Effort = strategy, effort
	p, err := planner.PlanMemory(g, opts)
	return p, g, err
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
