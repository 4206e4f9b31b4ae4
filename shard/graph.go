package shard

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/tmmu/tmmu/ir"
)

// graph is a mutable working copy of a model that the passes rewrite:
// tensors by id, nodes in execution order, and for every node the stages of
// the pipeline that run it.
type graph struct {
	name    string
	tensors map[string]*ir.Tensor
	nodes   []*ir.Node
	// stages[node id] lists the pipeline stages that run the node, sorted.
	stages map[string][]uint64
	// coll marks the tensors that collective nodes define (gathered
	// copies, reduced partial results, received activations, gradient
	// shards).
	coll map[string]bool
}

// newGraph compiles m (so that the passes start from a valid graph with an
// execution order) and copies it.
func newGraph(m *ir.Model) (*graph, *ir.Graph, error) {
	cg, err := ir.Compile(m)
	if err != nil {
		return nil, nil, err
	}
	g := &graph{name: m.Name, tensors: make(map[string]*ir.Tensor, len(cg.Tensors)), stages: map[string][]uint64{}, coll: map[string]bool{}}
	for i := range cg.Tensors {
		t := cloneTensor(&cg.Tensors[i])
		g.tensors[t.ID] = t
	}
	g.nodes = make([]*ir.Node, len(cg.Order))
	for i, n := range cg.Order {
		nn := cg.Nodes[n]
		nn.Inputs, nn.Outputs = slices.Clone(nn.Inputs), slices.Clone(nn.Outputs)
		nn.Attrs = maps.Clone(nn.Attrs)
		g.nodes[i] = &nn
	}
	return g, cg, nil
}

func cloneTensor(t *ir.Tensor) *ir.Tensor {
	c := *t
	c.Shape = slices.Clone(t.Shape)
	c.MustNotAlias = slices.Clone(t.MustNotAlias)
	c.ShapeEnvelope = slices.Clone(t.ShapeEnvelope)
	if t.View != nil {
		v := *t.View
		v.Strides = slices.Clone(v.Strides)
		c.View = &v
	}
	return &c
}

// model returns g as a Model: tensors sorted by id, nodes in execution
// order, the order explicit.
func (g *graph) model() *ir.Model {
	m := &ir.Model{Name: g.name}
	for _, id := range slices.Sorted(maps.Keys(g.tensors)) {
		m.Tensors = append(m.Tensors, *g.tensors[id])
	}
	for _, n := range g.nodes {
		m.Nodes = append(m.Nodes, *n)
		m.ExecutionOrder = append(m.ExecutionOrder, n.ID)
	}
	return m
}

// freshID returns base, or base.2, base.3, … whichever no tensor or node
// in used has.
func freshID(base string, used func(string) bool) string {
	id := base
	for k := 2; used(id); k++ {
		id = base + "." + strconv.Itoa(k)
	}
	return id
}

func (g *graph) hasTensor(id string) bool { _, ok := g.tensors[id]; return ok }

// derived adds a tensor shaped like src for a collective to define: a copy
// with src's shape, dtype and role, without views, aliasing or flags;
// persistent and input tensors' copies are activations (scratch).
func (g *graph) derived(id string, src *ir.Tensor) *ir.Tensor {
	t := &ir.Tensor{ID: id, Shape: slices.Clone(src.Shape), DType: src.DType, Role: src.Role,
		ShapeEnvelope: slices.Clone(src.ShapeEnvelope), Alignment: src.Alignment}
	if src.View != nil || src.Role.Persistent() || src.Role == ir.Input || src.Role == ir.Output {
		t.Role = ir.Activation
	}
	if src.View != nil {
		t.Alignment = 0
	}
	g.tensors[id] = t
	g.coll[id] = true
	return t
}

// collective returns a collective node: op is "<group>.<kind>" (tp.all_gather,
// dp.reduce_scatter, pp.send, …); it runs in phase ph on stages.
func (g *graph) collective(op ir.Op, ph ir.Phase, in, out []string, attrs map[string]int64, stages []uint64) *ir.Node {
	base := string(op) + "/"
	switch {
	case len(out) > 0:
		base += out[0]
	case len(in) > 0:
		base += in[0]
	}
	id := freshID(base, func(s string) bool { _, ok := g.stages[s]; return ok })
	n := &ir.Node{ID: id, Op: op, Inputs: in, Outputs: out, Phase: ph, Attrs: attrs}
	g.stages[id] = stages
	return n
}

// viewsOf maps each tensor to the views whose base it is.
func (g *graph) viewsOf() map[string][]string {
	v := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(g.tensors)) {
		if t := g.tensors[id]; t.View != nil {
			v[t.View.BaseTensor] = append(v[t.View.BaseTensor], id)
		}
	}
	return v
}

// root returns the tensor whose storage id lives in: itself, or the end of
// its chain of view bases.
func (g *graph) root(id string) string {
	for {
		t := g.tensors[id]
		if t == nil || t.View == nil {
			return id
		}
		id = t.View.BaseTensor
	}
}

// canUpdateInPlace reports whether a collective may write id in place: it
// must own its storage alone and not be kept for backward.
func canUpdateInPlace(t *ir.Tensor, views map[string][]string) bool {
	return t.View == nil && t.AliasGroupID == "" && !t.SavedForBackward && len(views[t.ID]) == 0
}

// splitDim returns dimension d divided over deg ranks: exact, or rounded up
// under PadCeil. ok is false when deg does not divide d and padding is off.
func splitDim(d, deg uint64, pad Padding) (uint64, bool) {
	if d%deg == 0 {
		return d / deg, true
	}
	if pad == PadCeil {
		return (d + deg - 1) / deg, true
	}
	return 0, false
}

// partition returns the flat shape of one rank's ZeRO partition of a
// tensor with numel elements: ceil(numel/deg).
func partition(numel, deg uint64) []uint64 { return []uint64{(numel + deg - 1) / deg} }

func numel(t *ir.Tensor) uint64 {
	n, _ := ir.Numel(t.PlannedShape()) // compiled graphs never overflow
	return n
}

func phaseOf(n *ir.Node) ir.Phase { return n.Phase.Norm() }

func stagesKey(s []uint64) string { return fmt.Sprint(s) }

// updateOf reports whether n is an optimizer-style update of a parameter
// (every output is also an input, and one is a parameter), and which.
func (g *graph) updateOf(n *ir.Node) (string, bool) {
	if len(n.Outputs) == 0 {
		return "", false
	}
	for _, o := range n.Outputs {
		if !slices.Contains(n.Inputs, o) {
			return "", false
		}
	}
	for _, o := range n.Outputs {
		if g.tensors[o].Role == ir.Parameter {
			return o, true
		}
	}
	return "", false
}
