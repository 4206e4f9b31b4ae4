// Package irtest generates random valid UML_Model_IR graphs for property
// tests (pgregory.net/rapid): DAGs with every tensor role, forward, backward
// and optimizer phases, views, alias groups, in-place updates,
// saved_for_backward retention, must_not_alias pairs, alignment hints and
// shape envelopes. Every model it draws passes ir.Compile; a failure to
// compile is a bug in this package or in ir.
package irtest

import (
	"fmt"
	"math/rand/v2"

	"pgregory.net/rapid"

	"github.com/tmmu/tmmu/ir"
)

// Options bound the size of generated graphs.
type Options struct {
	MaxNodes int // default 40
	// Features enables views, alias groups, must_not_alias, envelopes and
	// alignment hints (default true when Options is the zero value).
	NoFeatures bool
}

// Model draws a random valid model.
func Model(t *rapid.T, o Options) *ir.Model {
	if o.MaxNodes == 0 {
		o.MaxNodes = 40
	}
	b := &builder{t: t, o: o, inPlaceOK: map[string]bool{}, arena: map[string]string{}, size: map[string]uint64{}}
	b.build()
	return b.m
}

type builder struct {
	t  *rapid.T
	o  Options
	m  *ir.Model
	nT int
	// avail lists readable tensors; inPlaceOK those a node may update in
	// place; arena and size are per tensor.
	avail     []string
	inPlaceOK map[string]bool
	arena     map[string]string
	size      map[string]uint64
	viewed    map[string]bool // tensors with views or aliases (no in-place)
}

var dtypes = []ir.DType{ir.F32, ir.BF16, ir.F16, ir.I32, ir.U8, ir.F64}

func (b *builder) draw(gen *rapid.Generator[int], label string) int { return gen.Draw(b.t, label) }

func (b *builder) newTensor(role ir.Role, label string) *ir.Tensor {
	id := fmt.Sprintf("t%03d", b.nT)
	b.nT++
	rank := b.draw(rapid.IntRange(0, 3), label+".rank")
	shape := make([]uint64, rank)
	for i := range shape {
		shape[i] = uint64(b.draw(rapid.IntRange(1, 40), label+".dim"))
	}
	t := ir.Tensor{ID: id, Shape: shape, DType: rapid.SampledFrom(dtypes).Draw(b.t, label+".dtype"), Role: role}
	if !b.o.NoFeatures {
		if rapid.IntRange(0, 9).Draw(b.t, label+".hint") == 0 {
			t.Alignment = 1 << uint(rapid.IntRange(0, 12).Draw(b.t, label+".align"))
		}
		if rank > 0 && rapid.IntRange(0, 9).Draw(b.t, label+".env") == 0 {
			t.ShapeEnvelope = make([]ir.DimRange, rank)
			for i, d := range shape {
				t.ShapeEnvelope[i] = ir.DimRange{Min: 1, Max: d + uint64(rapid.IntRange(0, 30).Draw(b.t, label+".envmax"))}
			}
		}
	}
	b.m.Tensors = append(b.m.Tensors, t)
	tp := &b.m.Tensors[len(b.m.Tensors)-1]
	n, _ := tp.Bytes()
	b.arena[id], b.size[id] = role.Arena(), n
	return tp
}

func (b *builder) build() {
	b.m = &ir.Model{Name: "random"}
	b.viewed = map[string]bool{}
	// State that exists before the step.
	for _, role := range []ir.Role{ir.Parameter, ir.Input, ir.Constant, ir.OptimizerState} {
		for range rapid.IntRange(0, 3).Draw(b.t, "pre."+string(role)) {
			t := b.newTensor(role, "pre")
			b.avail = append(b.avail, t.ID)
			if role != ir.Constant && rapid.Bool().Draw(b.t, "pre.inplace") {
				t.InPlaceWrite = true
				b.inPlaceOK[t.ID] = true
			}
		}
	}
	nodes := rapid.IntRange(1, b.o.MaxNodes).Draw(b.t, "nodes")
	phase := ir.Forward
	for i := range nodes {
		// Phases advance monotonically: forward, backward, optimizer.
		switch {
		case phase == ir.Forward && rapid.IntRange(0, 5).Draw(b.t, "tobwd") == 0:
			phase = ir.Backward
		case phase == ir.Backward && rapid.IntRange(0, 6).Draw(b.t, "toopt") == 0:
			phase = ir.Optimizer
		}
		n := ir.Node{ID: fmt.Sprintf("n%03d", i), Op: "op", Phase: phase}
		// Inputs.
		for range rapid.IntRange(0, 3).Draw(b.t, "nin") {
			if len(b.avail) == 0 {
				break
			}
			in := rapid.SampledFrom(b.avail).Draw(b.t, "in")
			n.Inputs = append(n.Inputs, in)
			if phase != ir.Forward {
				b.markSavedIfForward(in)
			}
		}
		// In-place update of one input.
		if len(n.Inputs) > 0 && rapid.IntRange(0, 4).Draw(b.t, "inplace") == 0 {
			in := n.Inputs[0]
			if b.inPlaceOK[in] && !b.viewed[in] {
				n.Outputs = append(n.Outputs, in)
			}
		}
		// New outputs.
		for range rapid.IntRange(0, 2).Draw(b.t, "nout") {
			role := ir.Activation
			if phase != ir.Forward {
				role = ir.Gradient
			}
			if rapid.IntRange(0, 9).Draw(b.t, "isout") == 0 {
				role = ir.Output
			}
			t := b.newTensor(role, "out")
			id := t.ID
			if role != ir.Output && rapid.IntRange(0, 5).Draw(b.t, "outinplace") == 0 {
				t.InPlaceWrite = true
				b.inPlaceOK[id] = true
			}
			if !b.o.NoFeatures {
				b.maybeAlias(t)
				b.maybeNotAlias(t)
			}
			n.Outputs = append(n.Outputs, id)
			b.avail = append(b.avail, id)
		}
		b.m.Nodes = append(b.m.Nodes, n)
		b.m.ExecutionOrder = append(b.m.ExecutionOrder, n.ID)
		if !b.o.NoFeatures && rapid.IntRange(0, 6).Draw(b.t, "view") == 0 {
			b.addView()
		}
	}
}

