package pack

import (
	"cmp"
	"math/rand/v2"
	"slices"
)

// skySearch places buffers bottom up, as a strip packer fills the lowest
// gap of its skyline. It keeps, per section, the floor (everything below
// it is taken) and the bytes still to place there. At each step the lowest
// point of the skyline, leftmost (section a at level y, inside the valley
// [a, b) of sections at that level), is either covered by an unplaced
// buffer that starts at a and ends by b, at y, or left empty for good: the
// sections from a up to the next one where such a buffer starts are raised
// to the valley's lower neighbour.
//
// Two uses: dive places every buffer without backtracking, preferring
// candidates that end at the valley's end or whose top meets a
// neighbour's floor (the skyline loses a step), and among those one after
// which no valley is dead; solve is a depth-first search over the same
// moves under a capacity, with restarts that shuffle the ties. A valley
// keeps its level, its extent and its candidates until the search reaches
// it, while its neighbours only rise, so a valley that can be neither
// covered nor raised within the capacity is dead at once, not when
// reached: the search cuts there. On instances with no slack at the
// optimum (every instant full) this meets the exact fits that order-driven
// placers miss. It proves nothing (alignment and the partial raises make
// it incomplete); the canonical search does the proofs.
//
// Work is counted in nodes and in sections touched.
type skySearch struct {
	in       *instance
	capacity uint64
	floor    []uint64
	left     []uint64  // bytes of unplaced buffers live in each section
	starts   [][]int32 // buffers by first section, in candidate order
	placed   []bool
	offsets  []uint64
	sky      levelTree
	placedN  int
	rng      *rand.Rand // shuffles ties on restarts; nil: the static order
	work     int64      // sections touched and nodes
	limit    int64      // work allowed to solve
	aborted  bool
	undo     []levelChange
	gone     []int32   // sections emptied by covers, for undo
	cands    [][]int32 // candidates per depth
	halt     *halt     // a restart whose result will be thrown away
}

// levelChange undoes a cover or a raise: sections [a, b) were at level
// old, and gone[mark:] are the sections the cover emptied.
type levelChange struct {
	a, b int32
	old  uint64
	mark int
}

func newSkySearch(in *instance) *skySearch {
	s := &skySearch{in: in, floor: make([]uint64, in.positions), left: make([]uint64, in.positions),
		starts: make([][]int32, in.positions), placed: make([]bool, len(in.bufs)), offsets: make([]uint64, len(in.bufs))}
	for i := range in.bufs {
		s.starts[in.start[i]] = append(s.starts[in.start[i]], int32(i))
	}
	s.sky.init(in.positions)
	return s
}

// reset empties the placement and orders each section's starters: those
// that reach furthest first, then the tallest; shuffled when restarting.
func (s *skySearch) reset() {
	in := s.in
	for _, l := range s.starts {
		slices.SortFunc(l, func(i, j int32) int {
			return cmp.Or(cmp.Compare(in.end[j], in.end[i]), cmp.Compare(in.bufs[j].Size, in.bufs[i].Size), cmp.Compare(i, j))
		})
		if s.rng != nil {
			s.rng.Shuffle(len(l), func(x, y int) { l[x], l[y] = l[y], l[x] })
		}
	}
	clear(s.floor)
	clear(s.placed)
	copy(s.left, in.liveBytes)
	s.sky.reset(s.left)
	s.undo, s.gone, s.placedN = s.undo[:0], s.gone[:0], 0
}

// valley returns the lowest point: section a at level y. It is the
// leftmost active section at the lowest level, so the valley starts there;
// b is the valley's end as far as it matters: up to the furthest end of an
// unplaced buffer starting at a, or, when none does, the whole valley.
func (s *skySearch) valley() (a, b int32, y uint64) {
	a = s.sky.lowest()
	y = s.floor[a]
	reach := s.in.positions
	if n := s.starters(a); n > 0 {
		reach = n
	}
	b = a + 1
	for b < reach && s.left[b] > 0 && s.floor[b] <= y {
		b++
	}
	s.work += int64(b-a) + 1
	return a, b, y
}

// starters returns the furthest end of an unplaced buffer starting at
// section a, or 0 when none is left.
func (s *skySearch) starters(a int32) int32 {
	var far int32
	for _, i := range s.starts[a] {
		if !s.placed[i] {
			far = max(far, s.in.end[i])
		}
	}
	s.work += int64(len(s.starts[a]))
	return far
}

