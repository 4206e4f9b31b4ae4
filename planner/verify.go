package planner

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// Verify checks a plan against its graph with code written apart from the
// planner (spec VII.A). It derives lifetimes and storages again from the
// model's fields, by tensor id rather than through the planner's indices,
// and checks:
//
//   - the plan's ir_hash, execution_order_hash, arena_config_hash and
//     tmmu_plan_hash recompute;
//   - it places exactly the tensors the mode covers, each in its role's
//     arena, with its size and lifetime;
//   - views sit at their storage's offset plus their byte offset and alias
//     group members share their storage's offset;
//   - every offset honours max(arena alignment, tensor hint) (views: their
//     hint);
//   - no two storages live at the same position share a byte, and
//     must_not_alias pairs never share a byte (ADDRESS_COLLISION);
//   - tenants of a slot share its offset and the slot table is consistent,
//     its offsets ascending; for the slots strategy, slots do not overlap
//     and their count equals max_live (at least max_live in arenas with
//     must_not_alias constraints);
//   - the arena metrics recompute and reserved bytes fit the capacity
//     (ARENA_TOO_SMALL).
//
// It returns nil or the first problem found as a *failure.Error.
func Verify(g *ir.Graph, p *Plan) error {
	v := &verifier{g: g, p: p}
	for _, step := range []func() error{v.header, v.lifetimes, v.placements, v.collisions, v.slots, v.arenaMetrics} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

type verifier struct {
	g   *ir.Graph
	p   *Plan
	cfg ArenaConfig

	byID     map[string]*ir.Tensor
	life     map[string][2]int32 // expected lifetime per tensor in scope
	storage  map[string]string   // tensor → storage owner id
	inner    map[string]uint64   // tensor → byte offset inside its storage
	stBytes  map[string]uint64   // storage owner → bytes
	stAlign  map[string]uint64   // storage owner → required alignment
	stLife   map[string][2]int32 // storage owner → hull of members in scope
	stOffset map[string]uint64   // storage owner → offset (from the plan)
	placed   map[string]*TensorPlacement
	stPlaced map[string]*TensorPlacement // storage owner → its first placed member
	rects    map[string][]rect           // arena → its storages as rectangles
}

func mismatch(format string, args ...any) error {
	return failure.Newf(failure.PlanMismatch, OpVerify, format, args...)
}

func (v *verifier) header() error {
	p, g := v.p, v.g
	if p.Format != Format {
		return mismatch("format %q, want %q", p.Format, Format)
	}
	if p.IRHash != g.IRHash {
		return mismatch("ir_hash %s does not match the IR's %s", p.IRHash.Short(), g.IRHash.Short())
	}
	if h, err := ir.ExecutionOrderHash(g.OrderIDs); err != nil || p.ExecutionOrderHash != h {
		return mismatch("execution_order_hash %s does not match the IR's %s", p.ExecutionOrderHash.Short(), h.Short())
	}
	if !slices.Contains(Modes, p.Mode) {
		return mismatch("unknown mode %q", p.Mode)
	}
	if !slices.Contains(Strategies, p.Strategy) {
		return mismatch("unknown strategy %q", p.Strategy)
	}
	if p.WorldSize == 0 || p.Rank >= p.WorldSize {
		return mismatch("rank %d, world size %d", p.Rank, p.WorldSize)
	}
	cfg, err := p.ArenaConfig.Resolve()
	if err != nil {
		return err
	}
	if !maps.Equal(cfg, p.ArenaConfig) {
		return mismatch("arena_config is not fully resolved (every arena with explicit values)")
	}
	v.cfg = cfg
	if h := cfg.Hash(); p.ArenaConfigHash != h {
		return mismatch("arena_config_hash %s does not match the arena config's %s", p.ArenaConfigHash.Short(), h.Short())
	}
	if h := p.ComputeHash(); p.PlanHash != h {
		return mismatch("plan_hash %s does not recompute: the plan's tables hash to %s", p.PlanHash.Short(), h.Short())
	}
	return nil
}

// lifetimes derives, from the model alone, which tensors the mode covers,
// their lifetimes, and the storage each belongs to.
func (v *verifier) lifetimes() error {
	g := v.g
	v.byID = make(map[string]*ir.Tensor, len(g.Tensors))
	for i := range g.Tensors {
		v.byID[g.Tensors[i].ID] = &g.Tensors[i]
	}
	nodes := make(map[string]*ir.Node, len(g.Nodes))
	for i := range g.Nodes {
		nodes[g.Nodes[i].ID] = &g.Nodes[i]
	}
	runs := func(n *ir.Node) bool { return slices.Contains(v.p.Mode.Phases(), n.Phase.Norm()) }
	defines := func(n *ir.Node, id string) bool {
		return slices.Contains(n.Outputs, id) && !slices.Contains(n.Inputs, id)
	}
	readByLaterPhase := map[string]bool{}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.Phase.Norm() != ir.Forward {
			for _, id := range n.Inputs {
				readByLaterPhase[id] = true
			}
		}
	}
	type span struct{ first, last, def int32 }
	spans := map[string]*span{}
	pos := int32(0)
	for _, nid := range g.OrderIDs {
		n := nodes[nid]
		if !runs(n) {
			continue
		}
		for _, id := range append(slices.Clone(n.Inputs), n.Outputs...) {
			s := spans[id]
			if s == nil {
				s = &span{first: pos, def: -1}
				spans[id] = s
			}
			s.last = pos
			if defines(n, id) {
				s.def = pos
			}
		}
		pos++
	}
	if pos == 0 {
		return mismatch("mode %s executes no node of this graph", v.p.Mode)
	}
	end := pos - 1
	for id, t := range v.byID {
		if _, ok := spans[id]; !ok && (t.Role == ir.Parameter || t.Role == ir.Constant) {
			spans[id] = &span{first: 0, last: 0, def: -1}
		}
	}
	// The storage tensor under a referenced view joins the scope and lives
	// while its views do.
	under := func(id string) (string, uint64) {
		var off uint64
		for v.byID[id].View != nil {
			off += v.byID[id].View.ByteOffset
			id = v.byID[id].View.BaseTensor
		}
		return id, off
	}
	pulled := map[string]*span{}
	for id, s := range spans {
		if v.byID[id].View == nil {
			continue
		}
		b, _ := under(id)
		if _, referenced := spans[b]; referenced {
			continue
		}
		if q := pulled[b]; q == nil {
			pulled[b] = &span{first: s.first, last: s.last, def: -1}
		} else {
			q.first, q.last = min(q.first, s.first), max(q.last, s.last)
		}
	}
	maps.Copy(spans, pulled)

	v.life = make(map[string][2]int32, len(spans))
	for id, s := range spans {
		t := v.byID[id]
		b := s.def
		if b < 0 {
			b = 0
			if t.View != nil {
				b = s.first
			}
		}
		d := max(s.last, b)
		switch {
		case t.Role == ir.Parameter || t.Role == ir.OptimizerState || t.Role == ir.Constant:
			b, d = 0, end
		case t.Role == ir.Output:
			d = end
		}
		if v.p.Mode == Forward && (t.SavedForBackward || readByLaterPhase[id]) {
			d = end
		}
		v.life[id] = [2]int32{b, d}
	}

	// Storages: the tensor under a view chain; alias groups are owned by
	// their smallest member id.
	owner := map[string]string{}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.AliasGroupID != "" {
			if o, ok := owner[t.AliasGroupID]; !ok || t.ID < o {
				owner[t.AliasGroupID] = t.ID
			}
		}
	}
	storageOf := func(id string) (string, uint64) {
		b, off := under(id)
		if gid := v.byID[b].AliasGroupID; gid != "" {
			return owner[gid], off
		}
		return b, off
	}
	v.storage = map[string]string{}
	v.inner = map[string]uint64{}
	v.stBytes = map[string]uint64{}
	v.stAlign = map[string]uint64{}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		st, off := storageOf(t.ID)
		v.storage[t.ID], v.inner[t.ID] = st, off
		if t.View == nil {
			n, _ := t.Bytes()
			v.stBytes[st] = max(v.stBytes[st], n)
		}
		v.stAlign[st] = max(v.stAlign[st], t.Alignment, uint64(v.cfg[t.Role.Arena()].AlignmentBytes))
	}
	v.stLife = map[string][2]int32{}
	for id, l := range v.life {
		st := v.storage[id]
		if h, ok := v.stLife[st]; ok {
			v.stLife[st] = [2]int32{min(h[0], l[0]), max(h[1], l[1])}
		} else {
			v.stLife[st] = l
		}
	}
	return nil
}

