package pack

import (
	"cmp"
	"math/bits"
	"slices"
)

// A hole is a rectangle of bytes that, in a placement at the lower bound,
// no buffer holds: a piece missing from a tiling (see holes).
type hole struct {
	start, end int32 // sections
	size       uint64
}

// holes finds rectangles by which the bytes live fall short of the lower
// bound, as the traces pieces missing from a tiling leave in that
// shortfall:
//
//   - exact: the shortfall steps up by some size entering a section and
//     down by exactly that size leaving a later one, and stays at least
//     that size in between. That is a missing piece when no other
//     missing piece starts or ends where it does.
//   - relay: it steps up by u entering a section, and where a later
//     section starts it steps by what a piece of u ending there and one
//     of d starting there make, then down by exactly d leaving a section
//     after that, staying at least u, then at least d, in between: two
//     missing pieces, one ending where the other starts (they lie on
//     either side of one cut in time).
//   - peel: it steps up by u entering a section and its next step is
//     down by some d < u: missing pieces that start together, of which
//     one of d ends first, and the mirror in time, pieces that end
//     together (see peels).
//
// Each hole found is taken from the shortfall, exact ones first, and the
// rest matched again until nothing is: once a piece is taken, the steps
// of the others at its ends show. It finds none when the exact ones and
// relays explain less than minExplained of the shortfall; peels, which
// would match steps in any shortfall, tiling or not, come after that
// test. Two pieces missing that start together leave the steps a relay
// does, so holes returns two readings: one with relays before peels, the
// other with peels before relays. Held out (the generator's order, fast
// effort), the first alone ended holed 5,000, seeds 0 to 127, a mean
// +2.26 % above the lower bound, and 30 tilings of another generator's
// with a fiftieth to a tenth of any of their pieces missing +5.09 %; the
// second alone +2.08 and +5.71 %; a quarter of the orders each, +2.10 and
// +5.08 %. Matching stops once it has looked at work sections, each
// reading after the test at half of what is left (passing that by the
// sections of the last holes it took at most), and weighing what it found
// looks at each section once more. Reading the shortfall is setup, as
// making the blocker's leaves is: where the bytes live never fall short,
// holes costs nothing.
//
// Where missing pieces overlap in time, other rectangles add up to the
// same shortfall, and the steps cannot tell them apart; the buffers
// around them can (see evidence). So each reading is then cut again
// (recut): two or three holes that overlap in time (two may also meet)
// become as many other rectangles with the same shortfall where more of
// those have a buffer around them that says they are missing pieces,
// within recut units of work, passed by one group's at most (a unit per
// rectangle and section of each way looked at). On holed 5,000 seed 6
// the readings had 171 holes each for 171 missing pieces, 122 and 123 of
// them right; cut again, 133 and 137. Held out, fast effort, holed 5,000
// seeds 0 to 127 went from a mean +1.98 % above the lower bound, 90 at
// it and 23 above +5 %, to +0.61 %, 104 and 4; perfect, sliced, halving
// and pinwheel tilings of 1,000 and 5,000 with a tenth, a twentieth or a
// fiftieth of any of their pieces missing (seeds 0 and 1, 48 instances)
// from +6.78 % and 24 above +5 % to +5.65 % and 19 (lower on 15, higher
// on one by 0.07 points). holes returns the two readings and the work
// spent: the sections looked at and the units cutting again.
//
// The blocker takes them as buffers of their own (see blocks): a tiling
// with pieces missing is one without again, and its cuts are found again
// around the holes. With peels, holed 5,000, seeds 0 to 127, went from a
// mean +4.04 % above the lower bound, 43 above +5 % and 62 at it, to
// +2.10 %, 25 and 88 (the blocks of holes alone no longer packed as well,
// see roots); the other generator's 30 from +6.32 % to +5.08 % (lower on
// 11, higher on 4 by up to 1.92 points). Given the missing pieces
// themselves, the blocker packs holed 5,000 seeds 6, 18, 20, 24 and 26 at
// the bound. On seeds 0, 1, 2, 6, 18 and 20, holes finds 69 to 91 % of
// the missing pieces, and 70 to 91 % of the holes it finds are missing
// pieces.
//
// Before: perfect packings with about one piece in 32 missing
// (family holed, seeds 0 to 7, the generator's order, fast effort) ended a
// mean +5.11 % above the lower bound, their optimum, at 1,000 buffers (up
// to +12.73 %), +14.74 % at 2,000 and +19.45 % at 5,000; with exact holes
// alone all 16 of 1,000 and 2,000 are at it and 5,000 ends a mean +8.99 %
// (one at it); with relays too, six of 5,000 are at it, one +1.65 %, one
// +17.13 %. On those of 5,000 (seeds 0, 1, 2 and 6), exact matching
// finds 61 to 64 % of the missing pieces, and 93 to 98 % of the holes it
// finds are missing pieces; with relays too, 69 to 81 % and 86 to 95 %.
// Matching from one side only (a step up with the first step down at
// least as large) found more, but three in four of those it added were
// not missing pieces.
func holes(in *instance, work, recut int64) ([]hole, []hole, int64) {
	m := int(in.positions)
	short := make([]uint64, m+1) // short[m] is 0: nothing is live after the end
	var all float64
	for t, live := range in.liveBytes {
		short[t] = in.lb - live
		all += float64(short[t])
	}
	if all == 0 {
		return nil, nil, 0
	}
	f := holeFinder{short: short, m: m, work: work}
	for f.exact() && f.relays() {
	}
	// The rest of the shortfall: where it is most of it, this is no
	// tiling with pieces missing.
	var rest float64
	for _, r := range f.short[:m] {
		rest += float64(r)
	}
	f.spent += int64(m)
	if rest > all*(1-minExplained) {
		return nil, nil, f.spent
	}
	// It is one: peels take what the rest leave, after relays in one
	// reading and before them in the other, each with half the work
	// left.
	at := f.spent
	if at >= f.work {
		return f.out, f.out, at + newEvidence(in).recut(f.out, recut)
	}
	g := f
	g.short, g.out = slices.Clone(f.short), slices.Clone(f.out)
	f.work = at + (f.work-at)/2
	g.work = f.work
	for f.exact() && (f.relays() || f.peel()) {
	}
	for g.exact() && (g.peel() || g.relays()) {
	}
	e := newEvidence(in)
	rf := e.recut(f.out, recut/2)
	rg := e.recut(g.out, recut-rf)
	return f.out, g.out, f.spent + g.spent - at + rf + rg
}