// valleyEnd extends the valley [a, b) at level y to its end.
func (s *skySearch) valleyEnd(a, b int32, y uint64) int32 {
	for b < s.in.positions && s.left[b] > 0 && s.floor[b] <= y {
		b++
		s.work++
	}
	return b
}

// raiseTo returns the level the valley [a, b) is raised to when its lowest
// point stays empty: its lower neighbour, or ^0 when it has none.
func (s *skySearch) raiseTo(a, b int32) uint64 {
	up := ^uint64(0)
	if a > 0 && s.left[a-1] > 0 {
		up = s.floor[a-1]
	}
	if b < s.in.positions && s.left[b] > 0 {
		up = min(up, s.floor[b])
	}
	return up
}

// bare returns the end of the run of sections from a, inside the valley
// [a, b), where no unplaced buffer that fits the valley starts: leaving a
// empty would leave each of them empty in turn, at the same raise.
func (s *skySearch) bare(a, b int32) int32 {
	for p := a + 1; p < b; p++ {
		for _, i := range s.starts[p] {
			s.work++
			if !s.placed[i] && s.in.end[i] <= b {
				return p
			}
		}
	}
	return b
}

// score ranks a candidate for the valley [a, b) at level y: ending at b
// counts 2, a top that meets a neighbour's floor 1.
func (s *skySearch) score(i, a, b int32, y uint64) int {
	in := s.in
	top, sc := y+in.bufs[i].Size, 0
	if in.end[i] == b {
		sc += 2
	}
	if a > 0 && s.left[a-1] > 0 && s.floor[a-1] == top || in.end[i] < in.positions && s.left[in.end[i]] > 0 && s.floor[in.end[i]] == top {
		sc++
	}
	return sc
}

// fits returns buffer i's offset at level y and whether its top stays
// within the capacity.
func (s *skySearch) fits(i int32, y uint64) (uint64, bool) {
	off, ok := alignUp(y, s.in.bufs[i].align())
	top := off + s.in.bufs[i].Size
	return off, ok && top >= off && top <= s.capacity
}

// cover places buffer i at off, all of whose sections are at level y.
func (s *skySearch) cover(i int32, off, y uint64) {
	in := s.in
	st, en, size := in.start[i], in.end[i], in.bufs[i].Size
	s.undo = append(s.undo, levelChange{st, en, y, len(s.gone)})
	s.placed[i] = true
	s.placedN++
	s.offsets[i] = off
	top := off + size
	for p := st; p < en; p++ {
		s.floor[p] = top
		s.left[p] -= size
		if s.left[p] == 0 {
			s.gone = append(s.gone, p)
		}
	}
	s.work += int64(en - st)
	s.sky.assign(st, en, top)
	for _, p := range s.gone[s.undo[len(s.undo)-1].mark:] {
		s.sky.deactivate(p)
	}
}

// raise lifts sections [a, r), all at level y, to up.
func (s *skySearch) raise(a, r int32, y, up uint64) {
	s.undo = append(s.undo, levelChange{a, r, y, len(s.gone)})
	for p := a; p < r; p++ {
		s.floor[p] = up
	}
	s.work += int64(r - a)
	s.sky.assign(a, r, up)
}

// back undoes the last cover of buffer i (i ≥ 0) or the last raise.
func (s *skySearch) back(i int32) {
	c := s.undo[len(s.undo)-1]
	s.undo = s.undo[:len(s.undo)-1]
	if i >= 0 {
		size := s.in.bufs[i].Size
		for p := c.a; p < c.b; p++ {
			s.left[p] += size
		}
		s.placed[i] = false
		s.placedN--
	}
	for p := c.a; p < c.b; p++ {
		s.floor[p] = c.old
	}
	s.work += int64(c.b - c.a)
	for _, p := range s.gone[c.mark:] {
		s.sky.activate(p)
	}
	s.gone = s.gone[:c.mark]
	s.sky.assign(c.a, c.b, c.old)
}

// settled checks the valleys next to a change of the floor over [a, b).
func (s *skySearch) settled(a, b int32) bool {
	for _, p := range [4]int32{a - 1, a, b - 1, b} {
		if p >= 0 && p < s.in.positions && s.left[p] > 0 && !s.alive(p) {
			return false
		}
	}
	return true
}

