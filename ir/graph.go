package ir

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/internal/minheap"
)

// Operator names used in failures raised while compiling an IR.
const (
	OpValidate = "UML_OS.Model.ValidateIR_v1"
	OpLiveness = "UML_OS.Model.AnalyzeLiveness_v1"
)

// Graph is a validated, indexed Model. Tensors and nodes are sorted by id, so
// index order is id order; everything a planner needs is precomputed in flat
// slices indexed by tensor or node. A Graph is immutable after Compile and
// safe for concurrent readers.
type Graph struct {
	Name    string
	Tensors []Tensor // sorted by ID
	Nodes   []Node   // sorted by ID

	// Order holds node indices in execution order; OrderIDs the same ids.
	// OrderDerived is true when the model gave no execution_order and
	// Compile derived one.
	Order        []int32
	OrderIDs     []string
	OrderDerived bool

	// Per tensor.
	Arena      []uint8  // index into Arenas of the tensor's arena
	Bytes      []uint64 // planned bytes (envelope maxima; ByteLength for views)
	Def        []int32  // defining node index, or -1
	Root       []int32  // storage owner: itself, its view root, or its alias group's first member
	RootOffset []uint64 // byte offset inside the root's storage (non-zero only for views)
	// StorageBytes[r] is the storage size of root r (the largest member of
	// an alias group); 0 for tensors that are not roots.
	StorageBytes []uint64
	// StorageAlign[r] is the largest alignment hint among root r's members
	// (0 = none); 0 for tensors that are not roots.
	StorageAlign []uint64
	// CanonOrder lists tensor indices in canonical CBOR order of their ids
	// (shorter first, then bytewise), the key order of maps keyed by tensor
	// id in hashed structures.
	CanonOrder []int32
	// NotAlias[t] lists the tensors that must never share a byte with t
	// (must_not_alias, made symmetric, sorted); nil for most tensors.
	NotAlias [][]int32

	inOff, inIdx   []int32 // CSR: node inputs
	outOff, outIdx []int32 // CSR: node outputs

	tensorIndex map[string]int32
	nodeIndex   map[string]int32

	IRHash    Hash // ir_hash (spec II.K)
	OrderHash Hash // execution_order_hash (spec II.K)
}

// Inputs returns the input tensor indices of node n (shared; do not modify).
func (g *Graph) Inputs(n int32) []int32 { return g.inIdx[g.inOff[n]:g.inOff[n+1]] }

// Outputs returns the output tensor indices of node n (shared; do not modify).
func (g *Graph) Outputs(n int32) []int32 { return g.outIdx[g.outOff[n]:g.outOff[n+1]] }

// TensorIndex returns the index of tensor id.
func (g *Graph) TensorIndex(id string) (int32, bool) {
	i, ok := g.tensorIndex[id]
	return i, ok
}

// NodeIndex returns the index of node id.
func (g *Graph) NodeIndex(id string) (int32, bool) {
	i, ok := g.nodeIndex[id]
	return i, ok
}

// Compile validates m and indexes it. It does not modify m. Problems are
// reported as *failure.Error with a spec failure code; when a model has
// several problems the first in this order is reported: tensors (ids, shapes,
// dtypes, roles, envelopes, alignment, sizes), views and alias groups,
// must_not_alias, nodes (ids, references, producers, in-place rules), cycles,
// execution order, reads before writes.
func Compile(m *Model) (*Graph, error) {
	c := m.Canonical()
	g := &Graph{Name: c.Name, Tensors: c.Tensors, Nodes: c.Nodes}
	nt, nn := len(g.Tensors), len(g.Nodes)
	if nt >= 1<<31-1 || nn >= 1<<31-1 {
		return nil, failure.Newf(failure.InvalidIRGraph, OpValidate, "graph too large: %d tensors, %d nodes", nt, nn)
	}
	if err := g.indexTensors(); err != nil {
		return nil, err
	}
	if err := g.resolveStorage(); err != nil {
		return nil, err
	}
	if err := g.indexNodes(); err != nil {
		return nil, err
	}
	if err := g.checkCycles(); err != nil {
		return nil, err
	}
	if err := g.resolveOrder(m.ExecutionOrder); err != nil {
		return nil, err
	}
	if err := g.checkReadsAfterWrites(); err != nil {
		return nil, err
	}
	if err := g.checkCalls(); err != nil {
		return nil, err
	}
	g.IRHash = hashCanonical(c)
	var err error
	if g.OrderHash, err = ExecutionOrderHash(g.OrderIDs); err != nil {
		return nil, fmt.Errorf("ir: hashing: %w", err)
	}
	return g, nil
}