// evidence is what the buffers around a hole say of it: a piece missing
// from a tiling is usually the other half of a cut, and a buffer lives
// over the same sections (a cut in bytes) or, of its size, ends where it
// starts or starts where it ends (a cut in time). Where missing pieces
// overlap in time, other rectangles add up to the same shortfall, and
// this is what tells them apart: on holed 5,000 seed 6, 83 % of the
// missing pieces have such a buffer, and 39 % of the holes holes had
// found that were not missing pieces did.
type evidence struct {
	life   map[[2]int32]bool
	ends   map[sectionSize]bool
	starts map[sectionSize]bool
}

type sectionSize struct {
	t    int32
	size uint64
}

func newEvidence(in *instance) *evidence {
	e := &evidence{life: map[[2]int32]bool{}, ends: map[sectionSize]bool{}, starts: map[sectionSize]bool{}}
	for i := range in.bufs {
		e.life[[2]int32{in.start[i], in.end[i]}] = true
		e.ends[sectionSize{in.end[i], in.bufs[i].Size}] = true
		e.starts[sectionSize{in.start[i], in.bufs[i].Size}] = true
	}
	return e
}

// backs reports whether a buffer around h says it is a missing piece.
func (e *evidence) backs(h hole) bool {
	return e.life[[2]int32{h.start, h.end}] || e.ends[sectionSize{h.start, h.size}] || e.starts[sectionSize{h.end, h.size}]
}

// score counts the holes of hs that have evidence.
func (e *evidence) score(hs []hole) int {
	n := 0
	for _, h := range hs {
		if e.backs(h) {
			n++
		}
	}
	return n
}

