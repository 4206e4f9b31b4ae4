package pack

import (
	"cmp"
	"slices"
)

// searcher decides whether a placement with peak ≤ capacity exists, by a
// depth-first search over canonical placements (the approach of Moffitt's
// MiniMalloc, ASPLOS 2023, written anew here):
//
//   - Canonical: buffers are placed in nondecreasing offset order, each at
//     its lowest feasible offset given the buffers placed before it (the
//     highest end among its placed neighbours). Every placement can be
//     pushed down and sorted into this form without raising its peak, so
//     searching these alone is complete.
//   - Order: at every node the candidates are the unplaced buffers sorted
//     by that lowest offset, then by a static preorder; ties in offset
//     must follow the preorder, which removes permutations of the same
//     placement.
//   - Dominance: a candidate whose offset is at or above the top of some
//     other unplaced buffer (its lowest offset plus size) is skipped: that
//     buffer could always go below it first.
//   - Inference: once the last placed offset is o, each position still
//     needs max(o, floor) plus the sizes of its unplaced buffers; when that
//     exceeds the capacity, the branch is cut.
//
// Work is counted in nodes, never in time, so every machine explores the
// same tree and returns the same placement.
type searcher struct {
	in       *instance
	capacity uint64
	adj      [][]int32 // neighbours: lifetimes meet, or a conflict
	pre      []int32   // preorder rank per buffer
	offsets  []uint64
	placed   []bool
	minOff   []uint64 // per unplaced buffer: lowest feasible offset
	floor    []uint64 // per position: highest end placed there
	total    []uint64 // per position: sizes of unplaced buffers live there
	nodes    int64
	limit    int64
	work     int64 // sections scanned and nodes, over every solve
	maxWork  int64 // solve aborts once work reaches it
	aborted  bool
	changes  []offChange
	fchanges []floorChange
	cuts     []int32 // per section boundary k|k+1: unplaced buffers crossing it
	split    bool    // decompose at cuts (not with conflicts, which cross them)
	pool     [][]int32
	moved    []bool  // scratch: per buffer, its minimum offset grew (reorder)
	rising   []int32 // scratch: those candidates, for reorder
	// secOff and secIdx list the buffers live in each section (CSR).
	secOff, secIdx []int32
	keys           []key    // the preorder's keys
	resorted       bool     // order split-off parts anew
	pressure       []uint64 // byConflict values
	curTotal       []uint64 // scratch: per buffer, the most bytes its sections still need
	twin           []int32  // per buffer: its identical predecessor in the preorder, or -1
	cover          []int32  // scratch: a difference array over sections, zero between uses
}

type offChange struct {
	buf int32
	old uint64
}

type floorChange struct {
	pos int32
	old uint64
}

// adjacency returns, per buffer, the buffers it must not share bytes with.
// ok is false when the pairs would exceed maxPairs (the caller's work
// bound).
func (in *instance) adjacency(maxPairs int) (adj [][]int32, ok bool) {
	n := len(in.bufs)
	byStart := make([]int32, n)
	for i := range byStart {
		byStart[i] = int32(i)
	}
	slices.SortFunc(byStart, func(a, b int32) int {
		return cmp.Or(cmp.Compare(in.start[a], in.start[b]), cmp.Compare(a, b))
	})
	// Count the pairs first (for the k-th buffer to start, the k before
	// it less those ended by then), so that an instance with too many is
	// turned down before any is built.
	ends := slices.Clone(in.end)
	slices.Sort(ends)
	total, e := 0, 0
	for k, i := range byStart {
		for e < n && ends[e] <= in.start[i] {
			e++
		}
		if total += k - e; total > maxPairs {
			return nil, false
		}
	}
	adj = make([][]int32, n)
	pairs := 0
	for x, i := range byStart {
		for _, j := range byStart[x+1:] {
			if in.start[j] >= in.end[i] {
				break
			}
			if pairs++; pairs > maxPairs {
				return nil, false
			}
			adj[i] = append(adj[i], j)
			adj[j] = append(adj[j], i)
		}
	}
	for i, ps := range in.partners {
		for _, j := range ps {
			if !overlap(&in.bufs[i], &in.bufs[j]) && !slices.Contains(adj[i], j) {
				adj[i] = append(adj[i], j)
			}
		}
	}
	for i := range adj {
		slices.Sort(adj[i])
	}
	return adj, true
}