// markSavedIfForward marks a forward activation read by a later phase as
// saved_for_backward (unless it is updated in place, which the spec forbids
// together with saving).
func (b *builder) markSavedIfForward(id string) {
	for i := range b.m.Tensors {
		t := &b.m.Tensors[i]
		if t.ID == id && t.Role == ir.Activation && !t.InPlaceWrite && rapid.Bool().Draw(b.t, "saved") {
			t.SavedForBackward = true
			b.inPlaceOK[id] = false
		}
	}
}

func (b *builder) tensor(id string) *ir.Tensor {
	for i := range b.m.Tensors {
		if b.m.Tensors[i].ID == id {
			return &b.m.Tensors[i]
		}
	}
	panic("irtest: no tensor " + id)
}

// maybeAlias puts t in an alias group with an earlier tensor of its arena
// that is neither a view nor updated in place.
func (b *builder) maybeAlias(t *ir.Tensor) {
	if t.InPlaceWrite || rapid.IntRange(0, 7).Draw(b.t, "alias") != 0 {
		return
	}
	var cands []string
	for _, id := range b.avail {
		o := b.tensor(id)
		if o.View == nil && !o.InPlaceWrite && o.Role.Arena() == t.Role.Arena() {
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return
	}
	o := b.tensor(rapid.SampledFrom(cands).Draw(b.t, "aliaswith"))
	if o.AliasGroupID == "" {
		o.AliasGroupID = "g" + o.ID
	}
	t.AliasGroupID = o.AliasGroupID
	b.viewed[o.ID], b.viewed[t.ID] = true, true
	b.inPlaceOK[o.ID], b.inPlaceOK[t.ID] = false, false
}

func (b *builder) maybeNotAlias(t *ir.Tensor) {
	if rapid.IntRange(0, 9).Draw(b.t, "notalias") != 0 || len(b.avail) == 0 {
		return
	}
	other := rapid.SampledFrom(b.avail).Draw(b.t, "notaliaswith")
	o := b.tensor(other)
	if o.AliasGroupID != "" && o.AliasGroupID == t.AliasGroupID || o.View != nil {
		return
	}
	t.MustNotAlias = append(t.MustNotAlias, other)
}

// addView adds a view, without a producer, of an available non-view tensor
// that is not updated in place.
func (b *builder) addView() {
	var cands []string
	for _, id := range b.avail {
		o := b.tensor(id)
		if !o.InPlaceWrite && b.size[id] >= 2 {
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return
	}
	baseID := rapid.SampledFrom(cands).Draw(b.t, "viewbase")
	base := b.tensor(baseID)
	total := b.size[baseID]
	off := uint64(rapid.IntRange(0, int(total-1)).Draw(b.t, "viewoff"))
	length := uint64(rapid.IntRange(1, int(total-off)).Draw(b.t, "viewlen"))
	v := ir.Tensor{
		ID: fmt.Sprintf("t%03d", b.nT), Shape: []uint64{length}, DType: ir.U8, Role: base.Role,
		View: &ir.ViewDescriptor{BaseTensor: baseID, ByteOffset: off, ByteLength: length},
	}
	if base.Role == ir.Output {
		v.Role = ir.Activation // a view of an output needs no producer when it is an activation
	}
	if v.Role.Arena() != base.Role.Arena() {
		return
	}
	b.nT++
	b.m.Tensors = append(b.m.Tensors, v)
	b.arena[v.ID], b.size[v.ID] = v.Role.Arena(), length
	b.viewed[baseID] = true
	b.inPlaceOK[baseID] = false
	b.avail = append(b.avail, v.ID)
}

// Shuffle returns a copy of m with tensors and nodes listed in another
// order (same execution order), drawn from seed.
func Shuffle(m *ir.Model, seed uint64) *ir.Model {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := *m
	c.Tensors = append([]ir.Tensor(nil), m.Tensors...)
	c.Nodes = append([]ir.Node(nil), m.Nodes...)
	r.Shuffle(len(c.Tensors), func(i, j int) { c.Tensors[i], c.Tensors[j] = c.Tensors[j], c.Tensors[i] })
	r.Shuffle(len(c.Nodes), func(i, j int) { c.Nodes[i], c.Nodes[j] = c.Nodes[j], c.Nodes[i] })
	return &c
}