// recut cuts again the shortfall of two holes of hs that overlap or meet
// in time, or of three that overlap each other, into as many other
// rectangles, where more of those than of the holes have evidence: pairs,
// in passes until one cuts none again (maxRecuts at most), then triples
// the same way. Each pass takes the holes by start as they are when it
// begins; a hole cut again during a pass keeps its place in that order,
// so a later group of the pass may not overlap (better keeps its
// shortfall all the same). It returns the work spent: work, passed by
// one group's ways at most.
func (e *evidence) recut(hs []hole, work int64) int64 {
	var spent int64
	// The holes by start, as indices: the holes keep their order.
	by := make([]int, len(hs))
	for i := range by {
		by[i] = i
	}
	// again says a pass cut a group again; cut weighs the holes ps as a
	// group and writes back what better makes of them.
	var again bool
	cut := func(ps ...*hole) {
		var group [3]hole
		for q, p := range ps {
			group[q] = *p
		}
		w, ok := e.better(group[:len(ps)])
		spent += w
		if ok {
			for q, p := range ps {
				*p = group[q]
			}
			again = true
		}
	}
	for k := 2; k <= 3; k++ {
		again = true
		for pass := 0; again && pass < maxRecuts && spent < work; pass++ {
			again = false
			slices.SortFunc(by, func(a, b int) int {
				x, y := hs[a], hs[b]
				return cmp.Or(cmp.Compare(x.start, y.start), cmp.Compare(x.end, y.end), cmp.Compare(x.size, y.size), cmp.Compare(a, b))
			})
			for i := 0; i < len(by) && spent < work; i++ {
				a := &hs[by[i]]
				for j := i + 1; j < len(by) && hs[by[j]].start <= a.end && spent < work; j++ {
					b := &hs[by[j]]
					if k == 2 {
						cut(a, b)
						continue
					}
					// Three: each overlaps the others in time (as
					// the pass began).
					for l := j + 1; l < len(by) && hs[by[l]].start < min(a.end, b.end) && spent < work; l++ {
						cut(a, b, &hs[by[l]])
					}
				}
			}
		}
	}
	return spent
}

// maxRecuts is the most passes recut makes over the holes.
const maxRecuts = 8

// better replaces the holes of group by as many rectangles with the same
// shortfall, each starting and ending where one of them does, of which
// more have evidence: of the ways whose sizes follow section by section
// (a section one rectangle of unknown size covers gives its size), the
// first with the most. It reports whether it did, and the work spent (a
// unit per rectangle and section of each way looked at).
func (e *evidence) better(group []hole) (int64, bool) {
	k := len(group)
	var pts []int32
	for _, h := range group {
		pts = append(pts, h.start, h.end)
	}
	slices.Sort(pts)
	pts = slices.Compact(pts)
	// The shortfall of each section between two points.
	prof := make([]uint64, len(pts)-1)
	for s := range prof {
		var wrapped bool
		if prof[s], wrapped = liveAt(group, pts[s]); wrapped {
			return 0, false
		}
	}
	best := e.score(group)
	var spans [][2]int
	for a := range pts {
		for b := a + 1; b < len(pts); b++ {
			spans = append(spans, [2]int{a, b})
		}
	}
	var spent int64
	var found []hole
	pick := make([]int, k)
	try := make([]hole, k)
	known := make([]bool, k)
	var walk func(r, from int)
	walk = func(r, from int) {
		if r < k {
			for x := from; x < len(spans); x++ {
				pick[r] = x
				walk(r+1, x)
			}
			return
		}
		spent += int64(k * len(prof))
		// Each rectangle's size: what a section it alone covers (given
		// the sizes found so far) leaves.
		for q := range k {
			try[q] = hole{pts[spans[pick[q]][0]], pts[spans[pick[q]][1]], 0}
			known[q] = false
		}
		for progress := true; progress; {
			progress = false
			for s, v := range prof {
				unknown, at := 0, -1
				var sum, carry uint64
				for q := range k {
					if try[q].start <= pts[s] && pts[s] < try[q].end {
						if known[q] {
							sum, carry = add(sum, try[q].size, carry)
						} else {
							unknown++
							at = q
						}
					}
				}
				if unknown == 1 {
					if carry != 0 || sum >= v {
						return
					}
					try[at].size, known[at] = v-sum, true
					progress = true
				}
			}
		}
		for q := range k {
			if !known[q] {
				return
			}
		}
		for s, v := range prof {
			if sum, wrapped := liveAt(try, pts[s]); wrapped || sum != v {
				return
			}
		}
		if n := e.score(try); n > best {
			best = n
			found = append(found[:0], try...)
		}
	}
	walk(0, 0)
	if found == nil {
		return spent, false
	}
	copy(group, found)
	return spent, true
}

// liveAt returns the sum of the sizes of the holes of hs live at section
// t, and whether it wrapped a uint64.
func liveAt(hs []hole, t int32) (uint64, bool) {
	var sum, carry uint64
	for _, h := range hs {
		if h.start <= t && t < h.end {
			sum, carry = add(sum, h.size, carry)
		}
	}
	return sum, carry != 0
}

// add returns a+b and a carry that stays set once any sum overflowed.
func add(a, b, carry uint64) (uint64, uint64) {
	sum, c := bits.Add64(a, b, 0)
	return sum, carry | c
}

