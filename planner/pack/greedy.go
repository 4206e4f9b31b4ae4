package pack

import (
	"fmt"
	"math/bits"
	"slices"
)

// instance is a validated problem with the indexes the placers share.
// Time is cut into sections at every distinct Start and End: section k runs
// from the k-th to the k+1-th such time, and buffer i is live in sections
// [start[i], end[i]). Two buffers meet in time exactly when they share a
// section, and every section has a fixed set of live buffers.
type instance struct {
	bufs []Buffer
	// start and end are indexed by buffer: its sections.
	start, end []int32
	// positions is the number of sections; width the sections spanned,
	// summed over the buffers.
	positions int32
	width     int64
	// partners lists, per buffer, its Conflicts partners (nil for most).
	partners [][]int32
	// liveBytes[t] is the sum of the sizes live at position t; lb its
	// maximum.
	liveBytes []uint64
	lb        uint64
	// minAlign is the smallest alignment: every offset is a multiple of it.
	minAlign uint64
	// goal is the best peak the searches aim at: the lower bound lb, or
	// more when alignment makes lb unreachable (see newInstance).
	goal uint64
}

func newInstance(p *Problem) (*instance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	in := &instance{bufs: p.Buffers, minAlign: ^uint64(0)}
	for i := range p.Buffers {
		in.minAlign = min(in.minAlign, p.Buffers[i].align())
	}
	times := make([]int64, 0, 2*len(p.Buffers))
	for _, b := range p.Buffers {
		times = append(times, b.Start, b.End)
	}
	slices.Sort(times)
	times = slices.Compact(times)
	in.positions = int32(max(len(times)-1, 0))
	in.start = make([]int32, len(p.Buffers))
	in.end = make([]int32, len(p.Buffers))
	for i, b := range p.Buffers {
		s, _ := slices.BinarySearch(times, b.Start)
		e, _ := slices.BinarySearch(times, b.End)
		in.start[i], in.end[i] = int32(s), int32(e)
		in.width += int64(e - s)
	}
	if len(p.Conflicts) > 0 {
		in.partners = make([][]int32, len(p.Buffers))
		for _, c := range p.Conflicts {
			in.partners[c[0]] = append(in.partners[c[0]], c[1])
			in.partners[c[1]] = append(in.partners[c[1]], c[0])
		}
	}
	diff := make([]uint64, in.positions+1)
	sub := make([]uint64, in.positions+1)
	// The same with every size rounded up to the smallest alignment.
	adiff := make([]uint64, in.positions+1)
	asub := make([]uint64, in.positions+1)
	var maxPad uint64
	for i, b := range p.Buffers {
		diff[in.start[i]] += b.Size
		sub[in.end[i]] += b.Size
		r, ok := alignUp(b.Size, in.minAlign)
		if !ok {
			return nil, fmt.Errorf("%w: buffer %d rounded to its alignment", ErrOverflow, i)
		}
		adiff[in.start[i]] += r
		asub[in.end[i]] += r
		maxPad = max(maxPad, r-b.Size)
	}
	in.liveBytes = make([]uint64, in.positions)
	var live, alive, amax uint64
	for t := range in.positions {
		var c, c2 uint64
		live, c = bits.Add64(live-sub[t], diff[t], 0)
		alive, c2 = bits.Add64(alive-asub[t], adiff[t], 0)
		if c != 0 || c2 != 0 {
			return nil, fmt.Errorf("%w: bytes live at position %d", ErrOverflow, t)
		}
		in.liveBytes[t] = live
		in.lb = max(in.lb, live)
		amax = max(amax, alive)
	}
	// Live buffers sit at multiples of minAlign, so each but the highest
	// takes its size rounded up to minAlign: no placement peaks below the
	// rounded sum less the highest one's padding, at most maxPad.
	in.goal = max(in.lb, amax-maxPad)
	return in, nil
}

// unionTree indexes the bytes placed buffers occupy by lifetime: a segment
// tree over positions in which a buffer sits in the O(log T) nodes of its
// lifetime's canonical decomposition. Each node keeps two merged sets of
// byte ranges: held, the ranges of the buffers sitting in it (they cover
// the node's whole range), and below, the ranges of every buffer sitting in
// its subtree. A buffer's lifetime [s, e) meets a placed buffer exactly
// when the placed one sits in the subtree of one of [s, e)'s canonical
// nodes or in one of their ancestors, so the bytes it must avoid are the
// union of O(log T) sets. In a well packed arena these sets are short,
// because ranges placed over a long time merge, so a query costs about the
// number of gaps rather than the number of buffers met.
type unionTree struct {
	size  int32 // leaves, a power of two
	held  []rangeSet
	below []rangeSet
	free  []span // see slab
}

func newUnionTree(positions int32) *unionTree {
	size := int32(1)
	for size < positions {
		size *= 2
	}
	return &unionTree{size: size, held: make([]rangeSet, 2*size), below: make([]rangeSet, 2*size)}
}