func (g *Graph) indexTensors() error {
	nt := len(g.Tensors)
	g.tensorIndex = make(map[string]int32, nt)
	g.Bytes = make([]uint64, nt)
	g.Arena = make([]uint8, nt)
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.ID == "" {
			return failure.Newf(failure.InvalidIRGraph, OpValidate, "tensor #%d has an empty id", i)
		}
		if i > 0 && g.Tensors[i-1].ID == t.ID {
			return failure.New(failure.InvalidIRGraph, OpValidate, "duplicate tensor id "+quote(t.ID), "tensor", t.ID)
		}
		g.tensorIndex[t.ID] = int32(i)
		if err := checkTensor(t); err != nil {
			return err
		}
		n, ok := t.Bytes()
		if !ok {
			return failure.New(failure.AllocationOverflow, OpValidate,
				fmt.Sprintf("tensor %s: size of shape %v × %s overflows uint64", quote(t.ID), t.PlannedShape(), t.DType),
				"tensor", t.ID)
		}
		g.Bytes[i] = n
		g.Arena[i] = uint8(ArenaIndex(t.Role.Arena()))
	}
	g.CanonOrder = canonOrder(g.Tensors)
	return nil
}

// canonOrder returns the indices of tensors (sorted by id) in canonical
// CBOR key order: a stable counting sort by id length keeps ids of equal
// length in bytewise order.
func canonOrder(tensors []Tensor) []int32 {
	longest := 0
	for i := range tensors {
		longest = max(longest, len(tensors[i].ID))
	}
	start := make([]int32, longest+2)
	for i := range tensors {
		start[len(tensors[i].ID)+1]++
	}
	for l := 1; l < len(start); l++ {
		start[l] += start[l-1]
	}
	order := make([]int32, len(tensors))
	for i := range tensors {
		l := len(tensors[i].ID)
		order[start[l]] = int32(i)
		start[l]++
	}
	return order
}

func checkTensor(t *Tensor) error {
	bad := func(code failure.Code, format string, args ...any) error {
		return failure.New(code, OpValidate, fmt.Sprintf("tensor %s: ", quote(t.ID))+fmt.Sprintf(format, args...), "tensor", t.ID)
	}
	if t.DType.Size() == 0 {
		return bad(failure.InvalidIRShapes, "unknown dtype %q (known: %s)", t.DType, joinStrings(DTypes))
	}
	if !t.Role.Valid() {
		return bad(failure.InvalidIRGraph, "unknown role %q (known: %s)", t.Role, joinStrings(Roles))
	}
	for i, d := range t.Shape {
		if d == 0 {
			return bad(failure.InvalidIRShapes, "dimension %d of shape %v is 0 (zero-size tensors are not planned)", i, t.Shape)
		}
	}
	if t.Alignment != 0 && !isPow2(t.Alignment) {
		return bad(failure.AlignmentViolation, "alignment %d is not a power of two", t.Alignment)
	}
	if len(t.ShapeEnvelope) > 0 {
		if t.View != nil {
			return bad(failure.InvalidIRShapes, "a view cannot declare a shape_envelope (its base's envelope sizes the storage)")
		}
		if len(t.ShapeEnvelope) != len(t.Shape) {
			return bad(failure.InvalidIRShapes, "shape_envelope has %d dimensions, shape %v has %d", len(t.ShapeEnvelope), t.Shape, len(t.Shape))
		}
		for i, r := range t.ShapeEnvelope {
			if r.Min == 0 || r.Min > r.Max || t.Shape[i] < r.Min || t.Shape[i] > r.Max {
				return bad(failure.InvalidIRShapes, "dimension %d: shape %d outside envelope %v (need 1 ≤ min ≤ shape ≤ max)", i, t.Shape[i], r)
			}
		}
	}
	if v := t.View; v != nil {
		if t.AliasGroupID != "" {
			return bad(failure.InvalidAlias, "a view shares its base's storage and cannot also declare alias_group_id %q", t.AliasGroupID)
		}
		if len(v.Strides) > 0 && len(v.Strides) != len(t.Shape) {
			return bad(failure.InvalidIRShapes, "view has %d strides for a %d-dimensional shape", len(v.Strides), len(t.Shape))
		}
		extent, ok := viewExtent(t.Shape, v.Strides, t.DType.Size())
		if !ok {
			return bad(failure.AllocationOverflow, "view extent overflows uint64")
		}
		if extent > v.ByteLength {
			return bad(failure.InvalidIRShapes, "view of shape %v (strides %v, %s) spans %d bytes but byte_length is %d", t.Shape, v.Strides, t.DType, extent, v.ByteLength)
		}
	}
	return nil
}

