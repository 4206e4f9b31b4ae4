package pack

import (
	"cmp"
	"math"
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
// Work is counted in neighbours looked at, corners swept and neighbours
// shifted to keep them in order.
type relaxer struct {
	in    *instance
	adj   [][]int32
	rev   [][]int32 // rev[i][k]: the index of i in adj[adj[i][k]]
	meet  [][]int32 // sections each pair shares (at least 1)
	wmeet [][]int64 // each pair's weight (1 to maxWeight) times meet
	// byLo[i] and byHi[i]: the positions in adj[i] of i's neighbours in
	// order of their bottoms and of their tops, as best last left them.
	byLo, byHi [][]int32
	bots, tops []int64 // scratch for best, as long as the largest degree
	size       []int64 // sizes in units
	y          []int64 // offsets in units
	wov        []int64 // each buffer's weighted overlap
	raw        int64   // the overlap, in units times sections shared
	capacity   int64   // in units
	dirty      []bool  // buffers to weigh again
	links      int64   // the entries of adj: twice the pairs
	sorts      int64   // the comparisons of sorting every neighbour order
	work       int64
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
	r := &relaxer{in: in, adj: adj, rev: make([][]int32, n), meet: make([][]int32, n), wmeet: make([][]int64, n),
		byLo: make([][]int32, n), byHi: make([][]int32, n),
		size: make([]int64, n), y: make([]int64, n), wov: make([]int64, n), dirty: make([]bool, n), links: links}
	deg := 0
	for i, ns := range adj {
		deg = max(deg, len(ns))
		r.sorts += 2 * int64(len(ns)*bits.Len(uint(len(ns))))
		r.size[i] = int64(in.bufs[i].Size / unit)
		r.rev[i] = make([]int32, len(ns))
		r.meet[i] = make([]int32, len(ns))
		r.wmeet[i] = make([]int64, len(ns))
		r.byLo[i] = make([]int32, len(ns))
		r.byHi[i] = make([]int32, len(ns))
		for k, j := range ns {
			back, _ := slices.BinarySearch(adj[j], int32(i))
			r.rev[i][k] = int32(back)
			// A conflict's partners may not meet in time: they weigh as
			// if they shared one section.
			r.meet[i][k] = max(min(in.end[i], in.end[j])-max(in.start[i], in.start[j]), 1)
			r.wmeet[i][k] = int64(r.meet[i][k]) // weight 1
			r.byLo[i][k], r.byHi[i][k] = int32(k), int32(k)
		}
	}
	r.bots, r.tops = make([]int64, deg), make([]int64, deg)
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
// neighbour j is a trapezoid in i's offset: its slope rises by j's
// weight where i's top meets j's bottom (y = a - s, a and b being j's
// bottom and top, s i's size), falls by it at y = a and at y = b - s, and
// rises again at y = b. Their sum is swept over those corners, in order:
// i's neighbours are kept in order of their bottoms and of their tops
// (see sorted), so the four streams of corners merge without a sort.
func (r *relaxer) best(i int) (int64, int64) {
	s := r.size[i]
	top := r.capacity - s
	ns, lo, hi := r.adj[i], r.byLo[i], r.byHi[i]
	r.work += 6*int64(len(ns)) + r.sorted(ns, lo, false) + r.sorted(ns, hi, true)
	w := r.wmeet[i]
	// The bottoms and tops of the neighbours, in order: the corners at
	// a - s and a follow bots, those at b - s and b follow tops.
	bots, tops := r.bots[:len(ns)], r.tops[:len(ns)]
	for h, k := range lo {
		bots[h] = r.y[ns[k]]
	}
	for h, k := range hi {
		j := ns[k]
		tops[h] = r.y[j] + r.size[j]
	}
	// Heads of the four streams: p at a - s, q at a, u at b - s, x at b;
	// past a stream's end, inf.
	const inf = math.MaxInt64
	next := func(keys []int64, h int, shift int64) int64 {
		if h == len(keys) {
			return inf
		}
		return keys[h] - shift
	}
	p, q, u, x := 0, 0, 0, 0
	ap, aq, au, ax := next(bots, 0, s), next(bots, 0, 0), next(tops, 0, s), next(tops, 0, 0)
	var v, slope, bestY, bestV int64
	prev := min(ap, au) // the first corner: no overlap below it
	seen := false       // whether offset 0 was weighed
	for {
		c := min(ap, aq, au, ax)
		if c > 0 && !seen {
			// Offset 0, between corners (top is at least 0, so this
			// is met before the sweep ends).
			bestV, seen = v+slope*(0-prev), true
		}
		if c == inf || c > top {
			break
		}
		v += slope * (c - prev)
		prev = c
		if c >= 0 && (!seen || v < bestV) {
			bestY, bestV, seen = c, v, true
		}
		switch c {
		case ap:
			slope += w[lo[p]]
			p++
			ap = next(bots, p, s)
		case aq:
			slope -= w[lo[q]]
			q++
			aq = next(bots, q, 0)
		case au:
			slope -= w[hi[u]]
			u++
			au = next(tops, u, s)
		default:
			slope += w[hi[x]]
			x++
			ax = next(tops, x, 0)
		}
	}
	if v += slope * (top - prev); v < bestV {
		bestY, bestV = top, v
	}
	return bestY, bestV
}

// sorted puts list (positions in ns) in order of the neighbours' bottoms,
// or of their tops if up, by insertion: the neighbours move little
// between two looks, so few are out of order. Past as many shifts as a
// sort's comparisons, it sorts instead. It returns the work: the shifts,
// and the sort's comparisons if it sorted.
func (r *relaxer) sorted(ns, list []int32, up bool) int64 {
	most := int64(len(list) * bits.Len(uint(len(list))))
	var shifts int64
	for a := 1; a < len(list); a++ {
		k := list[a]
		kk := r.key(ns[k], up)
		b := a
		for ; b > 0 && r.key(ns[list[b-1]], up) > kk; b-- {
			list[b] = list[b-1]
		}
		list[b] = k
		if shifts += int64(a - b); shifts > most {
			r.sort(ns, list, up)
			return shifts + most
		}
	}
	return shifts
}

// key is buffer j's bottom, or its top if up.
func (r *relaxer) key(j int32, up bool) int64 {
	if up {
		return r.y[j] + r.size[j]
	}
	return r.y[j]
}

// sort puts list in order as sorted does, by a sort.
func (r *relaxer) sort(ns, list []int32, up bool) {
	slices.SortFunc(list, func(a, b int32) int { return cmp.Compare(r.key(ns[a], up), r.key(ns[b], up)) })
}

// move puts buffer i at offset y, keeping the overlaps up to date, and
// marks it and its neighbours to be weighed again.
func (r *relaxer) move(i int, y int64) {
	old := r.y[i]
	for k, j := range r.adj[i] {
		if d := r.overlapOf(i, k, y) - r.overlapOf(i, k, old); d != 0 {
			r.raw += d * int64(r.meet[i][k])
			r.wov[i] += r.wmeet[i][k] * d
			r.wov[j] += r.wmeet[i][k] * d
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
	if r.work+r.links+r.sorts > end {
		return false // cannot weigh the start and sort the neighbours
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
				r.wov[i] += r.wmeet[i][k] * ov
				r.raw += int64(r.meet[i][k]) * ov
			}
		}
		r.dirty[i] = true
		r.work += int64(len(r.adj[i]))
	}
	// The start may be far from where the last search left the
	// neighbours: their orders are sorted afresh.
	for i, ns := range r.adj {
		r.sort(ns, r.byLo[i], false)
		r.sort(ns, r.byHi[i], true)
	}
	r.work += r.sorts
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
			if int32(i) > j || r.wmeet[i][k] >= maxWeight*int64(r.meet[i][k]) {
				continue
			}
			if ov := r.overlapOf(i, k, r.y[i]); ov > 0 {
				r.wmeet[i][k] += int64(r.meet[i][k])
				r.wmeet[j][r.rev[i][k]] += int64(r.meet[i][k])
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
