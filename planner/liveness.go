package planner

import (
	"fmt"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// Liveness is the result of AnalyzeLiveness_v1: closed lifetimes [birth,
// death] over the positions of the nodes a mode executes.
//
// Interval convention. Position p is the p-th executed node. A tensor is
// live from the node that writes it through the last node that reads or
// writes it, both ends included, so a node's inputs and outputs are live at
// the same position and never share bytes: a kernel may read every input
// while writing its outputs. Under this convention a chain a→b→c of
// out-of-place ops needs 2 slots (the spec's "linear chain → 1 slot" holds
// for ops that overwrite their input, which the IR says with in_place_write:
// the op lists the tensor as input and output and no second tensor exists).
type Liveness struct {
	Mode Mode
	// Order lists the executed nodes (graph node indices); a node's
	// position is its index here.
	Order []int32
	// Tensors lists the tensors the plan covers, ascending (= id order).
	Tensors []int32
	// Birth and Death are indexed by tensor; -1 for tensors out of scope.
	Birth, Death []int32
	// StorageBirth and StorageDeath are indexed by storage root: the hull
	// of the lifetimes of the root's members in scope; -1 when none is.
	StorageBirth, StorageDeath []int32
	// Retained counts activation-arena tensors kept alive for a later phase
	// (see Metrics.ActivationRetentionRatio).
	Retained int
}

// Positions returns the number of executed nodes.
func (l *Liveness) Positions() int { return len(l.Order) }

// AnalyzeLiveness computes lifetimes for the nodes that mode executes
// (UML_OS.Model.AnalyzeLiveness_v1). Rules, in order:
//
//   - Scope: every tensor an executed node reads or writes; every parameter
//     and constant; the storage tensor under every view in scope.
//   - Birth: the position of the tensor's defining node when that node is
//     executed; otherwise 0 (graph inputs, persistent state, values carried
//     in from an earlier phase), except a view, which is born at its first
//     use (its storage carries the bytes).
//   - Death: the last position that reads or writes the tensor (in-place
//     writes extend it); a tensor nobody reads dies where it is born.
//   - Outputs live to the last position; parameters, optimizer state and
//     constants live over all positions.
//   - In forward mode a tensor marked saved_for_backward, or read by any
//     backward or optimizer node of the graph, lives to the last position.
//     In train_full its death is already its last backward consumer.
//   - A storage (a tensor with its views, or an alias group) lives from the
//     first birth to the last death of its members in scope.
func AnalyzeLiveness(g *ir.Graph, mode Mode) (*Liveness, error) {
	if mode.Phases() == nil {
		return nil, failure.New(failure.InvalidOptions, OpLiveness, fmt.Sprintf("unknown mode %q", mode), "mode", mode)
	}
	nt := len(g.Tensors)
	l := &Liveness{Mode: mode, Order: make([]int32, 0, len(g.Order))}
	for _, n := range g.Order {
		if mode.selects(g.Nodes[n].Phase) {
			l.Order = append(l.Order, n)
		}
	}
	if len(l.Order) == 0 {
		return nil, failure.New(failure.InvalidOptions, OpLiveness,
			fmt.Sprintf("mode %s executes no node: the graph has no %v nodes", mode, mode.Phases()), "mode", mode)
	}
	last := int32(len(l.Order) - 1)
	// One slab for the five per-tensor arrays, all starting at -1: birth,
	// death, first reference, and the storage hull.
	slab := make([]int32, 5*nt)
	for i := range slab {
		slab[i] = -1
	}
	birth, death, first := slab[:nt:nt], slab[nt:2*nt:2*nt], slab[2*nt:3*nt:3*nt]
	l.StorageBirth, l.StorageDeath = slab[3*nt:4*nt:4*nt], slab[4*nt:]
	l.Tensors = make([]int32, 0, nt)
	touch := func(t, p int32) {
		if first[t] < 0 {
			first[t] = p
		}
		death[t] = p
	}
	for p, n := range l.Order {
		for _, t := range g.Inputs(n) {
			touch(t, int32(p))
		}
		for _, t := range g.Outputs(n) {
			touch(t, int32(p))
			if g.Def[t] == n {
				birth[t] = int32(p)
			}
		}
	}
	// readLater marks tensors that a backward or optimizer node reads.
	var readLater []bool
	if mode == Forward || mode == TrainFull {
		readLater = make([]bool, nt)
		for _, n := range g.Order {
			if g.Nodes[n].Phase.Norm() != ir.Forward {
				for _, t := range g.Inputs(n) {
					readLater[t] = true
				}
			}
		}
	}
	// Pull in parameters, constants and the storage tensor under each view
	// in scope. A pulled-in storage tensor lives while its views do.
	for t := range nt {
		tt := &g.Tensors[t]
		if first[t] < 0 && (tt.Role == ir.Parameter || tt.Role == ir.Constant) {
			first[t] = 0
		}
	}
	referenced := make([]bool, nt)
	for t := range nt {
		referenced[t] = first[t] >= 0
	}
	for t := range nt {
		if !referenced[t] || g.Tensors[t].View == nil {
			continue
		}
		if b := viewStorageTensor(g, int32(t)); !referenced[b] {
			if first[b] < 0 || first[t] < first[b] {
				first[b] = first[t]
			}
			death[b] = max(death[b], death[t])
		}
	}
	for t := range nt {
		if first[t] < 0 {
			continue
		}
		tt := &g.Tensors[t]
		if birth[t] < 0 {
			if tt.View != nil {
				birth[t] = first[t]
			} else {
				birth[t] = 0
			}
		}
		death[t] = max(death[t], birth[t])
		switch {
		case tt.Role.Persistent():
			birth[t], death[t] = 0, last
		case tt.Role == ir.Output:
			death[t] = last
		}
		definedInForward := g.Def[t] >= 0 && g.Nodes[g.Def[t]].Phase.Norm() == ir.Forward
		retained := false
		switch mode {
		case Forward:
			if tt.SavedForBackward || readLater[t] {
				death[t] = last
				retained = tt.Role != ir.Output
			}
		case TrainFull:
			retained = definedInForward && readLater[t]
		case Backward:
			retained = definedInForward
		}
		if retained && ir.Arenas[g.Arena[t]] == ir.ArenaActivations {
			l.Retained++
		}
		l.Tensors = append(l.Tensors, int32(t))
	}
	l.Birth, l.Death = birth, death
	for _, t := range l.Tensors {
		r := g.Root[t]
		if l.StorageBirth[r] < 0 || birth[t] < l.StorageBirth[r] {
			l.StorageBirth[r] = birth[t]
		}
		l.StorageDeath[r] = max(l.StorageDeath[r], death[t])
	}
	return l, nil
}

// viewStorageTensor follows a view's base chain to the first tensor that is
// not a view.
func viewStorageTensor(g *ir.Graph, t int32) int32 {
	for g.Tensors[t].View != nil {
		t, _ = g.TensorIndex(g.Tensors[t].View.BaseTensor)
	}
	return t
}