// viewExtent returns the bytes a view touches: (1 + Σ (dim-1)·stride) · elem.
// Empty strides mean contiguous.
func viewExtent(shape, strides []uint64, elem uint64) (uint64, bool) {
	if len(strides) == 0 {
		n, ok := Numel(shape)
		if !ok {
			return 0, false
		}
		hi, lo := bits.Mul64(n, elem)
		return lo, hi == 0
	}
	last := uint64(0)
	for i, d := range shape {
		hi, lo := bits.Mul64(d-1, strides[i])
		if hi != 0 {
			return 0, false
		}
		var carry uint64
		last, carry = bits.Add64(last, lo, 0)
		if carry != 0 {
			return 0, false
		}
	}
	hi, lo := bits.Mul64(last+1, elem)
	return lo, hi == 0 && last+1 != 0
}

// resolveStorage fills Root, RootOffset, StorageBytes and NotAlias and checks
// the view, alias group, in-place and must_not_alias contracts.
func (g *Graph) resolveStorage() error {
	nt := len(g.Tensors)
	g.Root = make([]int32, nt)
	g.RootOffset = make([]uint64, nt)
	g.StorageBytes = make([]uint64, nt)
	for i := range g.Root {
		g.Root[i] = -1
	}
	// Alias groups: the first member (smallest id) owns the storage.
	groups := map[string]int32{}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.AliasGroupID == "" {
			continue
		}
		owner, seen := groups[t.AliasGroupID]
		if !seen {
			groups[t.AliasGroupID] = int32(i)
			continue
		}
		o := &g.Tensors[owner]
		if o.Role.Arena() != t.Role.Arena() {
			return failure.New(failure.InvalidAlias, OpValidate,
				fmt.Sprintf("alias group %q mixes arenas: %s is %s (%s arena), %s is %s (%s arena)",
					t.AliasGroupID, quote(o.ID), o.Role, o.Role.Arena(), quote(t.ID), t.Role, t.Role.Arena()),
				"alias_group_id", t.AliasGroupID, "tensor", t.ID)
		}
		g.Root[i] = owner
	}
	for i := range g.Tensors {
		if g.Tensors[i].View == nil && g.Root[i] == -1 {
			g.Root[i] = int32(i)
		}
	}
	// Views: follow base chains to a root, accumulating offsets.
	state := make([]uint8, nt) // 0 unvisited, 1 visiting, 2 done
	var resolve func(i int32) error
	resolve = func(i int32) error {
		t := &g.Tensors[i]
		if t.View == nil || state[i] == 2 {
			return nil
		}
		if state[i] == 1 {
			return failure.New(failure.InvalidAlias, OpValidate, "view chain through "+quote(t.ID)+" loops back on itself", "tensor", t.ID)
		}
		state[i] = 1
		b, ok := g.tensorIndex[t.View.BaseTensor]
		if !ok {
			return failure.New(failure.InvalidIRGraph, OpValidate,
				fmt.Sprintf("view %s: base_tensor %s does not exist", quote(t.ID), quote(t.View.BaseTensor)), "tensor", t.ID)
		}
		base := &g.Tensors[b]
		if base.Role.Arena() != t.Role.Arena() {
			return failure.New(failure.InvalidAlias, OpValidate,
				fmt.Sprintf("view %s (%s) and its base %s (%s) are in different arenas", quote(t.ID), t.Role, quote(base.ID), base.Role),
				"tensor", t.ID)
		}
		if err := resolve(b); err != nil {
			return err
		}
		end, carry := bits.Add64(t.View.ByteOffset, t.View.ByteLength, 0)
		if carry != 0 {
			return failure.New(failure.AllocationOverflow, OpValidate, "view "+quote(t.ID)+": byte_offset + byte_length overflows uint64", "tensor", t.ID)
		}
		if end > g.Bytes[b] {
			return failure.New(failure.InvalidIRShapes, OpValidate,
				fmt.Sprintf("view %s: bytes [%d, %d) exceed its base %s of %d bytes", quote(t.ID), t.View.ByteOffset, end, quote(base.ID), g.Bytes[b]),
				"tensor", t.ID, "base_tensor", base.ID)
		}
		off, carry := bits.Add64(g.RootOffset[b], t.View.ByteOffset, 0)
		if carry != 0 {
			return failure.New(failure.AllocationOverflow, OpValidate, "view "+quote(t.ID)+": offset overflows uint64", "tensor", t.ID)
		}
		if t.Alignment != 0 && off%t.Alignment != 0 {
			return failure.New(failure.AlignmentViolation, OpValidate,
				fmt.Sprintf("view %s sits %d bytes into its storage %s, not a multiple of its alignment %d",
					quote(t.ID), off, quote(g.Tensors[g.Root[b]].ID), t.Alignment), "tensor", t.ID)
		}
		g.Root[i], g.RootOffset[i] = g.Root[b], off
		state[i] = 2
		return nil
	}
	for i := range g.Tensors {
		if err := resolve(int32(i)); err != nil {
			return err
		}
	}
	// Storage sizes and alignments, and which roots have views or several
	// members.
	g.StorageAlign = make([]uint64, nt)
	shared := make([]bool, nt)
	for i := range g.Tensors {
		r := g.Root[i]
		if g.Tensors[i].View == nil && g.Bytes[i] > g.StorageBytes[r] {
			g.StorageBytes[r] = g.Bytes[i]
		}
		g.StorageAlign[r] = max(g.StorageAlign[r], g.Tensors[i].Alignment)
		if r != int32(i) {
			shared[r] = true
		}
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if !t.InPlaceWrite {
			continue
		}
		switch {
		case t.SavedForBackward:
			return failure.New(failure.InvalidAlias, OpValidate,
				"tensor "+quote(t.ID)+" is both in_place_write and saved_for_backward: an in-place write would clobber the saved value (spec II.G)", "tensor", t.ID)
		case g.Root[i] != int32(i) || shared[i]:
			return failure.New(failure.InvalidAlias, OpValidate,
				"tensor "+quote(t.ID)+" is in_place_write but shares storage with other tensors (views or alias group): in-place writes need alias refcount 1 (spec II.G)", "tensor", t.ID)
		}
	}
	// must_not_alias: symmetric, checked against storage sharing.
	var pairs [][2]int32
	for i := range g.Tensors {
		t := &g.Tensors[i]
		for _, id := range t.MustNotAlias {
			j, ok := g.tensorIndex[id]
			if !ok {
				return failure.New(failure.InvalidIRGraph, OpValidate,
					fmt.Sprintf("tensor %s: must_not_alias names unknown tensor %s", quote(t.ID), quote(id)), "tensor", t.ID)
			}
			if g.Root[j] == g.Root[i] {
				return failure.New(failure.InvalidAlias, OpValidate,
					fmt.Sprintf("tensor %s: must_not_alias %s, but they share storage (same tensor, view or alias group)", quote(t.ID), quote(id)), "tensor", t.ID)
			}
			pairs = append(pairs, [2]int32{int32(i), j}, [2]int32{j, int32(i)})
		}
	}
	if len(pairs) > 0 {
		g.NotAlias = make([][]int32, nt)
		for _, p := range pairs {
			g.NotAlias[p[0]] = append(g.NotAlias[p[0]], p[1])
		}
		for i, l := range g.NotAlias {
			if l != nil {
				slices.Sort(l)
				g.NotAlias[i] = slices.Compact(l)
			}
		}
	}
	return nil
}