func (v *verifier) placements() error {
	p := v.p
	if !slices.IsSortedFunc(p.Tensors, func(a, b TensorPlacement) int { return cmp.Compare(a.ID, b.ID) }) {
		return mismatch("tensor_map is not sorted by tensor id")
	}
	v.placed = make(map[string]*TensorPlacement, len(p.Tensors))
	for i := range p.Tensors {
		tp := &p.Tensors[i]
		if _, dup := v.placed[tp.ID]; dup {
			return mismatch("tensor %q is placed twice", tp.ID)
		}
		v.placed[tp.ID] = tp
		t, ok := v.byID[tp.ID]
		if !ok {
			return mismatch("plan places %q, which is not a tensor of the IR", tp.ID)
		}
		want, ok := v.life[tp.ID]
		if !ok {
			return mismatch("plan places %q, which mode %s does not cover", tp.ID, p.Mode)
		}
		if tp.Lifetime != want {
			return mismatch("tensor %q: lifetime %v, want %v", tp.ID, tp.Lifetime, want)
		}
		if tp.Arena != t.Role.Arena() {
			return mismatch("tensor %q (%s) is in arena %q, want %q", tp.ID, t.Role, tp.Arena, t.Role.Arena())
		}
		if n, _ := t.Bytes(); tp.Size != n {
			return mismatch("tensor %q: size %d, want %d", tp.ID, tp.Size, n)
		}
		st := v.storage[tp.ID]
		if (st == tp.ID) != (tp.Storage == "") || (st != tp.ID && tp.Storage != st) {
			return mismatch("tensor %q: storage %q, want %q", tp.ID, tp.Storage, st)
		}
		need := max(t.Alignment, 1)
		if t.View == nil {
			need = max(need, uint64(v.cfg[tp.Arena].AlignmentBytes))
		}
		if !ir.IsPow2(tp.Alignment) || tp.Alignment < need || tp.Offset%tp.Alignment != 0 || tp.Offset%need != 0 {
			return failure.New(failure.AlignmentViolation, OpVerify,
				fmt.Sprintf("tensor %q at offset %d: alignment %d, needs %d", tp.ID, tp.Offset, tp.Alignment, need),
				"tensor", tp.ID, "arena", tp.Arena)
		}
		if r := uint64(v.cfg[tp.Arena].RegionBytes); straddles(tp.Offset, tp.Size, r) {
			return failure.New(failure.AlignmentViolation, OpVerify,
				fmt.Sprintf("tensor %q [%d, %d) crosses a boundary of the arena's %d-byte regions", tp.ID, tp.Offset, tp.Offset+tp.Size, r),
				"tensor", tp.ID, "arena", tp.Arena)
		}
		base := tp.Offset - v.inner[tp.ID]
		if tp.Offset < v.inner[tp.ID] {
			return mismatch("tensor %q: offset %d is below its %d bytes into storage %q", tp.ID, tp.Offset, v.inner[tp.ID], st)
		}
		if o, ok := v.stOffset[st]; ok && o != base {
			return mismatch("tensor %q puts storage %q at %d, another member puts it at %d", tp.ID, st, base, o)
		}
		if v.stOffset == nil {
			v.stOffset = map[string]uint64{}
			v.stPlaced = map[string]*TensorPlacement{}
		}
		if v.stPlaced[st] == nil {
			v.stPlaced[st] = tp
		}
		v.stOffset[st] = base
		if base%v.stAlign[st] != 0 {
			return failure.New(failure.AlignmentViolation, OpVerify,
				fmt.Sprintf("storage %q at offset %d is not aligned to %d", st, base, v.stAlign[st]), "tensor", st, "arena", tp.Arena)
		}
	}
	for id := range v.life {
		if _, ok := v.placed[id]; !ok {
			return mismatch("tensor %q is live in mode %s but the plan does not place it", id, p.Mode)
		}
	}
	return nil
}