func newSearcher(in *instance, adj [][]int32) *searcher {
	n := len(in.bufs)
	s := &searcher{
		in:       in,
		adj:      adj,
		pre:      make([]int32, n),
		offsets:  make([]uint64, n),
		placed:   make([]bool, n),
		moved:    make([]bool, n),
		minOff:   make([]uint64, n),
		floor:    make([]uint64, in.positions),
		total:    make([]uint64, in.positions),
		cuts:     make([]int32, max(in.positions-1, 0)),
		split:    in.partners == nil,
		cover:    make([]int32, in.positions+1),
		twin:     make([]int32, n),
		curTotal: make([]uint64, n),
	}
	s.secOff = make([]int32, in.positions+1)
	for i := range in.bufs {
		for p := in.start[i]; p < in.end[i]; p++ {
			s.secOff[p+1]++
		}
	}
	for p := range in.positions {
		s.secOff[p+1] += s.secOff[p]
	}
	s.secIdx = make([]int32, s.secOff[in.positions])
	fill := slices.Clone(s.secOff[:in.positions])
	for i := range in.bufs {
		for p := in.start[i]; p < in.end[i]; p++ {
			s.secIdx[fill[p]] = int32(i)
			fill[p]++
		}
	}
	return s
}

// partition is a set of unplaced buffers alone in the sections [lo, hi):
// no other unplaced buffer is live there, so it is solved on its own.
type partition struct {
	bufs   []int32
	lo, hi int32
}

// setup is the work solve spends before its first node: it scans every
// buffer's sections.
func (s *searcher) setup() int64 { return int64(len(s.in.bufs)) + s.in.width }

// affords reports whether the work left pays for a solve's setup and a
// node; solve is not started otherwise.
func (s *searcher) affords() bool { return s.work+s.setup() < s.maxWork }

// solve searches for a placement with peak ≤ capacity under the preorder
// by keys, spending at most limit nodes. It returns found (the placement is
// in s.offsets), or (false, complete) where complete means the whole tree
// was explored: no such placement exists.
func (s *searcher) solve(capacity uint64, f *features, po preorder, limit int64) (found, complete bool) {
	s.capacity, s.limit, s.nodes, s.aborted = capacity, limit, 0, false
	if !s.affords() {
		s.aborted = true
		return false, false
	}
	s.work += s.setup()
	s.keys, s.resorted, s.pressure = po.keys, po.resorted, f.pressure
	order := s.in.order(f, po.keys...)
	for r, i := range order {
		s.pre[i] = int32(r)
	}
	s.twins(order)
	if s.in.lb > capacity {
		return false, true
	}
	clear(s.placed)
	clear(s.minOff)
	clear(s.floor)
	copy(s.total, s.in.liveBytes)
	clear(s.cuts)
	for i := range s.in.bufs {
		for k := s.in.start[i]; k < s.in.end[i]-1; k++ {
			s.cuts[k]++
		}
	}
	found = true
	for _, part := range s.partitions(order, 0, s.in.positions) {
		if !s.solvePart(part, 0) {
			found = false
			break
		}
	}
	return found, !found && !s.aborted
}

// partitions splits the unplaced buffers of bufs, which live in [lo, hi),
// at the section boundaries no unplaced buffer crosses. Each partition
// keeps the order of bufs.
func (s *searcher) partitions(bufs []int32, lo, hi int32) []partition {
	if !s.split {
		return []partition{{bufs: bufs, lo: lo, hi: hi}}
	}
	var parts []partition
	first := lo
	for k := lo; k < hi; k++ {
		if k == hi-1 || s.cuts[k] == 0 {
			parts = append(parts, partition{lo: first, hi: k + 1})
			first = k + 1
		}
	}
	if len(parts) == 1 {
		parts[0].bufs = bufs
		return parts
	}
	for _, i := range bufs {
		if s.placed[i] {
			continue
		}
		k, _ := slices.BinarySearchFunc(parts, s.in.start[i], func(p partition, x int32) int { return cmp.Compare(p.hi-1, x) })
		parts[k].bufs = append(parts[k].bufs, i)
	}
	return slices.DeleteFunc(parts, func(p partition) bool { return len(p.bufs) == 0 })
}

