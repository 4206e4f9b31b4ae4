package planner

import (
	"errors"
	"fmt"
	"slices"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner/pack"
)

// OpPack names the size-aware placement in failures.
const OpPack = "UML_OS.TMMU.PackOffsets_v1"

// packArenas places each arena's storages at byte offsets with the packed
// or greedy-size strategy and returns them in the shapes the slots
// strategy uses: a logical slot per distinct offset, numbered by offset
// ascending (its size the largest tenant, its alignment the largest
// tenant's), and the arena layout. The packed strategy keeps the spec's
// slot layout of an arena when no packing it found peaks lower, so it
// never uses more bytes than the slots strategy.
func packArenas(g *ir.Graph, l *Liveness, o Options) (*SlotAssignment, []ArenaLayout, error) {
	asg := storagesByArena(g, l)
	var spec *SlotAssignment
	if o.Strategy == Packed {
		spec = AssignLogicalSlots(g, l, o.Arenas)
	}
	forbid := notAliasRoots(g, l)
	layouts := make([]ArenaLayout, len(asg.Arenas))
	for ai := range asg.Arenas {
		as := &asg.Arenas[ai]
		cfg := o.Arenas[as.Name]
		layouts[ai].Name = as.Name
		if len(as.Storages) == 0 {
			continue
		}
		p := &pack.Problem{Buffers: make([]pack.Buffer, len(as.Storages))}
		index := make(map[int32]int32, len(as.Storages))
		for k, r := range as.Storages {
			index[r] = int32(k)
			p.Buffers[k] = pack.Buffer{
				Start: timeOf(o.PositionTimes, l.StorageBirth[r]),
				End:   timeOf(o.PositionTimes, l.StorageDeath[r]+1),
				Size:  g.StorageBytes[r],
				Align: max(g.StorageAlign[r], uint64(cfg.AlignmentBytes)),
			}
		}
		for k, r := range as.Storages {
			for _, q := range forbid[r] {
				if j := index[q]; int32(k) < j {
					p.Conflicts = append(p.Conflicts, [2]int32{int32(k), j})
				}
			}
		}
		if c := uint64(cfg.CapacityBytes); c > 0 {
			page := max(uint64(cfg.PageSize), 1)
			p.Capacity = c / page * page // reserved bytes round the peak up to a page
			if p.Capacity == 0 {
				return nil, nil, tooSmall(as.Name, p.Buffers, cfg, 0, 0)
			}
		}
		var res *pack.Result
		var err error
		if o.Strategy == GreedySize {
			res, err = pack.GreedySize(p)
			if err == nil && p.Capacity > 0 && res.Peak > p.Capacity {
				err = pack.ErrCapacity
			}
		} else {
			res, err = pack.Pack(p, pack.Options{Effort: o.Effort, Budget: o.Budget, Spawn: o.Spawn})
		}
		// takeSlots puts the storages at the spec's slot layout lay.
		takeSlots := func(lay ArenaLayout) {
			for k, r := range as.Storages {
				res.Offsets[k] = lay.SlotOffset[spec.Slot[r]]
			}
			res.Peak, res.Method, res.Optimal = lay.PeakBytes, "slots", lay.PeakBytes <= res.LowerBound
		}
		if spec != nil && (err == nil || errors.Is(err, pack.ErrCapacity)) {
			if lay, lerr := layoutSlots(&spec.Arenas[ai], cfg); lerr == nil && lay.PeakBytes < res.Peak {
				takeSlots(lay)
				if p.Capacity == 0 || res.Peak <= p.Capacity {
					err = nil
				}
			}
		}
		if r := uint64(cfg.RegionBytes); err == nil && r != 0 && res.Peak > r {
			// The packers know nothing of regions: an arena whose
			// packing crosses a region boundary with some storage is
			// refitted to the regions (fitRegions), or takes the slot
			// layout, which moves such slots to the next region,
			// whichever is smaller.
			cross := false
			for k := range res.Offsets {
				cross = cross || straddles(res.Offsets[k], p.Buffers[k].Size, r)
			}
			if cross {
				if spec == nil {
					spec = AssignLogicalSlots(g, l, o.Arenas)
				}
				lay, lerr := layoutSlots(&spec.Arenas[ai], cfg)
				if lerr != nil {
					return nil, nil, lerr
				}
				fit, peak, ok := fitRegions(p, res.Offsets, r)
				if ok && peak <= lay.PeakBytes {
					res.Offsets, res.Peak, res.Method = fit, peak, res.Method+", refit to regions"
					res.Optimal = peak <= res.LowerBound
				} else {
					takeSlots(lay)
				}
			}
		}
		switch {
		case errors.Is(err, pack.ErrCapacity):
			return nil, nil, tooSmall(as.Name, p.Buffers, cfg, res.Peak, res.LowerBound)
		case errors.Is(err, pack.ErrOverflow):
			return nil, nil, failure.New(failure.AllocationOverflow, OpPack,
				fmt.Sprintf("arena %s: %v", as.Name, err), "arena", as.Name)
		case err != nil:
			panic("planner: packing a valid arena: " + err.Error()) // storages always form a valid problem
		}
		// Slots: the distinct offsets, ascending.
		offs := slices.Clone(res.Offsets)
		slices.Sort(offs)
		offs = slices.Compact(offs)
		lay := &layouts[ai]
		lay.SlotOffset = offs
		as.SlotSize = make([]uint64, len(offs))
		as.SlotAlign = make([]uint64, len(offs))
		for k, r := range as.Storages {
			off := res.Offsets[k]
			s, _ := slices.BinarySearch(offs, off)
			asg.Slot[r] = int32(s)
			as.SlotSize[s] = max(as.SlotSize[s], p.Buffers[k].Size)
			as.SlotAlign[s] = max(as.SlotAlign[s], p.Buffers[k].Align)
		}
		lay.PeakBytes = res.Peak
		lay.Packing = &Packing{Method: res.Method, Optimal: res.Optimal, Gap: res.Gap(), Work: res.Work, Budget: res.Budget}
		reserved, ok := alignUp(res.Peak, max(uint64(cfg.PageSize), 1))
		if !ok {
			return nil, nil, overflow(as.Name, "rounding to page size", len(offs))
		}
		lay.ReservedBytes = reserved
		if err := checkCapacity(as.Name, reserved, cfg); err != nil {
			return nil, nil, err
		}
	}
	return asg, layouts, nil
}