func (t *unionTree) reset() {
	for i := range t.held {
		t.held[i] = t.held[i][:0]
		t.below[i] = t.below[i][:0]
	}
}

func (t *unionTree) insert(s, e int32, r span) { t.insertAt(1, 0, t.size, s, e, r) }

func (t *unionTree) insertAt(node, lo, hi, s, e int32, r span) {
	t.below[node] = t.slab(t.below[node]).add(r)
	if s <= lo && hi <= e {
		t.held[node] = t.slab(t.held[node]).add(r)
		return
	}
	mid := (lo + hi) / 2
	if s < mid {
		t.insertAt(2*node, lo, mid, s, e, r)
	}
	if e > mid {
		t.insertAt(2*node+1, mid, hi, s, e, r)
	}
}

// slab gives a set that has never held a range room for a few, cut from
// one shared array: sets start near each other and without a chain of
// small allocations.
func (t *unionTree) slab(rs rangeSet) rangeSet {
	const room = 4
	if cap(rs) > 0 {
		return rs
	}
	if len(t.free) < room {
		t.free = make([]span, 1024*room)
	}
	rs, t.free = t.free[:0:room], t.free[room:]
	return rs
}

// gather appends to dst the sets whose union is the bytes taken by placed
// buffers whose lifetimes meet [s, e). The sets alias the tree's; empty
// ones are left out.
func (t *unionTree) gather(dst []rangeSet, s, e int32) []rangeSet {
	return t.gatherAt(dst, 1, 0, t.size, s, e)
}

func (t *unionTree) gatherAt(dst []rangeSet, node, lo, hi, s, e int32) []rangeSet {
	if len(t.below[node]) == 0 {
		return dst
	}
	if s <= lo && hi <= e {
		return append(dst, t.below[node])
	}
	if len(t.held[node]) > 0 {
		dst = append(dst, t.held[node])
	}
	mid := (lo + hi) / 2
	if s < mid {
		dst = t.gatherAt(dst, 2*node, lo, mid, s, e)
	}
	if e > mid {
		dst = t.gatherAt(dst, 2*node+1, mid, hi, s, e)
	}
	return dst
}

// unionAll returns the union of sets, merging the two shortest first
// (the order of a Huffman code, which touches the fewest ranges when the
// sets' lengths differ, as they do between a wide node's set and a narrow
// one's). It may return one of sets itself, or a slice of buf.
func unionAll(sets []rangeSet, buf *[]span) rangeSet {
	if len(sets) == 0 {
		return nil
	}
	// sets is kept sorted by length, longest first; sets are few, so an
	// insertion sort.
	for i := 1; i < len(sets); i++ {
		for k := i; k > 0 && len(sets[k-1]) < len(sets[k]); k-- {
			sets[k-1], sets[k] = sets[k], sets[k-1]
		}
	}
	out := (*buf)[:0]
	for len(sets) > 1 {
		n := len(sets)
		from := len(out)
		out = mergeUnion(out, sets[n-1], sets[n-2])
		m := rangeSet(out[from:len(out):len(out)])
		sets = sets[:n-1]
		k := n - 2
		for k > 0 && len(sets[k-1]) < len(m) {
			sets[k] = sets[k-1]
			k--
		}
		sets[k] = m
	}
	*buf = out
	return sets[0]
}

// mergeUnion appends the union of the sets a and b to dst.
func mergeUnion(dst []span, a, b rangeSet) []span {
	if len(a) == 0 || len(b) == 0 {
		return append(append(dst, a...), b...)
	}
	// cur is the range being extended; it is appended once the next
	// range starts past its end.
	var cur span
	if a[0].off <= b[0].off {
		cur, a = a[0], a[1:]
	} else {
		cur, b = b[0], b[1:]
	}
	for len(a) > 0 && len(b) > 0 {
		var r span
		if a[0].off <= b[0].off {
			r, a = a[0], a[1:]
		} else {
			r, b = b[0], b[1:]
		}
		if r.off <= cur.end {
			cur.end = max(cur.end, r.end)
		} else {
			dst = append(dst, cur)
			cur = r
		}
	}
	if len(a) == 0 {
		a = b
	}
	for len(a) > 0 && a[0].off <= cur.end {
		cur.end = max(cur.end, a[0].end)
		a = a[1:]
	}
	return append(append(dst, cur), a...)
}

// rangeSet is a sorted set of disjoint, non-touching byte ranges.
type rangeSet []span

