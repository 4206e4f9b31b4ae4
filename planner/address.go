package planner

import (
	"fmt"
	"math/bits"

	"github.com/tmmu/tmmu/failure"
)

// ArenaLayout is the address map of one arena.
type ArenaLayout struct {
	Name string
	// SlotOffset is indexed by slot.
	SlotOffset []uint64
	// PeakBytes is the end of the last slot; ReservedBytes rounds it up to
	// the page size.
	PeakBytes, ReservedBytes uint64
	// Packing reports how the packed and greedy-size strategies placed
	// the arena; nil for the slots strategy.
	Packing *Packing
}

// MapToVirtualAddresses lays out each arena's slots by aligned prefix sum
// (UML_OS.TMMU.MapToVirtualAddresses_v1): offset₀ = 0 and
// offsetₖ₊₁ = align_up(offsetₖ + sizeₖ, alignₖ₊₁), alignₖ being the slot's
// alignment (already ≥ the arena's). All arithmetic is uint64 and fails
// with ALLOCATION_OVERFLOW instead of wrapping; an arena whose reserved
// bytes exceed its capacity fails with ARENA_TOO_SMALL. arenas must be
// resolved.
func MapToVirtualAddresses(a *SlotAssignment, arenas ArenaConfig) ([]ArenaLayout, error) {
	out := make([]ArenaLayout, len(a.Arenas))
	for i := range a.Arenas {
		as := &a.Arenas[i]
		cfg := arenas[as.Name]
		lay, err := layoutSlots(as, cfg)
		if err != nil {
			return nil, err
		}
		if err := checkCapacity(as.Name, lay.ReservedBytes, cfg); err != nil {
			return nil, err
		}
		out[i] = lay
	}
	return out, nil
}

// layoutSlots lays one arena's slots out by aligned prefix sum, without
// checking its capacity.
func layoutSlots(as *ArenaSlots, cfg ArenaSpec) (ArenaLayout, error) {
	lay := ArenaLayout{Name: as.Name, SlotOffset: make([]uint64, len(as.SlotSize))}
	var end uint64
	for k, size := range as.SlotSize {
		off, ok := alignUp(end, as.SlotAlign[k])
		if !ok {
			return lay, overflow(as.Name, "aligning slot", k)
		}
		if r := uint64(cfg.RegionBytes); straddles(off, size, r) {
			if size > r {
				return lay, regionTooSmall(as.Name, size, r)
			}
			// Start the slot at the next region (r is a multiple of
			// the arena's alignment, not always a power of two; a
			// larger hint is kept).
			if off, ok = roundUp(off, r); !ok {
				return lay, overflow(as.Name, "moving slot to a region boundary", k)
			}
			if off, ok = alignUp(off, as.SlotAlign[k]); !ok || straddles(off, size, r) {
				return lay, regionTooSmall(as.Name, size, r)
			}
		}
		var carry uint64
		end, carry = bits.Add64(off, size, 0)
		if carry != 0 {
			return lay, overflow(as.Name, "ending slot", k)
		}
		lay.SlotOffset[k] = off
	}
	lay.PeakBytes = end
	reserved, ok := alignUp(end, max(uint64(cfg.PageSize), 1))
	if !ok {
		return lay, overflow(as.Name, "rounding to page size", len(as.SlotSize))
	}
	lay.ReservedBytes = reserved
	return lay, nil
}

func checkCapacity(arena string, reserved uint64, cfg ArenaSpec) error {
	if cfg.CapacityBytes == 0 || reserved <= uint64(cfg.CapacityBytes) {
		return nil
	}
	return failure.New(failure.ArenaTooSmall, OpAddress,
		fmt.Sprintf("arena %s needs %d bytes (%s) but its capacity is %d bytes (%s)",
			arena, reserved, FormatBytes(reserved), uint64(cfg.CapacityBytes), FormatBytes(uint64(cfg.CapacityBytes))),
		"arena", arena, "required_bytes", reserved, "capacity_bytes", uint64(cfg.CapacityBytes))
}

func regionTooSmall(arena string, size, region uint64) error {
	return failure.New(failure.ArenaTooSmall, OpAddress,
		fmt.Sprintf("arena %s: a storage of %d bytes (%s) does not fit in one region of %d bytes (%s)",
			arena, size, FormatBytes(size), region, FormatBytes(region)),
		"arena", arena, "required_bytes", size, "region_bytes", region)
}

func overflow(arena, what string, slot int) error {
	return failure.New(failure.AllocationOverflow, OpAddress,
		fmt.Sprintf("arena %s: uint64 overflow %s %d", arena, what, slot), "arena", arena, "slot", slot)
}

// roundUp rounds x up to a multiple of r > 0; ok is false on overflow.
func roundUp(x, r uint64) (uint64, bool) {
	q := x / r
	if x%r != 0 {
		q++
	}
	hi, lo := bits.Mul64(q, r)
	return lo, hi == 0
}

// alignUp rounds x up to a multiple of the power of two a; ok is false on
// overflow.
func alignUp(x, a uint64) (uint64, bool) {
	s, carry := bits.Add64(x, a-1, 0)
	if carry != 0 {
		return 0, false
	}
	return s &^ (a - 1), true
}