// solvePart solves one partition from scratch. With a resorted preorder,
// a partition split off during the search gets its own order, its totals
// taken from the bytes its sections still need (as MiniMalloc does); its
// buffers' ranks are restored afterwards, for the search that split it.
func (s *searcher) solvePart(part partition, depth int) bool {
	cands := slices.Clone(part.bufs)
	if depth == 0 || !s.resorted {
		slices.SortFunc(cands, func(a, b int32) int { return cmp.Compare(s.pre[a], s.pre[b]) })
		return s.search(part, cands, 0, -1, -1, depth)
	}
	saved := make([]int32, len(cands))
	for k, i := range cands {
		saved[k] = s.pre[i]
		t := uint64(0)
		for p := s.in.start[i]; p < s.in.end[i]; p++ {
			t = max(t, s.total[p])
		}
		s.curTotal[i] = t
	}
	s.in.sortBy(cands, s.curTotal, s.pressure, s.keys)
	for r, i := range cands {
		s.pre[i] = int32(r)
	}
	ok := s.search(part, cands, 0, -1, -1, depth)
	for k := range saved { // saved follows part.bufs, which cands was cloned from
		s.pre[part.bufs[k]] = saved[k]
	}
	return ok
}

// compare orders candidates by their lowest offset, then their rank.
func (s *searcher) compare(a, b int32) int {
	return cmp.Or(cmp.Compare(s.minOff[a], s.minOff[b]), cmp.Compare(s.pre[a], s.pre[b]))
}

// reorder restores the order of cands, sorted before the minimum offsets
// of the buffers in ch grew: those are taken out, sorted and merged back,
// so a placement that lifts many candidates costs their number times its
// logarithm, not the distance each moves.
func (s *searcher) reorder(cands []int32, ch []offChange) {
	for _, c := range ch {
		s.moved[c.buf] = true
	}
	rising := s.rising[:0]
	w := 0
	for _, i := range cands {
		if s.moved[i] {
			rising = append(rising, i)
		} else {
			cands[w] = i
			w++
		}
	}
	for _, c := range ch {
		s.moved[c.buf] = false
	}
	s.rising = rising
	if len(rising) == 0 {
		return
	}
	slices.SortFunc(rising, s.compare)
	// Merge from the back: cands[:w] and rising fill cands exactly.
	i, j := w-1, len(rising)-1
	for k := len(cands) - 1; j >= 0; k-- {
		if i >= 0 && s.compare(rising[j], cands[i]) < 0 {
			cands[k] = cands[i]
			i--
		} else {
			cands[k] = rising[j]
			j--
		}
	}
}

// scratch returns an empty slice for the candidates at depth.
func (s *searcher) scratch(depth, n int) []int32 {
	for len(s.pool) <= depth {
		s.pool = append(s.pool, nil)
	}
	if cap(s.pool[depth]) < n {
		s.pool[depth] = make([]int32, 0, n)
	}
	return s.pool[depth][:0]
}

