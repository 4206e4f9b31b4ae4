package alloc

import (
	"fmt"
	"slices"
)

// checkInvariants verifies the allocator's bookkeeping from scratch:
// every region is tiled by aligned, contiguous blocks with no two adjacent
// free ones; free and allocated bytes add up to the region's size; the
// cached counters, the free-size multiset and the live index agree with
// the blocks.
func checkInvariants(a *Allocator) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var reserved, allocated uint64
	live := 0
	if len(a.regions) > a.cfg.MaxRegions {
		return fmt.Errorf("%d regions over a budget of %d", len(a.regions), a.cfg.MaxRegions)
	}
	if len(a.byID) != len(a.regions) {
		return fmt.Errorf("byID has %d regions, regions %d", len(a.byID), len(a.regions))
	}
	for _, r := range a.regions {
		if a.byID[r.ID] != r {
			return fmt.Errorf("region %d: not indexed by its ID", r.ID)
		}
		if r.Size > a.sizes[0] {
			return fmt.Errorf("region %d: size %d over the largest region size %d", r.ID, r.Size, a.sizes[0])
		}
		reserved += r.Size
		var free, used uint64
		var freeSizes []uint64
		n, nlive := 0, 0
		var prev *block
		for b := r.first; b != nil; b = b.next {
			n++
			if b.prev != prev {
				return fmt.Errorf("region %d: block [%d,%d) has a wrong prev link", r.ID, b.start, b.end)
			}
			want := uint64(0)
			if prev != nil {
				want = prev.end
			}
			if b.start != want {
				return fmt.Errorf("region %d: block starts at %d, want %d", r.ID, b.start, want)
			}
			if b.end <= b.start {
				return fmt.Errorf("region %d: empty or inverted block [%d,%d)", r.ID, b.start, b.end)
			}
			if b.start%a.align != 0 {
				return fmt.Errorf("region %d: block offset %d not aligned to %d", r.ID, b.start, a.align)
			}
			if b.free {
				if prev != nil && prev.free {
					return fmt.Errorf("region %d: adjacent free blocks [%d,%d) and [%d,%d) not coalesced",
						r.ID, prev.start, prev.end, b.start, b.end)
				}
				free += b.size()
				freeSizes = append(freeSizes, b.size())
				if _, ok := r.live[b.start]; ok {
					return fmt.Errorf("region %d: free block at %d is in the live index", r.ID, b.start)
				}
			} else {
				used += b.size()
				nlive++
				if b.size()%a.align != 0 {
					return fmt.Errorf("region %d: allocated block [%d,%d) is not a multiple of %d", r.ID, b.start, b.end, a.align)
				}
				if r.live[b.start] != b {
					return fmt.Errorf("region %d: allocated block at %d missing from the live index", r.ID, b.start)
				}
			}
			prev = b
		}
		if prev == nil || prev.end != r.Size {
			return fmt.Errorf("region %d: blocks do not reach the region's end %d", r.ID, r.Size)
		}
		if free+used != r.Size {
			return fmt.Errorf("region %d: free %d + allocated %d != size %d", r.ID, free, used, r.Size)
		}
		if free != r.freeBytes {
			return fmt.Errorf("region %d: freeBytes %d, blocks say %d", r.ID, r.freeBytes, free)
		}
		slices.Sort(freeSizes)
		if !slices.Equal(freeSizes, r.freeSizes) {
			return fmt.Errorf("region %d: free sizes %v, blocks say %v", r.ID, r.freeSizes, freeSizes)
		}
		if n != r.nblocks {
			return fmt.Errorf("region %d: nblocks %d, counted %d", r.ID, r.nblocks, n)
		}
		if nlive != len(r.live) {
			return fmt.Errorf("region %d: live index has %d entries, %d blocks allocated", r.ID, len(r.live), nlive)
		}
		allocated += used
		live += nlive
	}
	if reserved != a.reserved || allocated != a.allocated || live != a.live {
		return fmt.Errorf("counters reserved %d allocated %d live %d; blocks say %d %d %d",
			a.reserved, a.allocated, a.live, reserved, allocated, live)
	}
	return nil
}

// blockLayout renders a region's blocks as "[start,end)" with an F for
// free ones, for readable test failures and exact layout assertions.
func blockLayout(a *Allocator, id uint64) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for b := a.byID[id].first; b != nil; b = b.next {
		s := fmt.Sprintf("[%d,%d)", b.start, b.end)
		if b.free {
			s += "F"
		}
		out = append(out, s)
	}
	return out
}

// checkNoOverlap reports any two of the allocations that share a byte.
func checkNoOverlap(als []Allocation) error {
	s := slices.Clone(als)
	slices.SortFunc(s, func(x, y Allocation) int {
		if x.RegionID != y.RegionID {
			if x.RegionID < y.RegionID {
				return -1
			}
			return 1
		}
		if x.Offset < y.Offset {
			return -1
		}
		if x.Offset > y.Offset {
			return 1
		}
		return 0
	})
	for i := 1; i < len(s); i++ {
		if s[i].RegionID == s[i-1].RegionID && s[i].Offset < s[i-1].End() {
			return fmt.Errorf("%v and %v overlap", s[i-1], s[i])
		}
	}
	return nil
}