// add returns the set with r merged in. It is the placer's hot path
// with mergeUnion, so it searches and moves by hand: most adds replace
// one range in place or insert one.
func (rs rangeSet) add(r span) rangeSet {
	// i: first range that ends at or after r starts (touching merges);
	// j: first range that starts after r ends.
	n := len(rs)
	i, hi := 0, n
	for i < hi {
		m := int(uint(i+hi) >> 1)
		if rs[m].end < r.off {
			i = m + 1
		} else {
			hi = m
		}
	}
	j := i
	for j < n && rs[j].off <= r.end {
		j++
	}
	switch {
	case i == j: // a new range
		rs = append(rs, span{})
		copy(rs[i+1:], rs[i:n])
		rs[i] = r
		return rs
	case j == i+1: // merged into one range
		rs[i] = span{min(r.off, rs[i].off), max(r.end, rs[i].end)}
		return rs
	}
	r.off = min(r.off, rs[i].off)
	r.end = max(r.end, rs[j-1].end)
	rs[i] = r
	return append(rs[:i+1], rs[j:]...)
}

// fit selects a gap for a buffer among the occupied ranges below.
type fit uint8

const (
	// bestFit takes the smallest gap the buffer fits in (the lowest such
	// gap on ties), or the top when no gap fits.
	bestFit fit = iota
	// firstFit takes the lowest offset the buffer fits at.
	firstFit
)

type span struct{ off, end uint64 }

// placer places buffers one at a time, each at a gap among the placed
// buffers it conflicts with.
type placer struct {
	in      *instance
	tree    *unionTree
	offsets []uint64
	placed  []bool
	sets    []rangeSet
	extra   rangeSet
	buf     []span
	peak    uint64
	merged  int64 // byte ranges gathered into unions: the placer's work
}

func newPlacer(in *instance) *placer {
	return &placer{
		in:      in,
		tree:    newUnionTree(in.positions),
		offsets: make([]uint64, len(in.bufs)),
		placed:  make([]bool, len(in.bufs)),
	}
}

func (pl *placer) reset() {
	pl.tree.reset()
	clear(pl.placed)
	pl.peak = 0
}

// occupied returns the bytes taken by placed buffers that buffer i must
// avoid, as a sorted set of disjoint ranges.
func (pl *placer) occupied(i int32) rangeSet {
	pl.sets = pl.tree.gather(pl.sets[:0], pl.in.start[i], pl.in.end[i])
	if pl.in.partners != nil {
		pl.extra = pl.extra[:0]
		for _, j := range pl.in.partners[i] {
			if pl.placed[j] {
				pl.extra = pl.extra.add(span{pl.offsets[j], pl.offsets[j] + pl.in.bufs[j].Size})
			}
		}
		if len(pl.extra) > 0 {
			pl.sets = append(pl.sets, pl.extra)
		}
	}
	for _, set := range pl.sets {
		pl.merged += int64(len(set))
	}
	return unionAll(pl.sets, &pl.buf)
}

// place puts buffer i at the gap f chooses and records it.
func (pl *placer) place(i int32, f fit) error {
	b := &pl.in.bufs[i]
	a := b.align()
	occ := pl.occupied(i)
	best, bestGap, found := uint64(0), uint64(0), false
	var floor uint64 // end of the occupied ranges so far
	for _, s := range occ {
		if s.off > floor {
			if y, ok := alignUp(floor, a); ok && y <= s.off && s.off-y >= b.Size {
				gap := s.off - y // the room the buffer would sit in
				if f == firstFit {
					best, found = y, true
					break
				}
				if !found || gap < bestGap {
					best, bestGap, found = y, gap, true
				}
			}
		}
		floor = max(floor, s.end)
	}
	if !found {
		y, ok := alignUp(floor, a)
		if !ok {
			return fmt.Errorf("%w: placing buffer %d above %d", ErrOverflow, i, floor)
		}
		best = y
	}
	end, c := bits.Add64(best, b.Size, 0)
	if c != 0 {
		return fmt.Errorf("%w: buffer %d at %d", ErrOverflow, i, best)
	}
	pl.offsets[i] = best
	pl.placed[i] = true
	pl.peak = max(pl.peak, end)
	// No buffer can start between end and the next multiple of the
	// smallest alignment, so that padding is recorded as taken: ranges
	// separated only by padding merge, and the tree's sets stay short.
	taken, ok := alignUp(end, pl.in.minAlign)
	if !ok {
		taken = end
	}
	pl.tree.insert(pl.in.start[i], pl.in.end[i], span{best, taken})
	return nil
}

// run places every buffer in order and returns the peak. It stops early,
// with complete false, once the peak reaches stop (when stop is not 0):
// the placement cannot end below stop any more; or once the byte ranges
// merged pass most (when most is not 0).
func (pl *placer) run(order []int32, f fit, stop uint64, most int64) (peak uint64, complete bool, err error) {
	pl.reset()
	for _, i := range order {
		if err := pl.place(i, f); err != nil {
			return 0, false, err
		}
		if stop > 0 && pl.peak >= stop || most > 0 && pl.merged > most {
			return pl.peak, false, nil
		}
	}
	return pl.peak, true, nil
}

// alignUp rounds x up to a multiple of the power of two a; ok is false on
// overflow.
func alignUp(x, a uint64) (uint64, bool) {
	s, c := bits.Add64(x, a-1, 0)
	return s &^ (a - 1), c == 0
}
