package pack

import (
	"cmp"
	"math/bits"
	"slices"
)

// relaxer looks for a placement within a capacity by local search over
// overlaps, as strip packers that minimise overlap do (guided local
// search): every buffer stays inside [0, capacity) and may overlap
// others; one at a time, a buffer moves to the offset where its weighted
// overlap with the buffers it must not share bytes with is least (an
// exact sweep over their edges); where none can lower its own, every
// pair that still overlaps weighs one more, so that the search leaves
// the local minimum. It stops when nothing overlaps or its work is
// spent. A pair's overlap counts its bytes times the sections the two
// share, times the pair's weight.
//
// Offsets are kept in whole units of the largest alignment, which every
// size must be a multiple of (see relaxable), so every offset the sweep
// proposes is aligned. Costs are integers, so every machine moves the
// same buffers.
//
// Work is counted in neighbours looked at and sweep events sorted.
type relaxer struct {
	in       *instance
	adj      [][]int32
	rev      [][]int32 // rev[i][k]: the index of i in adj[adj[i][k]]
	meet     [][]int32 // sections each pair shares (at least 1)
	weight   [][]int32 // each pair's weight, 1 to maxWeight
	size     []int64   // sizes in units
	y        []int64   // offsets in units
	wov      []int64   // each buffer's weighted overlap
	raw      int64     // the overlap, in units times sections shared
	capacity int64     // in units
	dirty    []bool    // buffers to weigh again
	events   []event
	links    int64 // the entries of adj: twice the pairs
	work     int64
}

// event is a change of slope, at an offset, of a buffer's weighted
// overlap as a function of its offset.
type event struct {
	at, slope int64
}

// maxWeight bounds a pair's weight, so that costs fit in 63 bits (see
// relaxable).
const maxWeight = 1 << 12

// relaxable returns the unit offsets are counted in (the largest
// alignment), the entries of adj (links), and whether the relaxer can
// run on in within capacity: every size a multiple of the unit, and
// every cost within 63 bits.
func relaxable(in *instance, adj [][]int32, capacity uint64) (unit uint64, links int64, ok bool) {
	unit = 1
	for i := range in.bufs {
		unit = max(unit, in.bufs[i].align())
	}
	deg := 0
	for _, ns := range adj {
		deg = max(deg, len(ns))
		links += int64(len(ns))
	}
	for i := range in.bufs {
		if in.bufs[i].Size%unit != 0 {
			return 0, links, false
		}
	}
	// A buffer's cost sums at most deg terms of weight × sections shared
	// × units overlapped, and the overlap of them all as many terms per
	// buffer of sections shared × units.
	need := bits.Len64(capacity/unit) + bits.Len32(uint32(in.positions)) + bits.Len(uint(deg)) + max(bits.Len(maxWeight), bits.Len(uint(len(in.bufs))))
	return unit, links, need <= 62
}

func newRelaxer(in *instance, adj [][]int32, unit uint64, links int64) *relaxer {
	n := len(in.bufs)
	r := &relaxer{in: in, adj: adj, rev: make([][]int32, n), meet: make([][]int32, n), weight: make([][]int32, n),
		size: make([]int64, n), y: make([]int64, n), wov: make([]int64, n), dirty: make([]bool, n), links: links}
	for i, ns := range adj {
		r.size[i] = int64(in.bufs[i].Size / unit)
		r.rev[i] = make([]int32, len(ns))
		r.meet[i] = make([]int32, len(ns))
		r.weight[i] = make([]int32, len(ns))
		for k, j := range ns {
			back, _ := slices.BinarySearch(adj[j], int32(i))
			r.rev[i][k] = int32(back)
			// A conflict's partners may not meet in time: they weigh as
			// if they shared one section.
			r.meet[i][k] = max(min(in.end[i], in.end[j])-max(in.start[i], in.start[j]), 1)
			r.weight[i][k] = 1
		}
	}
	r.work += links
	return r
}

// overlapOf returns buffer i's overlap, in units, with its k-th
// neighbour while i is at offset yi.
func (r *relaxer) overlapOf(i, k int, yi int64) int64 {
	j := r.adj[i][k]
	lo, hi := max(yi, r.y[j]), min(yi+r.size[i], r.y[j]+r.size[j])
	return max(hi-lo, 0)
}

// best returns the lowest offset of buffer i in [0, capacity-size] where
// its weighted overlap is least, and that overlap. The overlap with one
// neighbour is a trapezoid in i's offset; their sum is swept over the
// corners, in order.
func (r *relaxer) best(i int) (int64, int64) {
	s := r.size[i]
	top := r.capacity - s
	ev := r.events[:0]
	var v int64 // the cost at offset 0
	for k, j := range r.adj[i] {
		w := int64(r.weight[i][k]) * int64(r.meet[i][k])
		a, b := r.y[j], r.y[j]+r.size[j]
		if b <= 0 || a-s >= top {
			continue // no overlap at any offset in [0, top]
		}
		v += w * max(min(s, b)-max(0, a), 0)
		ev = append(ev, event{a - s, w}, event{min(a, b-s), -w}, event{max(a, b-s), -w}, event{b, w})
	}
	slices.SortFunc(ev, func(x, y event) int { return cmp.Compare(x.at, y.at) })
	r.events = ev
	r.work += int64(len(r.adj[i]) + len(ev)*bits.Len(uint(len(ev))))
	var slope int64
	k := 0
	for ; k < len(ev) && ev[k].at <= 0; k++ {
		slope += ev[k].slope
	}
	bestY, bestV := int64(0), v
	at := int64(0)
	for ; k < len(ev) && ev[k].at <= top; k++ {
		v += slope * (ev[k].at - at)
		at = ev[k].at
		slope += ev[k].slope
		if v < bestV {
			bestY, bestV = at, v
		}
	}
	if v += slope * (top - at); v < bestV {
		bestY, bestV = top, v
	}
	return bestY, bestV
}