// timeOf returns the time of a position (Options.PositionTimes).
func timeOf(times []int64, pos int32) int64 {
	if times == nil {
		return int64(pos)
	}
	return times[pos]
}

// tooSmall is the ARENA_TOO_SMALL failure of a packed arena: it says
// whether the lower bound alone exceeds the capacity (no placement can
// fit), the packer proved that no placement fits (proven, its lower
// bound, exceeds the capacity: conflicts or alignment padding can raise
// it above the bytes live at once), or the best placement found does not.
func tooSmall(arena string, bufs []pack.Buffer, cfg ArenaSpec, best, proven uint64) error {
	capacity := uint64(cfg.CapacityBytes)
	lb, _ := pack.LowerBound(bufs)
	why := fmt.Sprintf("the best placement found needs %d bytes (%s)", best, FormatBytes(best))
	switch {
	case lb > capacity || best == 0:
		why = fmt.Sprintf("%d bytes (%s) are live at once, so no placement fits", lb, FormatBytes(lb))
	case proven > capacity:
		why = fmt.Sprintf("no placement fits: the packer proved every placement needs at least %d bytes (%s); the best found needs %d (%s)",
			proven, FormatBytes(proven), best, FormatBytes(best))
		lb = proven
	}
	return failure.New(failure.ArenaTooSmall, OpPack,
		fmt.Sprintf("arena %s: capacity is %d bytes (%s) but %s", arena, capacity, FormatBytes(capacity), why),
		"arena", arena, "capacity_bytes", capacity, "lower_bound_bytes", lb, "required_bytes", best)
}

// storagesByArena returns a SlotAssignment with every arena's storages
// listed, ascending, and no slots yet.
func storagesByArena(g *ir.Graph, l *Liveness) *SlotAssignment {
	a := &SlotAssignment{Slot: make([]int32, len(g.Tensors))}
	for i := range a.Slot {
		a.Slot[i] = -1
	}
	a.Arenas = make([]ArenaSlots, len(ir.Arenas))
	for i, name := range ir.Arenas {
		a.Arenas[i].Name = name
	}
	isRoot := make([]bool, len(g.Tensors))
	for _, t := range l.Tensors {
		isRoot[g.Root[t]] = true
	}
	for r, ok := range isRoot {
		if ok {
			as := &a.Arenas[g.Arena[r]]
			as.Storages = append(as.Storages, int32(r))
		}
	}
	return a // roots ascend, so each arena's list is sorted
}

// checkTimes validates Options.PositionTimes against the plan's positions.
func checkTimes(times []int64, positions int) error {
	if times == nil {
		return nil
	}
	if len(times) != positions+1 {
		return failure.New(failure.InvalidOptions, OpPlan,
			fmt.Sprintf("position_times has %d values; the plan has %d positions, so it needs %d", len(times), positions, positions+1))
	}
	for k := 1; k < len(times); k++ {
		if times[k] <= times[k-1] {
			return failure.New(failure.InvalidOptions, OpPlan,
				fmt.Sprintf("position_times must increase: %d at %d follows %d", times[k], k, times[k-1]))
		}
	}
	return nil
}
