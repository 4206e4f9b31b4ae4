package planner

import (
	"math/bits"
	"slices"

	"github.com/tmmu/tmmu/planner/pack"
)

// fitRegions turns a valid packing of p (offs) into one where no buffer
// crosses a multiple of region (region_bytes: a device buffer's size),
// and returns it with its peak. The buffers are taken in order of their
// offsets, the lowest first; each goes as low as its alignment and the
// buffers already placed allow (those whose lifetimes meet its own, and
// its conflicts), and to the next multiple of region if it would cross
// one there. A buffer placed later is always above the ones it meets,
// so the result is a valid packing; it differs from offs by the gaps
// left below region boundaries (and by whatever falling lower gains).
// ok is false when a buffer is larger than region or an offset would
// pass 2^64.
func fitRegions(p *pack.Problem, offs []uint64, region uint64) (out []uint64, peak uint64, ok bool) {
	n := len(p.Buffers)
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		switch {
		case offs[a] < offs[b]:
			return -1
		case offs[a] > offs[b]:
			return 1
		}
		return 0
	})
	times := make([]int64, 0, 2*n)
	for _, b := range p.Buffers {
		times = append(times, b.Start, b.End)
	}
	slices.Sort(times)
	times = slices.Compact(times)
	idx := func(t int64) int { i, _ := slices.BinarySearch(times, t); return i }
	conflicts := map[int32][]int32{}
	for _, c := range p.Conflicts {
		conflicts[c[0]] = append(conflicts[c[0]], c[1])
		conflicts[c[1]] = append(conflicts[c[1]], c[0])
	}
	tops := newMaxTree(len(times))
	out = make([]uint64, n)
	placed := make([]bool, n)
	for _, k := range order {
		b := &p.Buffers[k]
		if b.Size > region {
			return nil, 0, false
		}
		lo, hi := idx(b.Start), idx(b.End)
		off := tops.query(lo, hi)
		for _, c := range conflicts[k] {
			if placed[c] {
				off = max(off, out[c]+p.Buffers[c].Size)
			}
		}
		a := max(b.Align, 1)
		if off, ok = roundUp(off, a); !ok {
			return nil, 0, false
		}
		if straddles(off, b.Size, region) {
			if off, ok = roundUp(off+1, region); !ok {
				return nil, 0, false
			}
			if off, ok = roundUp(off, a); !ok || straddles(off, b.Size, region) {
				return nil, 0, false
			}
		}
		top, carry := bits.Add64(off, b.Size, 0)
		if carry != 0 {
			return nil, 0, false
		}
		out[k], placed[k] = off, true
		peak = max(peak, top)
		tops.raise(lo, hi, top)
	}
	return out, peak, true
}

// maxTree holds a value per time slot, all 0 at first: raise lifts the
// slots [lo, hi) to at least v, query returns the largest in [lo, hi).
// Both take O(log n).
type maxTree struct {
	n   int
	sub []uint64 // the largest value in a node's range
	all []uint64 // a value raised over a node's whole range
}

func newMaxTree(n int) *maxTree {
	size := 1
	for size < max(n, 1) {
		size *= 2
	}
	return &maxTree{n: size, sub: make([]uint64, 2*size), all: make([]uint64, 2*size)}
}

func (t *maxTree) raise(lo, hi int, v uint64) { t.raiseAt(1, 0, t.n, lo, hi, v) }

func (t *maxTree) raiseAt(node, l, r, lo, hi int, v uint64) {
	if hi <= l || r <= lo {
		return
	}
	t.sub[node] = max(t.sub[node], v)
	if lo <= l && r <= hi {
		t.all[node] = max(t.all[node], v)
		return
	}
	m := (l + r) / 2
	t.raiseAt(2*node, l, m, lo, hi, v)
	t.raiseAt(2*node+1, m, r, lo, hi, v)
}

func (t *maxTree) query(lo, hi int) uint64 { return t.queryAt(1, 0, t.n, lo, hi) }

func (t *maxTree) queryAt(node, l, r, lo, hi int) uint64 {
	if hi <= l || r <= lo {
		return 0
	}
	if lo <= l && r <= hi {
		return t.sub[node]
	}
	m := (l + r) / 2
	return max(t.all[node], t.queryAt(2*node, l, m, lo, hi), t.queryAt(2*node+1, m, r, lo, hi))
}