func (g *Graph) indexNodes() error {
	nn := len(g.Nodes)
	g.nodeIndex = make(map[string]int32, nn)
	g.inOff = make([]int32, nn+1)
	g.outOff = make([]int32, nn+1)
	g.Def = make([]int32, len(g.Tensors))
	for i := range g.Def {
		g.Def[i] = -1
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		bad := func(code failure.Code, format string, args ...any) *failure.Error {
			return failure.New(code, OpValidate, fmt.Sprintf("node %s: ", quote(n.ID))+fmt.Sprintf(format, args...), "node", n.ID)
		}
		if n.ID == "" {
			return failure.Newf(failure.InvalidIRGraph, OpValidate, "node #%d has an empty id", i)
		}
		if i > 0 && g.Nodes[i-1].ID == n.ID {
			return bad(failure.InvalidIRGraph, "duplicate node id")
		}
		g.nodeIndex[n.ID] = int32(i)
		if n.Op == "" {
			return bad(failure.InvalidIRGraph, "empty op")
		}
		if !n.Phase.Valid() {
			return bad(failure.InvalidIRGraph, "unknown phase %q (known: forward, backward, optimizer)", n.Phase)
		}
		for _, id := range n.Inputs {
			t, ok := g.tensorIndex[id]
			if !ok {
				return bad(failure.InvalidIRGraph, "input %s does not exist", quote(id))
			}
			g.inIdx = append(g.inIdx, t)
		}
		g.inOff[i+1] = int32(len(g.inIdx))
		ins := g.inIdx[g.inOff[i]:]
		for k, id := range n.Outputs {
			t, ok := g.tensorIndex[id]
			if !ok {
				return bad(failure.InvalidIRGraph, "output %s does not exist", quote(id))
			}
			if slices.Contains(n.Outputs[:k], id) {
				return bad(failure.InvalidIRGraph, "lists output %s twice", quote(id))
			}
			g.outIdx = append(g.outIdx, t)
			tt := &g.Tensors[t]
			if tt.Role == Constant {
				return bad(failure.InvalidIRGraph, "writes constant %s; constants are read-only", quote(id)).With("tensor", id)
			}
			if slices.Contains(ins, t) {
				if !tt.InPlaceWrite {
					return bad(failure.InvalidAlias, "updates %s in place (it is both input and output) but the tensor is not marked in_place_write", quote(id)).With("tensor", id)
				}
				continue
			}
			if !tt.Role.NeedsProducer() {
				return bad(failure.InvalidIRGraph, "defines %s tensor %s; %s tensors exist before the step and may only be updated in place (listed as input and output)", tt.Role, quote(id), tt.Role).With("tensor", id)
			}
			if d := g.Def[t]; d >= 0 {
				return bad(failure.InvalidIRGraph, "defines %s, which node %s already defines (one producer per tensor; in-place updates list the tensor as input too)", quote(id), quote(g.Nodes[d].ID)).With("tensor", id)
			}
			g.Def[t] = int32(i)
		}
		g.outOff[i+1] = int32(len(g.outIdx))
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Role == Output && g.Def[i] < 0 && t.View == nil {
			return failure.New(failure.InvalidIRGraph, OpValidate, "output tensor "+quote(t.ID)+" is never written by a node", "tensor", t.ID)
		}
	}
	return nil
}