// alive reports whether the run of sections at section p's level is not a
// valley, or is one that a buffer can still cover or that can be raised.
func (s *skySearch) alive(p int32) bool {
	in := s.in
	y := s.floor[p]
	a, b := p, p+1
	for a > 0 && s.left[a-1] > 0 && s.floor[a-1] == y {
		if a--; p-a > aliveScan {
			return true // too wide to check cheaply: assume alive
		}
	}
	for b < in.positions && s.left[b] > 0 && s.floor[b] == y {
		if b++; b-p > aliveScan {
			return true
		}
	}
	s.work += int64(b - a)
	if a > 0 && s.left[a-1] > 0 && s.floor[a-1] < y || b < in.positions && s.left[b] > 0 && s.floor[b] < y {
		return true // not a valley
	}
	for _, i := range s.starts[a] {
		s.work++
		if !s.placed[i] && in.end[i] <= b {
			if _, ok := s.fits(i, y); ok {
				return true
			}
		}
	}
	up := s.raiseTo(a, b)
	return up != ^uint64(0) && up+s.left[a] >= up && up+s.left[a] <= s.capacity
}

// dive places every buffer without backtracking, the capacity's cuts
// steering its choices, and reports whether it finished within limit work
// (the offsets are then in s.offsets).
func (s *skySearch) dive(capacity uint64, limit int64) bool {
	s.capacity = capacity
	s.reset()
	in := s.in
	end := s.work + limit
	for s.placedN < len(in.bufs) {
		if s.work >= end {
			return false
		}
		s.work++
		a, b, y := s.valley()
		chosen, best := int32(-1), -1
		for _, i := range s.starts[a] {
			if !s.placed[i] && in.end[i] <= b {
				if sc := s.score(i, a, b, y); sc > best {
					chosen, best = i, sc
				}
			}
		}
		if chosen < 0 {
			b = s.valleyEnd(a, b, y)
			up := s.raiseTo(a, b)
			s.raise(a, s.bare(a, b), y, up)
			s.undo = s.undo[:0]
			continue
		}
		// The best-scored candidate after which no valley is dead,
		// among the first few tried.
		tries := 0
	pick:
		for want := best; want >= 0; want-- {
			for _, i := range s.starts[a] {
				if s.placed[i] || in.end[i] > b || s.score(i, a, b, y) != want {
					continue
				}
				if tries++; tries > maxTries {
					break pick
				}
				off, _ := alignUp(y, in.bufs[i].align())
				s.cover(i, off, y)
				ok := s.settled(in.start[i], in.end[i])
				s.back(i)
				if ok {
					chosen = i
					break pick
				}
			}
		}
		off, _ := alignUp(y, in.bufs[chosen].align())
		s.cover(chosen, off, y)
		s.undo, s.gone = s.undo[:0], s.gone[:0]
	}
	return true
}

// aliveScan bounds the sections alive scans each way; wider runs are
// assumed alive (a cut is only ever skipped, never wrongly made).
const aliveScan = 256

// maxTries bounds the candidates a dive covers on trial at one point.
const maxTries = 3

// solve searches for a placement with peak ≤ capacity within limit work.
// found: the offsets are in s.offsets.
func (s *skySearch) solve(capacity uint64, limit int64) (found bool) {
	s.capacity, s.limit, s.aborted = capacity, s.work+limit, false
	if s.in.lb > capacity {
		return false
	}
	s.reset()
	return s.search(0)
}

func (s *skySearch) search(depth int) bool {
	if s.placedN == len(s.in.bufs) {
		return true
	}
	if s.work >= s.limit || s.halt.done() {
		s.aborted = true
		return false
	}
	s.work++
	in := s.in
	a, b, y := s.valley()
	for len(s.cands) <= depth {
		s.cands = append(s.cands, nil)
	}
	cands := s.cands[depth][:0]
	for _, i := range s.starts[a] {
		if !s.placed[i] && in.end[i] <= b {
			cands = append(cands, i)
		}
	}
	slices.SortStableFunc(cands, func(i, j int32) int { return cmp.Compare(s.score(j, a, b, y), s.score(i, a, b, y)) })
	s.cands[depth] = cands
	var lastEnd int32 = -1
	var lastSize uint64
	for _, i := range cands {
		bf := &in.bufs[i]
		if in.end[i] == lastEnd && bf.Size == lastSize {
			continue // an identical buffer was tried here
		}
		lastEnd, lastSize = in.end[i], bf.Size
		if s.work >= s.limit { // a node may try many candidates
			s.aborted = true
			return false
		}
		off, ok := s.fits(i, y)
		if !ok {
			continue
		}
		s.cover(i, off, y)
		if s.settled(in.start[i], in.end[i]) && s.search(depth+1) {
			return true
		}
		s.back(i)
		if s.aborted {
			return false
		}
	}
	// Leave the point empty.
	b = s.valleyEnd(a, b, y)
	up := s.raiseTo(a, b)
	if up == ^uint64(0) {
		return false
	}
	r := s.bare(a, b)
	for p := a; p < r; p++ {
		if up+s.left[p] > s.capacity || up+s.left[p] < up {
			return false
		}
	}
	s.raise(a, r, y, up)
	if s.settled(a, r) && s.search(depth+1) {
		return true
	}
	s.back(-1)
	return false
}