// move puts buffer i at offset y, keeping the overlaps up to date, and
// marks it and its neighbours to be weighed again.
func (r *relaxer) move(i int, y int64) {
	old := r.y[i]
	for k, j := range r.adj[i] {
		if d := r.overlapOf(i, k, y) - r.overlapOf(i, k, old); d != 0 {
			d *= int64(r.meet[i][k])
			r.raw += d
			r.wov[i] += int64(r.weight[i][k]) * d
			r.wov[j] += int64(r.weight[i][k]) * d
		}
		r.dirty[j] = true
	}
	r.work += int64(len(r.adj[i]))
	r.y[i] = y
	r.dirty[i] = true
}

// solve searches for a placement within capacity units, from start
// (offsets in units, each moved down to fit), within limit work; it
// reports whether nothing overlaps (the offsets are then in r.y). The
// pairs' weights carry over from earlier calls.
func (r *relaxer) solve(start []int64, capacity, limit int64) bool {
	in := r.in
	end := r.work + limit
	if r.work+r.links > end {
		return false // cannot weigh the start
	}
	r.capacity = capacity
	for i, y := range start {
		if r.y[i] = min(y, capacity-r.size[i]); r.y[i] < 0 {
			return false
		}
	}
	r.raw = 0
	for i := range in.bufs {
		r.wov[i] = 0
		for k := range r.adj[i] {
			if ov := r.overlapOf(i, k, r.y[i]); ov > 0 {
				r.wov[i] += int64(r.weight[i][k]) * int64(r.meet[i][k]) * ov
				r.raw += int64(r.meet[i][k]) * ov
			}
		}
		r.dirty[i] = true
		r.work += int64(len(r.adj[i]))
	}
	r.raw /= 2
	for r.work < end && r.raw > 0 {
		// A pass weighs, in index order, every buffer that overlaps and
		// whose neighbourhood changed since it was last weighed.
		moved := false
		for i := range in.bufs {
			if !r.dirty[i] {
				continue
			}
			if r.work >= end {
				return r.raw == 0
			}
			r.dirty[i] = false
			if r.wov[i] == 0 {
				continue
			}
			if y, v := r.best(i); v < r.wov[i] {
				r.move(i, y)
				moved = true
			}
		}
		r.work += int64(len(in.bufs))
		if !moved {
			if r.work+r.links > end || !r.penalise() {
				return false // cannot pay for a round of weights, or every weight is at its bound
			}
		}
	}
	return r.raw == 0
}

// penalise adds one to the weight of every pair that overlaps (up to
// maxWeight), and marks its buffers to be weighed again; it reports
// whether any weight changed.
func (r *relaxer) penalise() bool {
	changed := false
	for i := range r.in.bufs {
		if r.wov[i] == 0 {
			continue
		}
		for k, j := range r.adj[i] {
			if int32(i) > j || r.weight[i][k] >= maxWeight {
				continue
			}
			if ov := r.overlapOf(i, k, r.y[i]); ov > 0 {
				r.weight[i][k]++
				r.weight[j][r.rev[i][k]]++
				r.wov[i] += int64(r.meet[i][k]) * ov
				r.wov[j] += int64(r.meet[i][k]) * ov
				r.dirty[i], r.dirty[j] = true, true
				changed = true
			}
		}
		r.work += int64(len(r.adj[i]))
	}
	return changed
}

// relax lowers res's peak by solving within ever lower capacities, each
// a step below the last peak found, from that placement; a step that
// fails is halved and tried again, until the goal, the smallest step
// (one unit) or work is reached. Steps start at a hundredth of the goal.
// It returns the work spent.
func relax(in *instance, maxPairs int, work int64, res *Result) int64 {
	// Building the pairs, the relaxer and a first weighing cost a unit
	// per link (twice the pairs, conflicts' included) each: at most
	// three quarters of the work, the rest for the search. The pairs in
	// time are counted before any is built, so an instance with too many
	// costs a sort, a unit per buffer; so are the conflicts' links.
	n := int64(len(in.bufs))
	if work < 16*n {
		return 0
	}
	var partnerLinks int64
	for _, ps := range in.partners {
		partnerLinks += int64(len(ps))
	}
	if partnerLinks > work/8 {
		return n
	}
	adj, ok := in.adjacency(int(min(int64(maxPairs), (work/4-partnerLinks)/2)))
	if !ok {
		return n + partnerLinks
	}
	unit, links, ok := relaxable(in, adj, res.Peak)
	if !ok {
		return n + links
	}
	r := newRelaxer(in, adj, unit, links)
	r.work += links // building adj
	cur := make([]int64, len(in.bufs))
	for i, off := range res.Offsets {
		cur[i] = int64(off / unit)
	}
	best := int64(res.Peak / unit)
	goal := int64((in.goal + unit - 1) / unit)
	step := max(goal/100, 1)
	per := work / 3
	found := false
	for best > goal && r.work < work {
		c := max(best-step, goal)
		if !r.solve(cur, c, min(per, work-r.work)) {
			if step == 1 {
				break
			}
			step = max(step/2, 1)
			continue
		}
		copy(cur, r.y)
		found, best = true, 0
		for i, y := range cur {
			best = max(best, y+r.size[i])
		}
	}
	if peak := uint64(best) * unit; found && peak < res.Peak {
		for i, y := range cur {
			res.Offsets[i] = uint64(y) * unit
		}
		res.Peak, res.Method = in.peakOf(res.Offsets), "relax"
	}
	return r.work
}