// effDef returns the node whose execution makes tensor t readable: its
// defining node, or for a view without one, its base's.
func (g *Graph) effDef(t int32) int32 {
	for g.Def[t] < 0 && g.Tensors[t].View != nil {
		t = g.tensorIndex[g.Tensors[t].View.BaseTensor]
	}
	return g.Def[t]
}

// deps is the producer → consumer graph of the nodes in CSR form: node n's
// consumers are succ[off[n]:off[n+1]]; indeg counts each node's producers
// (with multiplicity, as the successor lists do).
type deps struct {
	off, succ, indeg []int32
}

func (g *Graph) dependencies() deps {
	nn := int32(len(g.Nodes))
	d := deps{off: make([]int32, nn+1), indeg: make([]int32, nn)}
	for r := int32(0); r < nn; r++ {
		for _, t := range g.Inputs(r) {
			if p := g.effDef(t); p >= 0 && p != r {
				d.indeg[r]++
				d.off[p+1]++
			}
		}
	}
	for i := int32(0); i < nn; i++ {
		d.off[i+1] += d.off[i]
	}
	d.succ = make([]int32, d.off[nn])
	fill := slices.Clone(d.off[:nn])
	for r := int32(0); r < nn; r++ {
		for _, t := range g.Inputs(r) {
			if p := g.effDef(t); p >= 0 && p != r {
				d.succ[fill[p]] = r
				fill[p]++
			}
		}
	}
	return d
}