// search extends the partial placement of part. parent lists its buffers
// not placed before the parent node, sorted by (minOff, pre) as of then
// when changed ≥ 0: the minimum offsets that grew since are those of
// s.changes[changed:]. With changed < 0, parent is in another order. On
// success every buffer of part has its offset in s.offsets and the search
// state is restored.
func (s *searcher) search(part partition, parent []int32, lastOff uint64, lastPre int32, changed, depth int) bool {
	if s.nodes >= s.limit || s.work >= s.maxWork {
		s.aborted = true
		return false
	}
	s.nodes++
	s.work += int64(len(parent)) + 1
	// Drop placed buffers, then order the rest.
	cands := s.scratch(depth, len(parent))
	for _, i := range parent {
		if !s.placed[i] {
			cands = append(cands, i)
		}
	}
	s.pool[depth] = cands
	if len(cands) == 0 {
		return true
	}
	if changed < 0 {
		slices.SortFunc(cands, s.compare)
	} else {
		s.reorder(cands, s.changes[changed:])
	}
	// The lowest top of an unplaced buffer at its lowest offset: a
	// placement that puts the next buffer at or above it leaves that
	// buffer's room free for good, so it is not compacted and the search
	// meets its compacted form elsewhere.
	minTop := ^uint64(0)
	for _, i := range cands {
		minTop = min(minTop, s.minOff[i]+s.in.bufs[i].Size)
	}
	for _, i := range cands {
		if s.work >= s.maxWork {
			s.aborted = true // within one candidate of the budget
			return false
		}
		off := s.minOff[i]
		if off < lastOff || off == lastOff && s.pre[i] < lastPre {
			continue // not canonical
		}
		if off >= minTop {
			break // dominated, and so is every later candidate
		}
		if t := s.twin[i]; t >= 0 && !s.placed[t] {
			continue // its identical twin earlier in the preorder goes first
		}
		size := s.in.bufs[i].Size
		if off+size > s.capacity {
			continue
		}
		if !s.feasibleWith(part, i, off) {
			continue
		}
		c0, f0 := s.place(i, off)
		ok := s.feasible(part, off)
		if ok {
			if parts := s.cutsAfter(i, part); parts != nil {
				for _, sub := range parts {
					if ok = s.solvePart(sub, depth+1); !ok {
						break
					}
				}
			} else {
				ok = s.search(part, cands, off, s.pre[i], c0, depth+1)
			}
		}
		s.unplace(i, c0, f0)
		if ok {
			s.offsets[i] = off
			return true
		}
		if s.aborted {
			return false
		}
		if s.hatless(i) {
			// No unplaced buffer meets i, so where i sits constrains
			// the rest only through the offset order; another buffer
			// first cannot do better.
			break
		}
	}
	return false
}

// twins finds, for each buffer, the buffer just before it in order that is
// identical to it (same lifetime, size and alignment, no conflicts), or -1.
// Swapping identical buffers changes nothing, so the search places twins in
// preorder only.
func (s *searcher) twins(order []int32) {
	type shape struct {
		start, end  int64
		size, align uint64
	}
	last := map[shape]int32{}
	for _, i := range order {
		s.twin[i] = -1
		if s.in.partners != nil && len(s.in.partners[i]) > 0 {
			continue
		}
		b := &s.in.bufs[i]
		k := shape{b.Start, b.End, b.Size, b.align()}
		if t, ok := last[k]; ok {
			s.twin[i] = t
		}
		last[k] = i
	}
}

// hatless reports whether no unplaced buffer meets i.
func (s *searcher) hatless(i int32) bool {
	for _, j := range s.adj[i] {
		if !s.placed[j] {
			return false
		}
	}
	return true
}

// place puts buffer i at off and returns the undo marks.
func (s *searcher) place(i int32, off uint64) (int, int) {
	end := off + s.in.bufs[i].Size
	s.placed[i] = true
	c0, f0 := len(s.changes), len(s.fchanges)
	s.work += int64(len(s.adj[i])) + int64(s.in.end[i]-s.in.start[i])
	for _, j := range s.adj[i] {
		if !s.placed[j] && s.minOff[j] < end {
			s.changes = append(s.changes, offChange{j, s.minOff[j]})
			s.minOff[j], _ = alignUp(end, s.in.bufs[j].align())
		}
	}
	for p := s.in.start[i]; p < s.in.end[i]; p++ {
		s.fchanges = append(s.fchanges, floorChange{p, s.floor[p]})
		s.floor[p] = max(s.floor[p], end)
		s.total[p] -= s.in.bufs[i].Size
	}
	for k := s.in.start[i]; k < s.in.end[i]-1; k++ {
		s.cuts[k]--
	}
	// Floors of the sections whose buffers' minimum offsets grew. Those
	// buffers all met i, so they now start at end or above (their
	// alignment may lift them further); a floor already at end cannot
	// rise to a minimum of theirs. The sections they cover are swept once.
	//
	// A section's floor matters only where it may fail the inference
	// check (see feasible): with the section's unplaced bytes, which
	// only shrink down the tree, above the capacity. The new floor is at
	// most the highest minimum offset of those buffers (each section
	// swept is in the lifetime of one of them, and a floor is at most the
	// minimum offset of any unplaced buffer live there), so sections
	// where even that fits are not scanned. Skipping a raise only weakens
	// the check where it cannot fail, so the search stays complete.
	lo, hi := s.in.positions, int32(0)
	var highest uint64
	for _, ch := range s.changes[c0:] {
		j := ch.buf
		s.cover[s.in.start[j]]++
		s.cover[s.in.end[j]]--
		lo, hi = min(lo, s.in.start[j]), max(hi, s.in.end[j])
		highest = max(highest, s.minOff[j])
	}
	depth := int32(0)
	for p := lo; p < hi; p++ {
		depth += s.cover[p]
		s.cover[p] = 0
		if depth > 0 && s.floor[p] < end && highest+s.total[p] > s.capacity {
			s.raiseFloor(p)
		}
	}
	if hi > lo {
		s.cover[hi] = 0
	}
	return c0, f0
}