type rect struct {
	id         string
	off, end   uint64 // bytes [off, end)
	birth, die int32  // positions [birth, die]
}

// arenaRects groups the storages by arena, as (bytes × positions)
// rectangles sorted by storage id; computed once.
func (v *verifier) arenaRects() map[string][]rect {
	if v.rects != nil {
		return v.rects
	}
	out := map[string][]rect{}
	for st, life := range v.stLife {
		arena := v.byID[st].Role.Arena()
		off := v.stOffset[st]
		out[arena] = append(out[arena], rect{st, off, off + v.stBytes[st], life[0], life[1]})
	}
	for _, rs := range out {
		slices.SortFunc(rs, func(a, b rect) int { return cmp.Compare(a.id, b.id) })
	}
	v.rects = out
	return out
}

func (v *verifier) collisions() error {
	rects := v.arenaRects()
	for _, arena := range slices.Sorted(maps.Keys(rects)) {
		rs := rects[arena]
		for _, r := range rs {
			if r.end < r.off {
				return failure.New(failure.AllocationOverflow, OpVerify, fmt.Sprintf("storage %q ends past 2^64", r.id), "tensor", r.id)
			}
		}
		if err := sweepCollisions(arena, rs); err != nil {
			return err
		}
	}
	// must_not_alias: no shared byte at any time.
	for i := range v.g.Tensors {
		t := &v.g.Tensors[i]
		a, ok := v.placed[t.ID]
		if !ok {
			continue
		}
		for _, other := range t.MustNotAlias {
			b, ok := v.placed[other]
			if !ok || a.Arena != b.Arena {
				continue
			}
			if a.Offset < b.Offset+b.Size && b.Offset < a.Offset+a.Size {
				return failure.New(failure.AddressCollision, OpVerify,
					fmt.Sprintf("must_not_alias tensors %q [%d,%d) and %q [%d,%d) share bytes in arena %s",
						t.ID, a.Offset, a.Offset+a.Size, other, b.Offset, b.Offset+b.Size, a.Arena),
					"tensor", t.ID, "other", other, "arena", a.Arena)
			}
		}
	}
	return nil
}

