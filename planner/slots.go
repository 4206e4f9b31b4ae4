package planner

import (
	"cmp"
	"slices"

	"github.com/tmmu/tmmu/internal/minheap"
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
// (the arena's max_live); a must_not_alias constraint between two tensors
// in scope can raise it, since a storage skips slots that hold one of its
// must_not_alias partners.
// arenas must be resolved.
func AssignLogicalSlots(g *ir.Graph, l *Liveness, arenas ArenaConfig) *SlotAssignment {
	nt := len(g.Tensors)
	a := &SlotAssignment{Slot: make([]int32, nt)}
	for i := range a.Slot {
		a.Slot[i] = -1
	}
	a.Arenas = make([]ArenaSlots, len(ir.Arenas))
	for i, name := range ir.Arenas {
		a.Arenas[i].Name = name
	}
	// Storages: the roots of the tensors in scope (an alias group's owner
	// may itself be out of scope). Count first, then fill slabs, so the
	// per-arena slices need no growing.
	isRoot := make([]bool, nt)
	perArena := make([]int, len(ir.Arenas))
	roots := 0
	for _, t := range l.Tensors {
		if r := g.Root[t]; !isRoot[r] {
			isRoot[r] = true
			perArena[g.Arena[r]]++
			roots++
		}
	}
	storages := make([]int32, 0, roots)
	sizes := make([]uint64, roots)
	aligns := make([]uint64, roots)
	most := 0
	for i := range a.Arenas {
		as := &a.Arenas[i]
		n := perArena[i]
		as.Storages = storages[len(storages) : len(storages) : len(storages)+n]
		storages = storages[:len(storages)+n]
		as.SlotSize, as.SlotAlign = sizes[:0:n], aligns[:0:n]
		sizes, aligns = sizes[n:], aligns[n:]
		most = max(most, n)
	}
	for r := range isRoot { // ascending, so each arena's list is sorted
		if isRoot[r] {
			as := &a.Arenas[g.Arena[r]]
			as.Storages = append(as.Storages, int32(r))
		}
	}
	forbid := notAliasRoots(g, l)
	items := make([]slotItem, 0, most)
	sorted := make([]slotItem, most)
	count := make([]int32, l.Positions()+1)
	last := int32(l.Positions() - 1)
	// Occupied slots by death (then slot), and free slot ids.
	active := minheap.New(func(x, y activeSlot) bool { return x.death < y.death || (x.death == y.death && x.slot < y.slot) })
	free := minheap.New(func(x, y int32) bool { return x < y })
	for ai := range a.Arenas {
		as := &a.Arenas[ai]
		arenaAlign := uint64(arenas[as.Name].AlignmentBytes)
		items = items[:0]
		for _, r := range as.Storages {
			items = append(items, slotItem{l.StorageBirth[r], l.StorageDeath[r], g.StorageBytes[r], r})
		}
		sorted = sortForSlots(items, sorted, count)
		active.Reset()
		free.Reset()
		for _, it := range sorted {
			for active.Len() > 0 && active.Top().death < it.birth {
				free.Push(active.Pop().slot)
			}
			slot := int32(-1)
			if fs := forbid[it.root]; len(fs) == 0 {
				if free.Len() > 0 {
					slot = free.Pop()
				}
			} else {
				slot = popAllowed(free, func(s int32) bool {
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
			if it.death < last { // a storage live to the end never frees its slot
				active.Push(activeSlot{it.death, slot})
			}
		}
	}
	return a
}

type slotItem struct {
	birth, death int32
	size         uint64
	root         int32
}

// sortForSlots returns items in the spec's order — birth ascending, size
// descending, id ascending — into dst. Births are positions, so a counting
// sort by birth does the bulk of the work; items arrive in root (= id)
// order, and a stable sort by size within each birth keeps ids ascending.
// count must have room for every birth + 1 and is left zeroed.
func sortForSlots(items, dst []slotItem, count []int32) []slotItem {
	dst = slices.Grow(dst[:0], len(items))[:len(items)]
	for _, it := range items {
		count[it.birth+1]++
	}
	for i := 1; i < len(count); i++ {
		count[i] += count[i-1]
	}
	for _, it := range items {
		dst[count[it.birth]] = it
		count[it.birth]++
	}
	clear(count)
	// Roots are unique, so (size descending, root ascending) is a total
	// order and an unstable sort gives the stable result.
	bySize := func(x, y slotItem) int {
		if c := cmp.Compare(y.size, x.size); c != 0 {
			return c
		}
		return cmp.Compare(x.root, y.root)
	}
	for lo := 0; lo < len(dst); {
		hi := lo + 1
		for hi < len(dst) && dst[hi].birth == dst[lo].birth {
			hi++
		}
		if group := dst[lo:hi]; len(group) <= 12 {
			for i := 1; i < len(group); i++ { // stable insertion sort
				for j := i; j > 0 && group[j].size > group[j-1].size; j-- {
					group[j], group[j-1] = group[j-1], group[j]
				}
			}
		} else {
			slices.SortFunc(group, bySize)
		}
		lo = hi
	}
	return dst
}

// notAliasRoots returns, per storage root, the roots it must not share
// bytes with: must_not_alias pairs whose two tensors are both in scope (a
// constraint on a tensor this mode does not place binds nothing here) and
// in the same arena (arenas are separate address spaces). nil when there is
// none.
func notAliasRoots(g *ir.Graph, l *Liveness) map[int32][]int32 {
	if g.NotAlias == nil {
		return nil
	}
	m := map[int32][]int32{}
	for t, ps := range g.NotAlias {
		if l.Birth[t] < 0 {
			continue
		}
		r := g.Root[t]
		for _, p := range ps {
			if l.Birth[p] >= 0 && g.Arena[r] == g.Arena[p] {
				m[r] = append(m[r], g.Root[p])
			}
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

type activeSlot struct {
	death, slot int32
}

// popAllowed pops the lowest free slot of h that ok accepts, or returns
// -1; the slots it skips stay free.
func popAllowed(h *minheap.Heap[int32], ok func(int32) bool) int32 {
	var skipped []int32
	found := int32(-1)
	for h.Len() > 0 {
		s := h.Pop()
		if ok(s) {
			found = s
			break
		}
		skipped = append(skipped, s)
	}
	for _, s := range skipped {
		h.Push(s)
	}
	return found
}