func (s *searcher) unplace(i int32, c0, f0 int) {
	for k := len(s.changes) - 1; k >= c0; k-- {
		s.minOff[s.changes[k].buf] = s.changes[k].old
	}
	s.changes = s.changes[:c0]
	for k := len(s.fchanges) - 1; k >= f0; k-- {
		s.floor[s.fchanges[k].pos] = s.fchanges[k].old
	}
	s.fchanges = s.fchanges[:f0]
	for p := s.in.start[i]; p < s.in.end[i]; p++ {
		s.total[p] += s.in.bufs[i].Size
	}
	for k := s.in.start[i]; k < s.in.end[i]-1; k++ {
		s.cuts[k]++
	}
	s.placed[i] = false
}

// cutsAfter returns the partitions of part's unplaced buffers when placing
// i opened a boundary no unplaced buffer crosses, or nil.
func (s *searcher) cutsAfter(i int32, part partition) []partition {
	if !s.split {
		return nil
	}
	opened := false
	for k := max(s.in.start[i], part.lo); k < min(s.in.end[i]-1, part.hi-1); k++ {
		if s.cuts[k] == 0 {
			opened = true
			break
		}
	}
	if !opened {
		return nil
	}
	parts := s.partitions(part.bufs, part.lo, part.hi)
	if len(parts) <= 1 {
		return nil
	}
	return parts
}

// feasible is the inference check: in every section of part, the
// unplaced buffers live there stack above the higher of the last placed
// offset and the section's floor; that stack must fit the capacity.
func (s *searcher) feasible(part partition, lastOff uint64) bool {
	s.work += int64(part.hi - part.lo)
	for p := part.lo; p < part.hi; p++ {
		if t := s.total[p]; t > 0 && max(s.floor[p], lastOff)+t > s.capacity {
			return false
		}
	}
	return true
}

// feasibleWith is feasible as it would be right after placing i at off,
// before the floors of i's neighbours' sections are raised: a cheap test
// that spares most failing candidates the cost of place.
func (s *searcher) feasibleWith(part partition, i int32, off uint64) bool {
	end, size := off+s.in.bufs[i].Size, s.in.bufs[i].Size
	s.work += int64(part.hi - part.lo)
	for p := part.lo; p < part.hi; p++ {
		t, f := s.total[p], max(s.floor[p], off)
		if p >= s.in.start[i] && p < s.in.end[i] {
			t -= size
			f = max(f, end)
		}
		if t > 0 && f+t > s.capacity {
			return false
		}
	}
	return true
}

// raiseFloor lifts section p's floor to the lowest minOff among its
// unplaced buffers: none of them can go lower, and minimum offsets only
// grow down the search tree.
func (s *searcher) raiseFloor(p int32) {
	lowest := ^uint64(0)
	for _, u := range s.secIdx[s.secOff[p]:s.secOff[p+1]] {
		if !s.placed[u] {
			if s.minOff[u] <= s.floor[p] {
				return
			}
			lowest = min(lowest, s.minOff[u])
		}
	}
	if lowest != ^uint64(0) && lowest > s.floor[p] {
		s.fchanges = append(s.fchanges, floorChange{p, s.floor[p]})
		s.floor[p] = lowest
	}
}