// sweepCollisions walks positions in order, keeping the live storages
// sorted by offset; a storage that starts before its predecessor ends, or
// ends after its successor starts, collides.
func sweepCollisions(arena string, rs []rect) error {
	byBirth := slices.Clone(rs)
	slices.SortStableFunc(byBirth, func(a, b rect) int { return cmp.Compare(a.birth, b.birth) })
	var live []rect // sorted by offset
	for _, r := range byBirth {
		live = slices.DeleteFunc(live, func(x rect) bool { return x.die < r.birth })
		i := sort.Search(len(live), func(i int) bool { return live[i].off >= r.off })
		for _, j := range []int{i - 1, i} {
			if j < 0 || j >= len(live) {
				continue
			}
			o := live[j]
			if r.off < o.end && o.off < r.end {
				return failure.New(failure.AddressCollision, OpVerify,
					fmt.Sprintf("arena %s: %q bytes [%d,%d) live [%d,%d] and %q bytes [%d,%d) live [%d,%d] overlap",
						arena, o.id, o.off, o.end, o.birth, o.die, r.id, r.off, r.end, r.birth, r.die),
					"arena", arena, "tensor", o.id, "other", r.id)
			}
		}
		live = slices.Insert(live, i, r)
	}
	return nil
}

func (v *verifier) slots() error {
	for _, a := range v.p.Arenas {
		offsets := map[int32]uint64{}
		size := map[int32]uint64{}
		for _, st := range slices.Sorted(maps.Keys(v.stLife)) {
			tp := v.stPlaced[st]
			if tp.Arena != a.Name {
				continue
			}
			if tp.LogicalSlot < 0 || int(tp.LogicalSlot) >= len(a.Slots) {
				return mismatch("storage %q: logical slot %d outside arena %s's %d slots", st, tp.LogicalSlot, a.Name, len(a.Slots))
			}
			if o, ok := offsets[tp.LogicalSlot]; ok && o != v.stOffset[st] {
				return mismatch("arena %s slot %d holds storages at offsets %d and %d", a.Name, tp.LogicalSlot, o, v.stOffset[st])
			}
			offsets[tp.LogicalSlot] = v.stOffset[st]
			size[tp.LogicalSlot] = max(size[tp.LogicalSlot], v.stBytes[st])
		}
		for k, s := range a.Slots {
			if s.Slot != int32(k) || s.Offset != offsets[int32(k)] || s.Size != size[int32(k)] {
				return mismatch("arena %s slot table row %d (%d, offset %d, size %d) does not match its tenants (offset %d, largest %d)",
					a.Name, k, s.Slot, s.Offset, s.Size, offsets[int32(k)], size[int32(k)])
			}
			if k == 0 {
				continue
			}
			// The slots strategy lays slots out side by side; the packing
			// strategies number one slot per distinct offset, ascending.
			prev := a.Slots[k-1]
			if v.p.Strategy == Slots && s.Offset < prev.Offset+prev.Size {
				return failure.New(failure.AddressCollision, OpVerify,
					fmt.Sprintf("arena %s: slots %d and %d overlap", a.Name, k-1, k), "arena", a.Name)
			}
			if s.Offset <= prev.Offset {
				return mismatch("arena %s: slot %d at offset %d does not follow slot %d at %d", a.Name, k, s.Offset, k-1, prev.Offset)
			}
		}
		if len(offsets) != len(a.Slots) {
			return mismatch("arena %s lists %d slots but its tenants use %d", a.Name, len(a.Slots), len(offsets))
		}
	}
	return nil
}