// levelTree keeps the lowest floor among active sections (those with bytes
// still to place), leftmost, under range assignment: a segment tree with
// lazy tags.
type levelTree struct {
	size int32
	mn   []uint64 // min over active leaves; ^0 when none is active
	act  []bool   // some leaf below is active
	tag  []uint64 // pending assignment to the subtree; ^0 when none
}

func (t *levelTree) init(n int32) {
	t.size = 1
	for t.size < n {
		t.size *= 2
	}
	t.mn = make([]uint64, 2*t.size)
	t.act = make([]bool, 2*t.size)
	t.tag = make([]uint64, 2*t.size)
}

// reset makes every section with bytes left active at level 0.
func (t *levelTree) reset(left []uint64) {
	for k := range t.size {
		on := int(k) < len(left) && left[k] > 0
		t.act[t.size+k] = on
		t.mn[t.size+k] = ^uint64(0)
		if on {
			t.mn[t.size+k] = 0
		}
	}
	for k := t.size - 1; k > 0; k-- {
		t.pull(k)
	}
	for k := range t.tag {
		t.tag[k] = ^uint64(0)
	}
}

func (t *levelTree) pull(k int32) {
	t.mn[k] = min(t.mn[2*k], t.mn[2*k+1])
	t.act[k] = t.act[2*k] || t.act[2*k+1]
}

func (t *levelTree) apply(k int32, v uint64) {
	if t.act[k] {
		t.mn[k] = v
	}
	t.tag[k] = v
}

func (t *levelTree) push(k int32) {
	if v := t.tag[k]; v != ^uint64(0) {
		t.apply(2*k, v)
		t.apply(2*k+1, v)
		t.tag[k] = ^uint64(0)
	}
}

// assign sets the level of the active sections in [s, e) to v.
func (t *levelTree) assign(s, e int32, v uint64) { t.assignAt(1, 0, t.size, s, e, v) }

func (t *levelTree) assignAt(k, lo, hi, s, e int32, v uint64) {
	if s <= lo && hi <= e {
		t.apply(k, v)
		return
	}
	t.push(k)
	mid := (lo + hi) / 2
	if s < mid {
		t.assignAt(2*k, lo, mid, s, e, v)
	}
	if e > mid {
		t.assignAt(2*k+1, mid, hi, s, e, v)
	}
	t.pull(k)
}

// deactivate and activate switch section p off (no bytes left) or on; an
// activated section takes the level its tags give, set by the caller's
// assign right after.
func (t *levelTree) deactivate(p int32) { t.point(p, false) }
func (t *levelTree) activate(p int32)   { t.point(p, true) }

func (t *levelTree) point(p int32, on bool) {
	k, lo, hi := int32(1), int32(0), t.size
	for hi-lo > 1 {
		t.push(k)
		mid := (lo + hi) / 2
		if p < mid {
			k, hi = 2*k, mid
		} else {
			k, lo = 2*k+1, mid
		}
	}
	t.act[k] = on
	t.mn[k] = ^uint64(0)
	if on {
		t.mn[k] = 0 // the caller assigns the level
	}
	for k /= 2; k > 0; k /= 2 {
		t.pull(k)
	}
}

// lowest returns the leftmost active section at the lowest level, or -1.
func (t *levelTree) lowest() int32 {
	if !t.act[1] {
		return -1
	}
	k := int32(1)
	for k < t.size {
		t.push(k)
		if t.act[2*k] && t.mn[2*k] == t.mn[k] {
			k = 2 * k
		} else {
			k = 2*k + 1
		}
	}
	return k - t.size
}