func (d deps) consumers(n int32) []int32 { return d.succ[d.off[n]:d.off[n+1]] }

// checkCycles runs Kahn's algorithm over producer → consumer edges and
// reports a cycle (LIVENESS_CYCLE) naming the nodes on it.
func (g *Graph) checkCycles() error {
	nn := int32(len(g.Nodes))
	d := g.dependencies()
	indeg := d.indeg
	queue := make([]int32, 0, nn)
	for i := int32(0); i < nn; i++ {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	for k := 0; k < len(queue); k++ {
		for _, s := range d.consumers(queue[k]) {
			if indeg[s]--; indeg[s] == 0 {
				queue = append(queue, s)
			}
		}
	}
	if int32(len(queue)) == nn {
		return nil
	}
	// Walk backwards through unfinished producers until a node repeats.
	start := int32(-1)
	for i := int32(0); i < nn; i++ {
		if indeg[i] > 0 {
			start = i
			break
		}
	}
	seen := map[int32]int{}
	var path []int32
	for n := start; ; {
		if at, ok := seen[n]; ok {
			path = path[at:]
			break
		}
		seen[n] = len(path)
		path = append(path, n)
		next := int32(-1)
		for _, t := range g.Inputs(n) {
			if d := g.effDef(t); d >= 0 && d != n && indeg[d] > 0 {
				next = d
				break
			}
		}
		n = next
	}
	// path runs consumer → producer; report producer → consumer, starting
	// at the smallest node id so the message does not depend on the walk.
	slices.Reverse(path)
	lo := 0
	for i := range path {
		if path[i] < path[lo] { // index order is id order
			lo = i
		}
	}
	path = append(path[lo:], path[:lo]...)
	ids := make([]string, len(path)+1)
	for i, n := range path {
		ids[i] = g.Nodes[n].ID
	}
	ids[len(path)] = ids[0]
	return failure.New(failure.LivenessCycle, OpLiveness,
		"the dataflow graph has a cycle: "+strings.Join(ids, " -> "), "cycle", strings.Join(ids[:len(path)], ","), "node", ids[0])
}

// resolveOrder checks that order is a permutation of the nodes, or derives
// one when it is empty: Kahn's algorithm taking ready nodes by (phase,
// id). Deriving needs unambiguous dataflow, so a model whose nodes update
// tensors in place must give its execution_order.
func (g *Graph) resolveOrder(order []string) error {
	nn := len(g.Nodes)
	if len(order) == 0 && nn > 0 {
		for n := int32(0); n < int32(nn); n++ {
			for _, t := range g.Outputs(n) {
				if slices.Contains(g.Inputs(n), t) {
					return failure.New(failure.InvalidExecutionOrder, OpLiveness,
						fmt.Sprintf("execution_order is required: node %s updates %s in place, so the order of its readers and writers cannot be derived", quote(g.Nodes[n].ID), quote(g.Tensors[t].ID)),
						"node", g.Nodes[n].ID)
				}
			}
		}
		g.Order = g.deriveOrder()
		g.OrderDerived = true
	} else {
		g.Order = make([]int32, 0, len(order))
		seen := make([]bool, nn)
		for i, id := range order {
			n, ok := g.nodeIndex[id]
			if !ok {
				return failure.New(failure.InvalidExecutionOrder, OpLiveness,
					fmt.Sprintf("execution_order[%d] names unknown node %s", i, quote(id)), "node", id)
			}
			if seen[n] {
				return failure.New(failure.InvalidExecutionOrder, OpLiveness,
					fmt.Sprintf("execution_order lists node %s twice", quote(id)), "node", id)
			}
			seen[n] = true
			g.Order = append(g.Order, n)
		}
		for n, ok := range seen {
			if !ok {
				return failure.New(failure.InvalidExecutionOrder, OpLiveness,
					fmt.Sprintf("execution_order omits node %s (%d of %d nodes listed)", quote(g.Nodes[n].ID), len(order), nn), "node", g.Nodes[n].ID)
			}
		}
	}
	g.OrderIDs = make([]string, len(g.Order))
	for i, n := range g.Order {
		g.OrderIDs[i] = g.Nodes[n].ID
	}
	return nil
}

func phaseRank(p Phase) int32 {
	switch p.Norm() {
	case Backward:
		return 1
	case Optimizer:
		return 2
	}
	return 0
}

func (g *Graph) deriveOrder() []int32 {
	nn := int32(len(g.Nodes))
	d := g.dependencies()
	indeg := d.indeg
	key := func(n int32) int64 { return int64(phaseRank(g.Nodes[n].Phase))<<32 | int64(n) }
	h := minheap.New(func(x, y int32) bool { return key(x) < key(y) })
	for i := int32(0); i < nn; i++ {
		if indeg[i] == 0 {
			h.Push(i)
		}
	}
	order := make([]int32, 0, nn)
	for h.Len() > 0 {
		n := h.Pop()
		order = append(order, n)
		for _, s := range d.consumers(n) {
			if indeg[s]--; indeg[s] == 0 {
				h.Push(s)
			}
		}
	}
	return order
}

// checkReadsAfterWrites walks the execution order and reports the first read
// of an activation, gradient or output that no earlier node has written.
func (g *Graph) checkReadsAfterWrites() error {
	written := make([]bool, len(g.Tensors))
	var ready func(t int32) bool
	ready = func(t int32) bool {
		tt := &g.Tensors[t]
		switch {
		case written[t] || !tt.Role.NeedsProducer():
			return true
		case tt.View != nil && g.Def[t] < 0:
			return ready(g.tensorIndex[tt.View.BaseTensor])
		}
		return false
	}
	for pos, n := range g.Order {
		for _, t := range g.Inputs(n) {
			if !ready(t) {
				tt := &g.Tensors[t]
				msg := fmt.Sprintf("%s %s is read by node %s (position %d) before any node writes it", tt.Role, quote(tt.ID), quote(g.Nodes[n].ID), pos)
				if d := g.Def[t]; d >= 0 {
					msg += fmt.Sprintf("; its producer %s runs later", quote(g.Nodes[d].ID))
				} else {
					msg += "; no node produces it (graph inputs, parameters, constants and optimizer state need no producer: check its role)"
				}
				return failure.New(failure.ReadBeforeWrite, OpLiveness, msg, "tensor", tt.ID, "node", g.Nodes[n].ID)
			}
		}
		for _, t := range g.Outputs(n) {
			written[t] = true
		}
	}
	return nil
}

func isPow2(x uint64) bool { return x != 0 && x&(x-1) == 0 }

// IsPow2 reports whether x is a power of two.
func IsPow2(x uint64) bool { return isPow2(x) }

func quote(s string) string { return fmt.Sprintf("%q", s) }

func joinStrings[S ~string](xs []S) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}
