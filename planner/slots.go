package planner

import (
	"cmp"
	"slices"

	"github.com/tmmu/tmmu/ir"
)

// ArenaSlots is the slot assignment of one arena.
type ArenaSlots struct {
	Name string
	// Storages lists the storage roots placed in this arena, ascending.
	Storages []int32
	// SlotSize and SlotAlign are indexed by slot: the largest tenant and
	// max(largest tenant alignment hint, arena alignment).
	SlotSize  []uint64
	SlotAlign []uint64
}

// SlotAssignment is the result of AssignLogicalSlots_v1.
type SlotAssignment struct {
	// Slot is indexed by tensor: the logical slot of each storage root in
	// scope, -1 for other tensors.
	Slot []int32
	// Arenas holds every arena of the configuration, in ir.Arenas order.
	Arenas []ArenaSlots
}

// AssignLogicalSlots runs the spec's linear scan per arena
// (UML_OS.TMMU.AssignLogicalSlots_v1) over storages: in order of birth
// ascending, size descending, id ascending, each storage takes the lowest
// slot whose tenants have all died before its birth. Interval graphs are
// perfect, so the slot count equals the most storages live at one position
// (the arena's max_live); a must_not_alias constraint can raise it, since a
// storage skips slots that hold one of its must_not_alias partners.
// arenas must be resolved.
func AssignLogicalSlots(g *ir.Graph, l *Liveness, arenas ArenaConfig) *SlotAssignment {
	nt := len(g.Tensors)
	a := &SlotAssignment{Slot: make([]int32, nt)}
	for i := range a.Slot {
		a.Slot[i] = -1
	}
	byArena := map[string]*ArenaSlots{}
	a.Arenas = make([]ArenaSlots, len(ir.Arenas))
	for i, name := range ir.Arenas {
		a.Arenas[i].Name = name
		byArena[name] = &a.Arenas[i]
	}
	// Storages: the roots of the tensors in scope (an alias group's owner
	// may itself be out of scope).
	seen := make([]bool, nt)
	for _, t := range l.Tensors {
		if r := g.Root[t]; !seen[r] {
			seen[r] = true
			as := byArena[g.Tensors[r].Role.Arena()]
			as.Storages = append(as.Storages, r)
		}
	}
	for i := range a.Arenas {
		slices.Sort(a.Arenas[i].Storages)
	}
	forbid := notAliasRoots(g)
	type item struct {
		birth, death int32
		size         uint64
		root         int32
	}
	var items []item
	var active activeHeap
	var free slotHeap
	for ai := range a.Arenas {
		as := &a.Arenas[ai]
		arenaAlign := uint64(arenas[as.Name].AlignmentBytes)
		items = items[:0]
		for _, r := range as.Storages {
			items = append(items, item{l.StorageBirth[r], l.StorageDeath[r], g.StorageBytes[r], r})
		}
		slices.SortFunc(items, func(x, y item) int {
			if c := cmp.Compare(x.birth, y.birth); c != 0 {
				return c
			}
			if c := cmp.Compare(y.size, x.size); c != 0 {
				return c
			}
			return cmp.Compare(x.root, y.root) // index order is id order
		})
		active.reset()
		free.reset()
		for _, it := range items {
			for active.len() > 0 && active.top().death < it.birth {
				free.push(active.pop().slot)
			}
			slot := int32(-1)
			if fs := forbid[it.root]; len(fs) == 0 {
				if free.len() > 0 {
					slot = free.pop()
				}
			} else {
				slot = free.popAllowed(func(s int32) bool {
					for _, p := range fs {
						if a.Slot[p] == s {
							return false
						}
					}
					return true
				})
			}
			if slot < 0 {
				slot = int32(len(as.SlotSize))
				as.SlotSize = append(as.SlotSize, 0)
				as.SlotAlign = append(as.SlotAlign, arenaAlign)
			}
			a.Slot[it.root] = slot
			as.SlotSize[slot] = max(as.SlotSize[slot], it.size)
			as.SlotAlign[slot] = max(as.SlotAlign[slot], g.StorageAlign[it.root])
			active.push(activeSlot{it.death, slot})
		}
	}
	return a
}

// notAliasRoots returns, per storage root, the roots in the same arena it
// must not share bytes with (arenas are separate address spaces); nil when
// the graph has no must_not_alias constraint.
func notAliasRoots(g *ir.Graph) map[int32][]int32 {
	if g.NotAlias == nil {
		return nil
	}
	m := map[int32][]int32{}
	for t, ps := range g.NotAlias {
		r := g.Root[t]
		for _, p := range ps {
			if g.Tensors[r].Role.Arena() == g.Tensors[p].Role.Arena() {
				m[r] = append(m[r], g.Root[p])
			}
		}
	}
	return m
}

type activeSlot struct {
	death, slot int32
}

// activeHeap is a min-heap of occupied slots by death (then slot).
type activeHeap struct{ a []activeSlot }

func (h *activeHeap) reset()          { h.a = h.a[:0] }
func (h *activeHeap) len() int        { return len(h.a) }
func (h *activeHeap) top() activeSlot { return h.a[0] }
func (h *activeHeap) less(i, j int) bool {
	x, y := h.a[i], h.a[j]
	return x.death < y.death || (x.death == y.death && x.slot < y.slot)
}

func (h *activeHeap) push(x activeSlot) {
	h.a = append(h.a, x)
	for i := len(h.a) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.a[p], h.a[i] = h.a[i], h.a[p]
		i = p
	}
}

func (h *activeHeap) pop() activeSlot {
	top := h.a[0]
	n := len(h.a) - 1
	h.a[0] = h.a[n]
	h.a = h.a[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			return top
		}
		h.a[i], h.a[m] = h.a[m], h.a[i]
		i = m
	}
}

// slotHeap is a min-heap of free slot ids.
type slotHeap struct{ a []int32 }

func (h *slotHeap) reset()   { h.a = h.a[:0] }
func (h *slotHeap) len() int { return len(h.a) }

func (h *slotHeap) push(x int32) {
	h.a = append(h.a, x)
	for i := len(h.a) - 1; i > 0; {
		p := (i - 1) / 2
		if h.a[p] <= h.a[i] {
			break
		}
		h.a[p], h.a[i] = h.a[i], h.a[p]
		i = p
	}
}

func (h *slotHeap) pop() int32 {
	top := h.a[0]
	n := len(h.a) - 1
	h.a[0] = h.a[n]
	h.a = h.a[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.a[l] < h.a[m] {
			m = l
		}
		if r < n && h.a[r] < h.a[m] {
			m = r
		}
		if m == i {
			return top
		}
		h.a[i], h.a[m] = h.a[m], h.a[i]
		i = m
	}
}

// popAllowed pops the lowest free slot that ok accepts, or returns -1; the
// slots it skips stay free.
func (h *slotHeap) popAllowed(ok func(int32) bool) int32 {
	var skipped []int32
	found := int32(-1)
	for h.len() > 0 {
		s := h.pop()
		if ok(s) {
			found = s
			break
		}
		skipped = append(skipped, s)
	}
	for _, s := range skipped {
		h.push(s)
	}
	return found
}