func (v *verifier) arenaMetrics() error {
	rects := v.arenaRects()
	names := slices.Sorted(maps.Keys(rects))
	if len(names) != len(v.p.Arenas) {
		return mismatch("plan lists %d arenas, its tensors use %d", len(v.p.Arenas), len(names))
	}
	constrained := v.constrainedArenas()
	var slotsTotal, liveTotal int
	for i, a := range v.p.Arenas {
		if a.Name != names[i] {
			return mismatch("arena %d is %q, want %q", i, a.Name, names[i])
		}
		rs := rects[a.Name]
		var peak uint64
		for _, r := range rs {
			peak = max(peak, r.end)
		}
		maxLive, lb := liveMaxima(rs)
		tensors := 0
		for _, tp := range v.placed {
			if tp.Arena == a.Name {
				tensors++
			}
		}
		got := [6]uint64{uint64(a.Tensors), uint64(a.Storages), uint64(a.MaxLive), a.LowerBoundBytes, a.PeakBytes, uint64(len(a.Slots))}
		want := [6]uint64{uint64(tensors), uint64(len(rs)), uint64(maxLive), lb, peak, uint64(a.LogicalSlots)}
		if got != want {
			return mismatch("arena %s metrics [tensors storages max_live lower_bound peak slots] = %v, recomputed %v", a.Name, got, want)
		}
		if v.p.Strategy == Slots {
			if a.LogicalSlots < maxLive || (!constrained[a.Name] && a.LogicalSlots != maxLive) {
				return mismatch("arena %s uses %d logical slots, but at most %d storages are live at once", a.Name, a.LogicalSlots, maxLive)
			}
		}
		page := max(uint64(v.cfg[a.Name].PageSize), 1)
		reserved := (peak + page - 1) / page * page
		if reserved < peak || a.ReservedBytes != reserved {
			return mismatch("arena %s reserved_bytes %d, want %d", a.Name, a.ReservedBytes, reserved)
		}
		if c := uint64(v.cfg[a.Name].CapacityBytes); c != 0 && reserved > c {
			return failure.New(failure.ArenaTooSmall, OpVerify,
				fmt.Sprintf("arena %s reserves %d bytes, capacity %d", a.Name, reserved, c), "arena", a.Name)
		}
		slotsTotal += a.LogicalSlots
		liveTotal += a.MaxLive
	}
	if m := v.p.Metrics; m.Tensors != len(v.p.Tensors) || m.PeakLogicalSlots != slotsTotal || m.MaxLive != liveTotal {
		return mismatch("metrics do not sum over arenas")
	}
	return nil
}

// constrainedArenas returns the arenas holding a must_not_alias pair whose
// two tensors are both placed: only there may slots exceed max_live.
func (v *verifier) constrainedArenas() map[string]bool {
	out := map[string]bool{}
	for id, tp := range v.placed {
		for _, other := range v.byID[id].MustNotAlias {
			if op, ok := v.placed[other]; ok && op.Arena == tp.Arena {
				out[tp.Arena] = true
			}
		}
	}
	return out
}

// liveMaxima returns the most rectangles and the most bytes live at one
// position, by brute force over the distinct birth positions.
func liveMaxima(rs []rect) (int, uint64) {
	var best int
	var bestBytes uint64
	births := map[int32]bool{}
	for _, r := range rs {
		births[r.birth] = true
	}
	// Every maximum is reached at some birth position.
	type ev struct {
		at    int32
		delta int
		bytes uint64
		in    bool
	}
	evs := make([]ev, 0, 2*len(rs))
	for _, r := range rs {
		evs = append(evs, ev{r.birth, 1, r.end - r.off, true}, ev{r.die + 1, -1, r.end - r.off, false})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.delta, b.delta) // departures first at the same position
	})
	n, bytes := 0, uint64(0)
	for _, e := range evs {
		if e.in {
			n++
			bytes += e.bytes
		} else {
			n--
			bytes -= e.bytes
		}
		if births[e.at] {
			best, bestBytes = max(best, n), max(bestBytes, bytes)
		}
	}
	return best, bestBytes
}