// minExplained is the share of the shortfall (in bytes times sections)
// the holes found must explain, or holes finds none. On perfect packings
// of another generator's with a fiftieth to a tenth of their pieces
// missing (any piece, the first instant's too; perfect, sliced, halving
// and pinwheel tilings of 1,000 and 5,000 buffers, 48 instances), the
// holes found explained 13 to 100 % of it. Taking them made the fast
// effort's packing lower on 24 of the 27 instances where they explained
// 28 % or more and it changed (higher on three: +0.39, +0.39 and
// +1.07 %), and higher on one where they explained 16 % (sliced 5,000, a
// tenth missing: +4.38 to +11.99 %). On the transformer and mixed
// families they explain 1 % or less.
const minExplained = 0.25

// holeFinder matches the steps of a shortfall (see holes).
type holeFinder struct {
	short       []uint64
	m           int
	work, spent int64
	out         []hole
	back        bool // short is reversed in time (see reverse)
}

// up is the step up of the shortfall entering section a (0 if it does
// not rise there).
func (f *holeFinder) up(a int) uint64 {
	var before uint64
	if a > 0 {
		before = f.short[a-1]
	}
	if f.short[a] > before {
		return f.short[a] - before
	}
	return 0
}

// take makes [a, b) × size a hole and takes it from the shortfall.
func (f *holeFinder) take(a, b int, size uint64) {
	h := hole{int32(a), int32(b), size}
	if f.back {
		h.start, h.end = int32(f.m-b), int32(f.m-a)
	}
	f.out = append(f.out, h)
	for t := a; t < b; t++ {
		f.short[t] -= size
	}
	f.spent += int64(b - a)
}

// downTo returns the first section end b after from where the shortfall
// steps down by exactly size, staying at least size before; -1 if none.
func (f *holeFinder) downTo(from int, size uint64) int {
	for b := from + 1; b <= f.m && f.short[b-1] >= size && f.spent < f.work; b++ {
		f.spent++
		if f.short[b-1]-f.short[b] == size {
			return b
		}
	}
	return -1
}

// exact takes exact holes until none is left; it reports whether work is
// left.
func (f *holeFinder) exact() bool {
	for again := true; again && f.spent < f.work; {
		again = false
		for a := 0; a < f.m && f.spent < f.work; a++ {
			if d := f.up(a); d > 0 {
				if b := f.downTo(a, d); b >= 0 {
					f.take(a, b, d)
					again = true
				}
			}
		}
	}
	return f.spent < f.work
}

// relays takes relays, at most one per step up; it reports whether it
// took any.
func (f *holeFinder) relays() bool {
	took := false
	for a := 0; a < f.m && f.spent < f.work; a++ {
		u := f.up(a)
		if u == 0 {
			continue
		}
		for b := a + 1; b < f.m && f.short[b-1] >= u && f.spent < f.work; b++ {
			f.spent++
			// Where one of u ends and one of d starts, the shortfall
			// goes from short[b-1] to short[b-1] - u + d: it must rise,
			// or fall by less than u (a plain fall of u is exact's).
			if f.short[b] == f.short[b-1] || f.short[b] <= f.short[b-1]-u {
				continue
			}
			d := f.short[b] - (f.short[b-1] - u)
			if c := f.downTo(b, d); c >= 0 {
				f.take(a, b, u)
				f.take(b, c, d)
				took = true
				break
			}
		}
	}
	return took
}

// peels takes peels: where the shortfall steps up by u entering section
// a and its next step, leaving section b-1, is down by some d < u, the
// hole [a, b) × d (missing pieces that start together, the shortest of
// them ending first). With back, it looks in reversed time: where the
// step before a step down by d leaving section b-1 is up by u < d,
// entering a, the hole [a, b) × u (missing pieces that end together). It
// reports whether it took any.
func (f *holeFinder) peels(back bool) bool {
	if back {
		f.reverse()
		defer f.reverse()
	}
	took := false
	for a := 0; a < f.m && f.spent < f.work; a++ {
		u := f.up(a)
		if u == 0 {
			continue
		}
		b := a + 1
		for ; b < f.m && f.short[b] == f.short[b-1] && f.spent < f.work; b++ {
			f.spent++
		}
		if f.spent >= f.work {
			break
		}
		if f.short[b] < f.short[b-1] && f.short[b-1]-f.short[b] < u {
			f.take(a, b, f.short[b-1]-f.short[b])
			took = true
		}
	}
	return took
}

// peel takes peels forward, or, where it took none, back; it reports
// whether it took any.
func (f *holeFinder) peel() bool {
	return f.peels(false) || f.peels(true)
}

// reverse reverses the shortfall in time (short[m] stays 0): take records
// the holes it takes meanwhile in forward time.
func (f *holeFinder) reverse() {
	slices.Reverse(f.short[:f.m])
	f.back = !f.back
}
