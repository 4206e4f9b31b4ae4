package pack

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// A block is a rectangle of buffers whose offsets relative to the block
// are fixed: a buffer (a leaf), a stack of blocks live over the same
// sections, one on top of the other, a chain of blocks of the same
// size, one after the other in time, at the same offset, or a pinwheel
// of five blocks (see wheel).
type block struct {
	start, end int32 // sections
	size       uint64
	align      uint64
	buf        int32   // the buffer of a leaf, -1 otherwise
	parts      []int32 // the blocks of a stack, chain or pinwheel
	rel        []uint64
	stacked    bool // a stack
	wheel      bool // a pinwheel
	guessed    bool // a chain chosen among several candidates of its size
	empty      bool // holds no buffer: holes only (see hole)
}

// blocker merges buffers into blocks bottom up, as the cuts of a
// guillotine tiling are found again: blocks live over exactly the same
// sections stack (their order inside the stack changes nothing outside
// it), and a block whose end meets the start of a block of the same size
// chains with it (they can share their bytes, as a buffer freed and one
// of the same size allocated at that instant do). A chain is made when
// the pair is the only candidate on both sides, or, however many
// candidates there are, when the chain would live over the same sections
// as a block (see stackable); any other chain among several only when
// no other merge is left. Five blocks that tile a box as a pinwheel, which
// no cut in time or in bytes splits, merge too (see wheel).
//
// Stacks are sure merges on a tiling, but not on every instance: blocks
// of different parts may live over the same sections by coincidence, and
// a stack of them can take a block from the chain it belongs to; blocks
// of the same size may meet in time by coincidence and chain. Which
// merges go astray depends on the order the blocks are met in, so blocks
// runs the blocker in several.
type blocker struct {
	blocks []block
	dead   []bool // merged into another block, by block
	// Live blocks by the section they start at and the one they end at;
	// dead entries are dropped as lists are read.
	starting, ending [][]entry
	alive, work      int64
	// Scratch for find's answers: the blocks to stack, the neighbours of
	// a merge (and the blocks trim weighs them against), match's answers,
	// the candidates chains looks through, the blocks wheel looks
	// through around a middle block: ending where it ends and starting
	// where it starts, starting where it ends and ending where it
	// starts, and its candidates for D.
	same, near, hits, cands []int32
	endEnd, startStart      []int32
	startEnd, endStart      []int32
	wheelD                  []int32
	// The sections where blocks were made since wheels last looked
	// (fresh says which are listed in freshAt).
	fresh   []bool
	freshAt []int32
	// noWheels: look for no pinwheels; wheelsFirst: look for the one
	// around a block before stacking it, however many blocks live over
	// its sections (else only when none does); pinwheels counts those
	// made.
	noWheels, wheelsFirst bool
	pinwheels             int
	// wary: stack three blocks or more only where trim finds among them
	// a sum that a neighbour's size confirms; refused holds, by the
	// sections they live over, the blocks and their neighbours when trim
	// last refused them, so that they are weighed again only once those
	// have changed. stacks counts the stacks made, unconfirmed those of
	// three blocks or more that trim let through unconfirmed (not wary).
	wary                bool
	refused             map[[2]int32]refusal
	stacks, unconfirmed int
	// marks holds, per section, the stamp of the last mark that marked
	// it.
	marks []int32
	stamp int32
	// bufs is the number of buffers: the leaves after them are the
	// nHoles holes the blocker was given (see hole).
	bufs   int32
	nHoles int
}

// entry is a block in a section's list, with what find compares, so that
// reading a list does not visit the blocks.
type entry struct {
	id    int32
	other int32 // the block's end in starting, its start in ending
	size  uint64
}

func newBlocker(in *instance, holes []hole) *blocker {
	k := &blocker{blocks: make([]block, 0, 2*len(in.bufs)), dead: make([]bool, 0, 2*len(in.bufs)), bufs: int32(len(in.bufs))}
	// Each list is cut from one array, with room for as many blocks
	// again as it starts with (merged blocks join the lists of their
	// parts' sections); a list that outgrows its room moves out.
	k.starting = lists(in.positions+1, in.start)
	k.ending = lists(in.positions+1, in.end)
	k.fresh = make([]bool, in.positions+1)
	for i := range in.bufs {
		k.add(block{start: in.start[i], end: in.end[i], size: in.bufs[i].Size, align: in.bufs[i].align(), buf: int32(i)})
	}
	for j, h := range holes {
		k.add(block{start: h.start, end: h.end, size: h.size, align: 1, buf: k.bufs + int32(j)})
	}
	k.nHoles = len(holes)
	return k
}

// lists returns n empty lists, the list of section t with room for
// twice the number of times t occurs in at.
func lists(n int32, at []int32) [][]entry {
	room := make([]int32, n)
	for _, t := range at {
		room[t] += 2
	}
	slab := make([]entry, 2*len(at))
	out := make([][]entry, n)
	var from int32
	for t, r := range room {
		out[t] = slab[from : from : from+r]
		from += r
	}
	return out
}

// add makes b a live block and indexes it.
func (k *blocker) add(b block) int32 {
	b.empty = b.buf >= k.bufs
	if b.buf < 0 {
		b.empty = true
		for _, p := range b.parts {
			b.empty = b.empty && k.blocks[p].empty
		}
	}
	id := int32(len(k.blocks))
	k.blocks = append(k.blocks, b)
	k.dead = append(k.dead, false)
	k.starting[b.start] = append(k.starting[b.start], entry{id, b.end, b.size})
	k.ending[b.end] = append(k.ending[b.end], entry{id, b.start, b.size})
	k.alive++
	for _, t := range [2]int32{b.start, b.end} {
		if !k.fresh[t] {
			k.fresh[t] = true
			k.freshAt = append(k.freshAt, t)
		}
	}
	return id
}

// The lists find reads: blocks starting or ending at a section.
const (
	starts = iota
	ends
)

// lists returns the lists of blocks by the section they start at (side
// starts) or end at.
func (k *blocker) lists(side int) [][]entry {
	if side == ends {
		return k.ending
	}
	return k.starting
}

// find appends to dst the live blocks that start (side starts) or end at
// section t, other than not, with the given end (or start) when other ≥ 0
// and the given size when size > 0; it drops the dead ones from the list
// and counts every entry it reads as work.
func (k *blocker) find(dst []int32, side int, t, other int32, size uint64, not int32) []int32 {
	lists := k.lists(side)
	l := lists[t]
	kept := l[:0]
	for _, e := range l {
		if k.dead[e.id] {
			continue
		}
		kept = append(kept, e)
		if e.id != not && (other < 0 || e.other == other) && (size == 0 || e.size == size) {
			dst = append(dst, e.id)
		}
	}
	k.work += int64(len(l))
	lists[t] = kept
	return dst
}

// match is find's first block (-1 if none) and how many it found.
func (k *blocker) match(side int, t, other int32, size uint64, not int32) (first int32, n int) {
	k.hits = k.find(k.hits[:0], side, t, other, size, not)
	if len(k.hits) == 0 {
		return -1, 0
	}
	return k.hits[0], len(k.hits)
}

// stack makes a block of ids, which live over the same sections: the
// larger alignments first, each part at the next offset its alignment
// allows; parts that are stacks are spliced in. It returns -1, merging
// nothing, if the offsets would overflow.
func (k *blocker) stack(ids []int32) int32 {
	slices.SortFunc(ids, func(a, b int32) int {
		x, y := &k.blocks[a], &k.blocks[b]
		return cmp.Or(cmp.Compare(y.align, x.align), cmp.Compare(a, b)) // larger alignment first
	})
	nb := block{start: k.blocks[ids[0]].start, end: k.blocks[ids[0]].end, buf: -1, stacked: true}
	for _, id := range ids {
		if x := &k.blocks[id]; x.stacked {
			nb.parts = append(nb.parts, x.parts...)
		} else {
			nb.parts = append(nb.parts, id)
		}
	}
	var off uint64
	for _, id := range nb.parts {
		x := &k.blocks[id]
		at, ok := alignUp(off, x.align)
		end, carry := bits.Add64(at, x.size, 0)
		if !ok || carry != 0 {
			return -1
		}
		nb.rel = append(nb.rel, at)
		off = end
		nb.align = max(nb.align, x.align)
	}
	nb.size = off
	k.stacks++
	// The parts of a stack spliced in died when it was made.
	for _, id := range ids {
		k.dead[id] = true
	}
	k.alive -= int64(len(ids))
	return k.add(nb)
}

// chain makes a block of a and, after it in time, b, of the same size;
// guessed says the pair was chosen among several candidates.
func (k *blocker) chain(a, b int32, guessed bool) int32 {
	x, y := &k.blocks[a], &k.blocks[b]
	nb := block{start: x.start, end: y.end, size: x.size, align: max(x.align, y.align), buf: -1,
		parts: []int32{a, b}, rel: []uint64{0, 0}, guessed: guessed}
	k.dead[a], k.dead[b] = true, true
	k.alive -= 2
	return k.add(nb)
}

// How sure a chain must be. confirmed: the pair are the only candidates
// of their size where they meet, and the chain would live over the same
// sections as a block (so it can stack at once: on five perfect
// packings of 5,000 buffers, 2 of 5,200 such chains were not rectangles
// of the tiling, against 39 of 7,000 other chains), or no other block
// ends or starts where they meet. onlySize: the only candidates of their
// size. anySize: any candidates.
type chainTier uint8

const (
	confirmed chainTier = iota
	onlySize
	anySize
)

// step merges block id, if it can: it chains it as sure as tier asks,
// or else makes the pinwheel it is the middle of (see wheel; unless
// wheelsFirst, only when no other block lives over its sections), or
// else stacks it with the blocks live over the same sections (a guess,
// tier anySize, stacks first); it returns the new block or -1.
//
// A sure chain goes first: where sizes seldom repeat, the only two blocks
// of a size that meet at a section are far more often parts of one
// rectangle than blocks live over the same sections are, which parts cut
// in time at the same instants on both sides of a cut in bytes also
// are. Perfect packings, fast effort: of 10,000 buffers (seeds 100 to
// 115) 12 of 16 ended at the lower bound with stacks first, all 16 with
// chains first; of 20,000 (seeds 0 to 7) 2 of 8 and a mean +5.17 %
// above it, against 6 and +0.49 %. Where sizes repeat (halving, 5,000
// buffers, seeds 0 to 5) the mean went from +7.7 to +10.0 %.
func (k *blocker) step(id int32, tier chainTier) int32 {
	if k.dead[id] {
		return -1
	}
	if tier != anySize {
		if nb := k.chains(id, tier); nb >= 0 {
			return nb
		}
	}
	b := &k.blocks[id]
	k.same = k.find(k.same[:0], starts, b.start, b.end, 0, -1)
	if (k.wheelsFirst || len(k.same) < 2) && !k.noWheels {
		if nb := k.wheel(id); nb >= 0 {
			return nb
		}
	}
	if len(k.same) >= 2 {
		k.same = k.trim(k.same, b.start, b.end)
	}
	if len(k.same) >= 2 {
		if nb := k.stack(k.same); nb >= 0 {
			return nb
		}
	}
	if tier == anySize {
		return k.chains(id, tier)
	}
	return -1
}

// trim returns same, two or more blocks live over [start, end), or the
// part of them to stack: all of them when they sum to the size of a block
// that ends at start or starts at end; else, of three to maxSubset
// blocks, the fewest (two or more) that sum to such a size; else, of
// more, all but one block when those do (so a pair is not stacked when
// one of them alone meets a block of its size there and both do not). A
// rectangle that pieces cut in bytes rebuild usually meets one of its
// own size in time, and blocks of other parts that live over the same
// sections by chance spoil that sum: on sliced tilings (5,000 buffers,
// the generator's offsets as an oracle) a fifth to a third of the stacks
// of four or more blocks were not rectangles of the tiling, most of them
// stacks of slivers one section wide from several columns of pieces.
//
// Leaving out one block only: held out, fast effort, the generator's
// order, perfect packings of 20,000 buffers, seeds 0 to 7, went from six
// at the lower bound and up to +7.59 % to all eight; sliced ones of
// 5,000, seeds 0 to 7, from a mean +4.96 % and up to +12.84 % to +1.87 %
// and +5.64 %. Trimming two blocks as well was far worse (sliced 2,000:
// up to +29.44 %). The fewest that sum: sliced 5,000, seeds 0 to 31, from
// a mean +3.55 %, 24 within +5 % and up to +15.66 %, to +2.82 %, 25 and
// +13.57 %; 56 other tilings (perfect and halving 5,000 and 20,000,
// sliced 2,000 and 10,000) from 42 at the bound and a mean +0.74 % to 46
// and +0.46 %, one ending higher (sliced 10,000 seed 1, +0.85 to
// +2.33 %). The most that sum instead: +3.00 % and 43 at the bound, with
// halving 5,000 seed 1 of the suite off the bound; subsets of up to 16
// blocks cost the blocker so much work that on sliced 5,000 seed 26 it
// spent every order's share before packing its blocks (+28.26 %).
func (k *blocker) trim(same []int32, start, end int32) []int32 {
	k.near = k.find(k.near[:0], ends, start, -1, 0, -1)
	k.near = k.find(k.near, starts, end, -1, 0, -1)
	if k.wary {
		// A refused stack stays refused while the blocks and their
		// neighbours are the same (lists keep their order).
		k.work += int64(len(same) + len(k.near))
		if r, ok := k.refused[[2]int32{start, end}]; ok && slices.Equal(r.same, same) && slices.Equal(r.near, k.near) {
			return same[:0]
		}
	}
	var total uint64
	for _, x := range same {
		total += k.blocks[x].size
	}
	has := func(size uint64) bool {
		for _, y := range k.near {
			if k.blocks[y].size == size {
				return true
			}
		}
		return false
	}
	k.work += int64(len(same) * len(k.near))
	if has(total) {
		return same
	}
	if m := len(same); m >= 3 && m <= maxSubset {
		// The fewest blocks, two or more, whose sum a near block has;
		// among as many, the first in Gosper's order of the masks.
		full := 1<<m - 1
		for c := 2; c < m; c++ {
			for mask := 1<<c - 1; mask < full; {
				var sum uint64
				for rest := mask; rest != 0; rest &= rest - 1 {
					sum += k.blocks[same[bits.TrailingZeros(uint(rest))]].size
				}
				k.work += int64(c + len(k.near))
				if has(sum) {
					var part []int32
					for j, x := range same {
						if mask&(1<<j) != 0 {
							part = append(part, x)
						}
					}
					return part
				}
				low := mask & -mask // the next mask of c bits
				next := mask + low
				mask = next | (mask^next)>>2/low
			}
		}
		return k.unconfirmedStack(same, start, end)
	}
	for j, x := range same {
		if has(total - k.blocks[x].size) {
			return append(same[:j:j], same[j+1:]...)
		}
	}
	if len(same) >= 3 {
		return k.unconfirmedStack(same, start, end)
	}
	return same
}

// unconfirmedStack returns what trim stacks of same, three blocks or more
// over [start, end) that no neighbour's size confirms: nothing when k is
// wary, else all of them.
func (k *blocker) unconfirmedStack(same []int32, start, end int32) []int32 {
	if k.wary {
		return k.refuse(same, start, end)
	}
	k.unconfirmed++
	return same
}

// refusal is a stack trim refused (see blocker.wary): the blocks and
// their neighbours, as find listed them.
type refusal struct{ same, near []int32 }

// refuse records that trim refused to stack same, which live over
// [start, end), given the neighbours in k.near, and returns nothing to
// stack.
func (k *blocker) refuse(same []int32, start, end int32) []int32 {
	if k.refused == nil {
		k.refused = make(map[[2]int32]refusal)
	}
	k.refused[[2]int32{start, end}] = refusal{slices.Clone(same), slices.Clone(k.near)}
	return same[:0]
}

// maxSubset is the most blocks trim looks for a subset of (2^maxSubset
// masks at most); above, it only leaves out one block.
const maxSubset = 8

// wheel merges block id, if it is the middle of a pinwheel, with the
// four blocks around it, and returns the new block or -1. A pinwheel is
// the tiling of a box [t0, t1) that no cut in time or in bytes splits,
// so neither stacks nor chains rebuild it: the middle block E lives over
// [s, e); A under it lives from t0 to e, and D beside E from t0 to s on
// top of A; B lives from e to t1, and C from s to t1 on top of E and B.
// Their sizes say how they fit: B's is A's and E's, D's is E's and C's,
// and the box is A and D tall. Relative offsets A 0, E and D A's size,
// B 0, C B's size tile the box, and so they do for the mirror in time
// (A from s to t1, D from e to t1, B from t0 to s, C from t0 to e, the
// same sizes) and in bytes (the same sections and sizes).
//
// Before the blocker made pinwheels it could merge none of their pieces.
// Perfect packings cut into pinwheels as well as in time and bytes
// (family pinwheel, seeds 0 to 7, the generator's order, fast effort)
// ended a mean +25.76 % above the lower bound at 1,000 buffers and
// +31.47 % at 5,000, none within +5 %; now all 16 are at it. So are the
// 12 instances of another generator (one hand only, 1,000 and 5,000
// buffers), which ended +26.51 to +35.96 % above it. At 10,000 buffers
// the mean went from +28.16 to +5.07 % (4 of 8 at the bound), at 20,000
// from +28.00 to +20.63 % (none), where pieces of one size that meet by
// chance are chained astray.
//
// Pieces of a pinwheel meet only at E's two sections, so wheel reads
// only the four lists there. It gives up where the candidates for A and
// B make more than maxWheelPairs pairs (columns of slivers on sliced
// tilings, where a pinwheel is a coincidence anyway).
func (k *blocker) wheel(id int32) int32 {
	e := k.blocks[id]
	// Either hand has a block larger than E ending where E starts (D,
	// or B in the mirror) and one starting where E ends (B, or D).
	larger := func(l []int32) bool {
		for _, x := range l {
			if k.blocks[x].size > e.size {
				return true
			}
		}
		return false
	}
	if k.endStart = k.find(k.endStart[:0], ends, e.start, -1, 0, id); !larger(k.endStart) {
		return -1
	}
	if k.startEnd = k.find(k.startEnd[:0], starts, e.end, -1, 0, id); !larger(k.startEnd) {
		return -1
	}
	k.endEnd = k.find(k.endEnd[:0], ends, e.end, -1, 0, id)
	k.startStart = k.find(k.startStart[:0], starts, e.start, -1, 0, id)
	for _, right := range [2]bool{true, false} {
		// right: A ends with E and B starts where E ends; else the
		// mirror in time.
		as, bs, cs, ds := k.endEnd, k.startEnd, k.startStart, k.endStart
		if !right {
			as, bs, cs, ds = k.startStart, k.endStart, k.endEnd, k.startEnd
		}
		if len(as)*len(bs) > maxWheelPairs {
			continue
		}
		k.work += int64(len(as) * len(bs))
		for _, a := range as {
			// A reaches past E's other end, and D ends (or starts)
			// where A does on that side.
			A := &k.blocks[a]
			farA := A.start
			if !right {
				farA = A.end
			}
			if right && A.start >= e.start || !right && A.end <= e.end {
				continue
			}
			dReady := false // k.wheelD holds A's candidates for D
			for _, b := range bs {
				B := &k.blocks[b]
				if sum, carry := bits.Add64(A.size, e.size, 0); carry != 0 || B.size != sum {
					continue
				}
				// C ends (or starts) where B does, away from E; D, by
				// size, among those that end (or start) where A does.
				farB := B.end
				if !right {
					farB = B.start
				}
				k.work += int64(len(cs) + len(ds))
				if !dReady {
					dReady = true
					k.wheelD = k.wheelD[:0]
					for _, d := range ds {
						if D := &k.blocks[d]; right && D.start == farA || !right && D.end == farA {
							k.wheelD = append(k.wheelD, d)
						}
					}
					slices.SortFunc(k.wheelD, func(x, y int32) int {
						return cmp.Or(cmp.Compare(k.blocks[x].size, k.blocks[y].size), cmp.Compare(x, y))
					})
				}
				if len(k.wheelD) == 0 {
					continue
				}
				for _, c := range cs {
					C := &k.blocks[c]
					if right && C.end != farB || !right && C.start != farB {
						continue
					}
					sum, carry := bits.Add64(e.size, C.size, 0)
					if carry != 0 {
						continue
					}
					j, _ := slices.BinarySearchFunc(k.wheelD, sum, func(x int32, size uint64) int { return cmp.Compare(k.blocks[x].size, size) })
					for ; j < len(k.wheelD) && k.blocks[k.wheelD[j]].size == sum; j++ {
						if nb := k.pinwheel(a, id, k.wheelD[j], b, c); nb >= 0 {
							return nb
						}
					}
				}
			}
		}
	}
	return -1
}

// maxWheelPairs bounds the candidates for A and B that wheel pairs.
const maxWheelPairs = 64

// pinwheel makes a block of a pinwheel's blocks, named as in wheel; it
// returns -1, merging nothing, if an alignment or the size forbids it.
func (k *blocker) pinwheel(a, e, d, b, c int32) int32 {
	A, B, D := &k.blocks[a], &k.blocks[b], &k.blocks[d]
	parts := []int32{a, e, d, b, c}
	rel := []uint64{0, A.size, A.size, 0, B.size}
	nb := block{start: min(A.start, B.start), end: max(A.end, B.end), buf: -1, parts: parts, rel: rel, wheel: true}
	for j, x := range parts {
		al := k.blocks[x].align
		if rel[j]%al != 0 {
			return -1
		}
		nb.align = max(nb.align, al)
	}
	size, carry := bits.Add64(A.size, D.size, 0)
	if carry != 0 {
		return -1
	}
	nb.size = size
	for _, x := range parts {
		k.dead[x] = true
	}
	k.alive -= int64(len(parts))
	k.pinwheels++
	return k.add(nb)
}

// wheels makes the pinwheels around the blocks that start or end at a
// section where a block was made since it last looked, passing each new
// block to merged, while more, and reports whether it made any (a block
// that starts and ends at such sections is looked at twice). The blocker
// calls it before each guess: step looks for the pinwheel around a block
// only as it meets it, and the merge that completes one meets the middle
// block again only when it starts where that middle ends or ends where
// it starts.
func (k *blocker) wheels(merged func(int32) bool, more func() bool) bool {
	at := k.freshAt
	k.freshAt = nil
	made := false
	var mid []int32
	for i, t := range at {
		if !more() { // the sections left stay fresh
			k.freshAt = append(k.freshAt, at[i:]...)
			break
		}
		k.fresh[t] = false
		mid = k.find(mid[:0], starts, t, -1, 0, -1)
		mid = k.find(mid, ends, t, -1, 0, -1)
		for _, x := range mid {
			if !k.dead[x] && merged(k.wheel(x)) {
				made = true
			}
		}
	}
	return made
}

// chains chains block id with a block of its size that starts where it
// ends, or ends where it starts: one whose chain can stack at once,
// however many candidates there are, or else one as sure as tier asks.
func (k *blocker) chains(id int32, tier chainTier) int32 {
	b := k.blocks[id]
	// sure reports whether a pair meeting at section t is sure enough to
	// chain, given the first block of their size that starts there
	// (after) and the first that ends there (before), and how many do.
	sure := func(t, after, before int32, nAfter, nBefore int) bool {
		switch tier {
		case confirmed:
			if nAfter != 1 || nBefore != 1 {
				return false
			}
			if _, n := k.match(starts, k.blocks[before].start, k.blocks[after].end, 0, -1); n > 0 {
				return true
			}
			_, nStart := k.match(starts, t, -1, 0, -1)
			if nStart != 1 {
				return false
			}
			_, nEnd := k.match(ends, t, -1, 0, -1)
			return nEnd == 1
		case onlySize:
			return nAfter == 1 && nBefore == 1
		}
		return true
	}
	k.cands = k.find(k.cands[:0], starts, b.end, -1, b.size, id)
	if n := len(k.cands); n > 0 {
		if r := k.stackable(id, starts, k.cands); r >= 0 {
			return k.chain(id, r, false)
		}
		right := k.cands[0]
		if before, nBefore := k.match(ends, b.end, -1, b.size, -1); sure(b.end, right, before, n, nBefore) {
			return k.chain(id, right, tier == anySize)
		}
	}
	k.cands = k.find(k.cands[:0], ends, b.start, -1, b.size, id)
	if n := len(k.cands); n > 0 {
		if l := k.stackable(id, ends, k.cands); l >= 0 {
			return k.chain(l, id, false)
		}
		left := k.cands[0]
		if after, nAfter := k.match(starts, b.start, -1, b.size, -1); sure(b.start, after, left, nAfter, n) {
			return k.chain(left, id, tier == anySize)
		}
	}
	return -1
}

// stackable returns the first of cands, blocks of block id's size that
// start where it ends (side starts) or end where it starts, whose chain
// with id would live over the same sections as a block, so that it can
// stack at once; -1 if none does (the tiers then judge the first of them).
// Where sizes repeat, pieces of one size meet at one instant in unrelated
// parts of a tiling (two cuts at the same tick), and which pairs belong
// together shows only in the block each pair's rectangle sits beside.
// Halving tilings of 5,000 buffers, seeds 0 and 1, orders 0 to 3: the
// blocker used to guess 57 to 73 times an order, 22 to 27 of them wrongly
// (the generator's offsets as an oracle), and leave 175 to 220 blocks; now
// (stacks trimmed too, see trim) it guesses 3 to 15 times, at most once
// wrongly, and leaves 20 to 81.
func (k *blocker) stackable(id int32, side int, cands []int32) int32 {
	// A candidate starting where id ends makes a chain over [id's start,
	// its end): the ends of the blocks starting with id are marked. One
	// ending where id starts makes [its start, id's end): the starts of
	// the blocks ending with id.
	b := &k.blocks[id]
	t := b.start
	if side == ends {
		t = b.end
	}
	k.mark(side, t)
	for _, c := range cands {
		far := k.blocks[c].end
		if side == ends {
			far = k.blocks[c].start
		}
		if k.marks[far] == k.stamp {
			return c
		}
	}
	return -1
}

// mark marks, with a new stamp, the other end of every live block that
// starts (side starts) or ends at section t: the section it ends or
// starts at. It counts every entry it reads as work.
func (k *blocker) mark(side int, t int32) {
	lists := k.lists(side)
	if k.marks == nil {
		k.marks = make([]int32, len(lists))
	}
	k.stamp++
	for _, e := range lists[t] {
		if !k.dead[e.id] {
			k.marks[e.other] = k.stamp
		}
	}
	k.work += int64(len(lists[t]))
}

// run merges until no merge is left or work passes limit, meeting the
// buffers in their own order when order is 0, else in a shuffle drawn
// from order. It makes stacks and sure chains (of the only candidates of
// their size where they meet) as it meets them, then, one at a time, a
// chain among several candidates and the merges that allows. With
// confirm, it first chains only pairs whose chain is confirmed (see
// chainTier) and makes the other sure chains one at a time, once no
// other merge is left: a pair of the same size can meet by chance before
// the pieces of the right partners are merged, and such a chain hides
// the tiling; but stacks made meanwhile can take a block from the chain
// it belongs to, so blocks runs both kinds. Unless noWheels, pinwheels
// are made as step meets their middle blocks, and, before each guess,
// around the sections where blocks were made since (see wheels).
func (k *blocker) run(limit int64, order int, confirm bool, h *halt) {
	more := func() bool { return k.work < limit && !h.done() }
	queue := make([]int32, 0, len(k.blocks))
	for i := range k.blocks {
		queue = append(queue, int32(i))
	}
	if order > 0 {
		rng := rand.New(rand.NewPCG(uint64(order), uint64(len(queue))))
		rng.Shuffle(len(queue), func(x, y int) { queue[x], queue[y] = queue[y], queue[x] })
	}
	first := onlySize
	if confirm {
		first = confirmed
	}
	// Blocks met in the queue that no merge took, for the sure chains.
	var later []int32
	cursor := 0 // where the next guess is looked for
	merged := func(nb int32) bool {
		if nb < 0 {
			return false
		}
		queue = append(queue, nb)
		queue = append(queue, k.neighbours(nb)...)
		return true
	}
	for k.alive > 1 && more() {
		for len(queue) > 0 && more() {
			id := queue[0]
			queue = queue[1:]
			if !merged(k.step(id, first)) && confirm {
				later = append(later, id)
			}
		}
		if len(later) > 0 {
			for len(later) > 0 && len(queue) == 0 && more() {
				id := later[0]
				later = later[1:]
				if !k.dead[id] {
					merged(k.chains(id, onlySize))
				}
			}
			continue
		}
		// Pinwheels are sure merges: the ones the queue missed are made
		// before a guess.
		if !k.noWheels && k.wheels(merged, more) {
			continue
		}
		// A guess: the next block, from where the last guess was made,
		// that merges at all. Only the blocks it may have made mergeable
		// are met again: those starting or ending where the merge
		// changed a list.
		nb := int32(-1)
		for tried := 0; nb < 0 && tried < len(k.blocks) && more(); tried++ {
			if cursor >= len(k.blocks) {
				cursor = 0
			}
			nb = k.step(int32(cursor), anySize)
			cursor++
			k.work++
		}
		if nb < 0 {
			return
		}
		queue = append(queue, nb)
		queue = append(queue, k.touched(nb)...)
	}
}

// touched returns the live blocks, other than nb, that start or end at a
// section whose lists the merge into nb changed: its start, its end and,
// for a chain, where its parts meet, for a pinwheel, where its middle
// starts and ends.
func (k *blocker) touched(nb int32) []int32 {
	b := &k.blocks[nb]
	at := [4]int32{b.start, b.end}
	n := 2
	switch {
	case b.wheel:
		mid := &k.blocks[b.parts[1]]
		at[2], at[3] = mid.start, mid.end
		n = 4
	case b.buf < 0 && !b.stacked: // a chain
		at[n] = k.blocks[b.parts[1]].start
		n++
	}
	k.near = k.near[:0]
	for _, t := range at[:n] {
		k.near = k.find(k.near, starts, t, -1, 0, nb)
		k.near = k.find(k.near, ends, t, -1, 0, nb)
	}
	return k.near
}

// neighbours returns the live blocks that a merge into nb may have made
// mergeable: those ending where it starts, starting where it ends, and
// live over its sections.
func (k *blocker) neighbours(nb int32) []int32 {
	b := &k.blocks[nb]
	k.near = k.find(k.near[:0], ends, b.start, -1, 0, nb)
	k.near = k.find(k.near, starts, b.end, -1, 0, nb)
	return k.find(k.near, starts, b.start, b.end, 0, nb)
}

// drop frees the lookups, once no merge is left to make.
func (k *blocker) drop() {
	k.starting, k.ending = nil, nil
}

// roots returns the blocks left that hold a buffer. A hole that no
// merge took, or a block of holes alone, says nothing about where the
// buffers go, and packed as a buffer of its own it would only take
// bytes from them (holed tilings of 5,000 buffers, seeds 0 to 63, the
// generator's order, fast effort: a mean +4.07 % above the lower bound,
// 32 at it, with them packed; +3.14 % and 40 without). They do not
// count either where blocks weighs a trial by its blocks (too few
// merges to pack; fewer blocks first among equal peaks).
func (k *blocker) roots() []int32 {
	var r []int32
	for i := range k.blocks {
		if !k.dead[i] && !k.blocks[i].empty {
			r = append(r, int32(i))
		}
	}
	return r
}

// expand writes the offsets of block id's buffers, the block at off
// (holes have none).
func (k *blocker) expand(id int32, off uint64, offsets []uint64) {
	b := &k.blocks[id]
	switch {
	case b.empty:
	case b.buf >= 0:
		offsets[b.buf] = off
	default:
		for j, p := range b.parts {
			k.expand(p, off+b.rel[j], offsets)
		}
	}
}

// top returns the highest end of a buffer of block id, the block at off:
// below the block's own top where a hole is at its top.
func (k *blocker) top(id int32, off uint64) uint64 {
	b := &k.blocks[id]
	switch {
	case b.empty:
		return 0
	case b.buf >= 0:
		return off + b.size
	}
	var t uint64
	for j, p := range b.parts {
		t = max(t, k.top(p, off+b.rel[j]))
	}
	return t
}

// blocks merges in an order per orderCost units of its work per buffer,
// at least minOrders and at most maxOrders: about 30 at the fast effort
// on 5,000 buffers, 16 on 10,000, 7 on 20,000, the most at the exact
// effort (fewer where the first order's blocker spends more, see
// blocks). With twelve at least, 20,000 buffers (perfect packings, seeds
// 0 to 7, fast) ended a mean +16.4 % above the lower bound, up to
// +23.1 %; with seven orders, each packed with more work, +13.4 %, up to
// +19.5 % (seeds 3 to 7 alone, held out: +14.7 and +14.4 %).
const (
	minOrders, maxOrders = 4, 64
	waryOrders           = 6
	orderCost            = 640 // per buffer
)

// blockRounds bounds the rounds of taking blocks apart.
const blockRounds = 8

// holeCost bounds the sections holes looks at while matching, per
// section (and an eighth of blocks' work bounds them too): the first
// pass and, with what it leaves, both readings. Holed tilings of 5,000
// buffers (seeds 0 to 127) take 7 to 103 per section when nothing stops
// them; at 16, matching stopped before the end on most of them, and at
// 128 it still does on a few (seed 36). Cutting the holes again may
// spend as much again.
const holeCost = 128

// A junction is where the two parts of a chain meet: the section the
// second starts at, and their size.
type junction struct {
	at   int32
	size uint64
}

// junctionOf is the junction of chain id (of a block that is not a
// chain, a junction no chain has).
func (k *blocker) junctionOf(id int32) junction {
	x := &k.blocks[id]
	if x.buf >= 0 || x.stacked || x.wheel {
		return junction{at: -1}
	}
	return junction{k.blocks[x.parts[1]].start, x.size}
}

// guesses returns the junctions of the guessed chains k made.
func (k *blocker) guesses() map[junction]bool {
	g := map[junction]bool{}
	for i := range k.blocks {
		if k.blocks[i].guessed {
			g[k.junctionOf(int32(i))] = true
		}
	}
	return g
}

// A trial is one run of the blocker and the peak a first packing of its
// blocks reached (the highest end of a buffer: a hole on top does not
// count).
type trial struct {
	k     *blocker
	roots []int32
	peak  uint64
}

// blocks places the buffers as blocks, within work. It runs the blocker
// in several orders (the buffers' own, then shuffles; every other one
// confirming chains first, see run) and packs each trial's blocks as
// buffers of their own once, cheaply: a quarter of work between them.
// The trials whose packing came lowest (fewer blocks first among equals),
// one in eight and at least two, are then refined with what is left, in
// equal shares, two at a time (see refine and refineBatch); only those
// are kept meanwhile. The first order's blocker runs before the others
// start (whether they look for pinwheels depends on it); with
// Options.Spawn the orders after it run ahead on another core and the two
// refine at once; the results are the same. It reports the work spent.
//
// On perfect packings of 5,000 buffers (seeds 40 to 79, fast) twelve
// orders reached the lower bound on 16 seeds and ended above +5 % on 8;
// about 30, each packed by a short search, on 23 and above +5 % on one
// (+5.53 %); with every other order confirming chains first, on 31, and
// at most +2.66 % above it: the tiling is found again when no merge goes
// astray, and each order goes astray elsewhere.
func blocks(in *instance, o Options, work int64, res *Result, sc scope) int64 {
	n := int64(len(in.bufs))
	orders := int(min(max(work/(orderCost*n), minOrders), maxOrders))
	// The first order's blocker runs first: whether the others look for
	// pinwheels depends on what it made. They do only when it made
	// some, one per hundred buffers at least. The few it makes on sliced
	// tilings are coincidences (on 10,000 buffers, seed 0, 16 of the 28
	// four orders made were not rectangles of the tiling), and looking
	// costs the blocker a tenth to a third more work there; with
	// pinwheels looked for in every order, the suite's sliced 5,000 seed
	// 0 ended +1.10 % above the lower bound at the exact effort (+0.93 %
	// before pinwheels, and so again now), and seed 26 held out +28.26 %
	// at the fast effort (+7.18 %, and so again now): its blocker spent
	// every order's probe, leaving no work to pack a trial. Where they
	// look, they look before stacking a block, however many others
	// live over its sections: the first order, which must stay cheap
	// where pinwheels are coincidences, looks only around blocks no
	// other lives over, and a middle block that another lives over by
	// chance was stacked with it (pinwheel 5,000 seed 3: +13.00 % above
	// the lower bound, now at it).
	//
	// Where the bytes live fall short of the lower bound, half the orders
	// take the holes found as buffers of their own (see holes): a
	// quarter (v mod 4 = 1, confirming chains first) the reading with
	// relays first, a quarter (v mod 4 = 2, not confirming) the one with
	// peels first. The others merge the buffers alone. With holes in
	// every order (exact ones alone, then), MiniMalloc's D ended +0.10 %
	// above the lower bound, where without them it is at it.
	share := min(holeCost*(int64(in.positions)+1), work/8)
	hs, alt, spent := holes(in, share, share)
	if spent >= work {
		return spent
	}
	withHoles := func(v int) []hole {
		switch v % 4 {
		case 1:
			return hs
		case 2:
			return alt
		}
		return nil
	}
	// The first order's blocker may spend what one order gets at the
	// fewest orders. Where it could not finish within an order's probe,
	// fewer orders run (down to 4), each with at least half as much again
	// as the first spent where 4 allow it, so that each order's blocker
	// can finish and leave some work to pack its blocks (at the fewest
	// orders, a probe is what the first may spend, and it may have spent
	// nearly all of it: then a blocker that cannot finish in a sixteenth
	// of the work gives up there, where it used to give up after one
	// order's share, about a 120th at the fast effort on 5,000 buffers).
	// What a blocker spends depends on the instance as much as on its
	// buffers: where most cuts are in bytes, many thin blocks live over
	// the same long sections and each list the blocker reads is long.
	// There (perfect packings of 5,000 buffers with nine cuts in ten in
	// bytes, another generator's, seeds 0 to 5, the generator's order,
	// fast) the first order spent 0.9 to 2.6 million units, the probes
	// were 0.8 million, the first order stopped with more than half its
	// buffers unmerged, and blocks gave up: a mean +4.63 % above the lower
	// bound, 1 of 6 at it; now all 6 are at it. Holed 5,000 (seeds 0 to
	// 31): a mean +1.99 % above the bound and 7 above +5 % before, +1.69 %
	// and 6 now. With fewer orders also where the first spent more than
	// two thirds of a probe, holed went to +1.45 % and 5, but sliced
	// 20,000 (seeds 0 and 1) from +18.05 and +11.94 % to +21.74 and
	// +14.25 %: on sliced tilings more orders find more; with that and
	// twice what the first spent, holed +1.11 % and 3, but the suite's
	// sliced 5,000 seed 0 +4.97 %, where it ends +1.84 %.
	k0 := newBlocker(in, nil)
	k0.run(work/4/minOrders, 0, false, o.halt)
	probe := work / 4 / int64(orders)
	if need := k0.work + k0.work/2; k0.work >= probe && need*int64(orders) > work/4 {
		orders = int(max(work/4/need, minOrders))
		probe = work / 4 / int64(orders)
	}
	noWheels := k0.pinwheels*100 < len(in.bufs)
	// ordered is order v's blocker (v > 0, not wary), run within limit.
	ordered := func(v int, limit int64, h *halt) *blocker {
		k := newBlocker(in, withHoles(v))
		k.noWheels, k.wheelsFirst = noWheels, !noWheels
		k.run(limit, v, v%2 == 1, h)
		return k
	}
	// An order confirming chains first (the odd ones) spends more than the
	// first: its blocker meets again every block it held back once its queue
	// is empty. Where the first order spent half a probe or more, the second
	// order's blocker runs now, as the first's did, and where that one spent
	// more than three quarters of a probe, each odd order may spend half as
	// much again as it spent, so that it can pack its blocks (refine gets a
	// few per cent less). On perfect packings cut from a box with half as
	// many ticks as pieces (family dense, 5,000 buffers, the generator's
	// order, fast; seed 9: the first order spent 0.55 million units, the odd
	// ones 0.74 to 0.80 million, the probes were 0.80 million: a third of
	// the odd orders packed nothing, the rest little) seeds 0 to 23 ended
	// above +5 % over the lower bound on 7 (+6.84 to +17.82 %), a mean
	// +4.34 %; now on 3, +2.03 %. Sliced 20,000 (seeds 0 to 5) went from a
	// mean +10.14 to +11.16 % (seed 0 from +18.05 to +22.89 %, 4 from +10.08
	// to +12.71 %, 5 from +4.77 to +3.42 %); of 133 other held-out tilings,
	// coarse 2,000 and 5,000 seed 4 ended 0.12 % higher, three lower, the
	// rest the same. Fewer orders instead, each with what the second spent
	// and half as much again, did better on dense (seeds 0 to 7: a mean
	// +0.98 %, against +1.88 % now) but worse on sliced 20,000 (+11.93 %):
	// there more orders find more.
	odd := probe // what an odd order may spend
	var k1 *blocker
	if 2*k0.work >= probe && orders > minOrders {
		k1 = ordered(1, work/4/minOrders, o.halt)
		spent += k1.work // the second order's trial then counts its packing alone
		if 4*k1.work > 3*probe {
			odd = k1.work + k1.work/2
		}
	}
	// The best trials so far, lowest first (fewer blocks first among
	// equals, then the earlier): only those are kept.
	best := make([]trial, 0, max(2, orders/8)+1)
	worse := func(a, b trial) bool {
		return cmp.Or(cmp.Compare(a.peak, b.peak), cmp.Compare(len(a.roots), len(b.roots))) > 0
	}
	// The orders' trials depend on the order alone (and on noWheels,
	// known before they start), so with o.Spawn they run ahead on
	// another core and are taken in order, as if one ran after the
	// other.
	type probed struct {
		k     *blocker
		roots []int32
		r     *Result // the blocks' packing; nil if none
		work  int64
		few   bool // too few merges to pay for packing again
	}
	// Trials still running when blocks returns are halted: their
	// results would be thrown away.
	ahalt := &halt{parent: o.halt}
	po := o
	po.halt = ahalt
	// Where a quarter or more of the stacks the first order made were of
	// three blocks or more that no neighbour confirms, wary orders follow
	// (see blocker.wary), each in an order of its own, confirming chains
	// first, with an eighth of the work among them. On tilings with about
	// ten pieces to a tick (family coarse), blocks of unrelated parts live
	// over the same sections by chance and such stacks of theirs were
	// wrong half of the time or more (the generator's offsets as an
	// oracle); there they are 25 to 41 % of the first order's stacks, on
	// other tilings of 1,000 and 5,000 buffers 2 to 27 % (perfect 12 to
	// 20 %, sliced 12 to 23 %, banded 22 and 27 %). Held out, fast,
	// coarse 500 seeds 0 to 3 went from a mean +3.26 % above the lower
	// bound to all at it, 700 seeds 0 to 3 from +8.65 to +4.19 %, 1,000
	// seeds 6 to 15 from +12.16 to +8.08 %; from 1,200 buffers they gain
	// little or nothing (1,200: +13.92 to +12.57 %; 1,500: +15.03 to
	// +15.37 %). A wary blocker leaves more blocks, fewer of them wrong:
	// in the buffers' own order, 225 (20 wrong) where the first order
	// leaves 163 (67) on coarse 1,000 seed 0, and 443 (55) where it
	// leaves 376 (135) on coarse 2,000 seed 0. They run on the caller's
	// problem only: on refine's, they took holed tilings off the bound
	// (5,000 buffers, seeds 18 and 19: +7.49 and +3.77 %). A wary blocker
	// spends eight to nine times what the first order's spent (coarse
	// 1,000 and 2,000, perfect 5,000, seed 0 each), so where a wary
	// order's share is less than eight times that, it would stop before
	// it is done and pack nothing, and none run: with them, coarse 1,500
	// seed 2 (held out) and the suite's coarse 2,000 seed 1 ended +17.16
	// and +18.41 % above the bound at the fast effort, +15.81 and
	// +14.89 % without.
	wary, waryLimit := 0, work/8/waryOrders
	if sc == whole && k0.unconfirmed > 0 && 4*k0.unconfirmed >= k0.stacks && waryLimit >= 8*k0.work {
		wary = waryOrders
	}
	get, wait := ahead(orders+wary, o.Spawn, func(v int) probed {
		k, limit := k0, probe
		switch {
		case v >= orders:
			limit = waryLimit
			k = newBlocker(in, nil)
			k.noWheels, k.wheelsFirst, k.wary = noWheels, !noWheels, true
			k.run(limit, v-orders, true, ahalt)
		case v == 1 && k1 != nil:
			k, limit = k1, odd
		case v > 0:
			if v%2 == 1 {
				limit = odd
			}
			k = ordered(v, limit, ahalt)
		}
		p := probed{k: k, roots: k.roots(), work: k.work}
		if k == k1 {
			p.work = 0
		}
		if 2*int64(len(p.roots)) > n {
			p.few = true
			return p
		}
		r, w := packRoots(in, k, p.roots, po, limit-k.work, inner)
		p.r = r
		p.work += w
		return p
	})
	defer wait()
	defer ahalt.flag.Store(true)
	for v := range orders + wary {
		if res.Peak <= in.goal || spent >= work || o.halt.done() {
			return spent
		}
		p := get(v)
		spent += p.work
		if p.few {
			if v == 0 {
				return spent
			}
			continue
		}
		if p.r != nil {
			peak := keep(p.k, p.roots, p.r, res)
			p.k.drop()
			t := trial{k: p.k, roots: p.roots, peak: peak}
			at := len(best)
			for at > 0 && worse(best[at-1], t) {
				at--
			}
			best = slices.Insert(best, at, t)[:min(len(best)+1, cap(best)-1)]
		}
	}
	// The best trials are refined refineBatch at a time, each with its
	// share of what is left and a placement of its own (see refineBatch).
	for j := 0; j < len(best); j += refineBatch {
		if res.Peak <= in.goal || spent >= work || o.halt.done() {
			break
		}
		share := (work - spent) / int64(len(best)-j)
		batch := best[j:min(j+refineBatch, len(best))]
		outs := make([]*Result, len(batch))
		works := make([]int64, len(batch))
		tasks := make([]func(*halt) bool, len(batch))
		for b, t := range batch {
			own := *res
			own.Offsets = slices.Clone(res.Offsets)
			outs[b] = &own
			tasks[b] = func(h *halt) bool {
				ob := o
				ob.halt = h
				works[b] = refine(in, t, ob, share, outs[b], sc)
				return outs[b].Peak <= in.goal
			}
		}
		first := firstOf(o.Spawn, o.halt, tasks)
		base := res.Nodes
		for b, r := range outs[:min(first+1, len(outs))] {
			spent += works[b]
			res.Nodes += r.Nodes - base
			if r.Peak < res.Peak {
				res.Offsets, res.Peak, res.Method = r.Offsets, r.Peak, r.Method
			}
		}
	}
	return spent
}

// refineBatch is how many trials refine at once (with Options.Spawn),
// each on a copy of the placement that the lowest replaces once all are
// done; the trials after one that reached the goal are thrown away (and
// halted), as they would not have run one after the other. It is fixed,
// not the number of cores, and the batches are the same without Spawn,
// so that every machine spends the same shares: a trial in a batch gets
// the share the first one gets, without what those before it in the
// batch left unspent (which goes to the next batch).
const refineBatch = 2

// packRoots packs the blocks roots of k as buffers, a problem of scope
// sc, within work. It returns the packing (nil if none fits in work)
// and the work spent.
func packRoots(in *instance, k *blocker, roots []int32, o Options, work int64, sc scope) (*Result, int64) {
	if work <= 0 { // pack takes a limit of 0 for none
		return nil, 0
	}
	sub := &Problem{Buffers: make([]Buffer, len(roots))}
	for j, id := range roots {
		x := &k.blocks[id]
		sub.Buffers[j] = Buffer{Start: int64(x.start), End: int64(x.end), Size: x.size, Align: x.align}
	}
	r, err := pack(sub, Options{Effort: o.Effort, Nodes: o.Nodes, Spawn: o.Spawn, halt: o.halt}, work, sc)
	if err != nil {
		return nil, 0
	}
	if r.Offsets == nil { // blocks' members did not fit in work
		return nil, r.Work
	}
	return r, r.Work
}

// keep counts r's search nodes in res and makes r, a packing of the
// blocks roots of k, res's placement when it is lower. It returns the
// placement's peak: r's, or, when k has holes, the highest end of a
// buffer (a hole may lie on top).
func keep(k *blocker, roots []int32, r *Result, res *Result) uint64 {
	res.Nodes += r.Nodes
	peak, method := r.Peak, "blocks, then "
	if k.nHoles > 0 {
		peak, method = 0, "blocks with holes, then "
		for j, id := range roots {
			peak = max(peak, k.top(id, r.Offsets[j]))
		}
	}
	if peak < res.Peak {
		for j, id := range roots {
			k.expand(id, r.Offsets[j], res.Offsets)
		}
		res.Peak, res.Method = peak, method+r.Method
	}
	return peak
}

// packBlocks packs the blocks roots of k as buffers, a problem of scope
// sc, within work and keeps the placement in res when it is lower. It
// returns the packing (nil if none fits in work) and the work spent.
func packBlocks(in *instance, k *blocker, roots []int32, o Options, work int64, res *Result, sc scope) (*Result, int64) {
	r, w := packRoots(in, k, roots, o, work, sc)
	if r != nil {
		keep(k, roots, r, res)
	}
	return r, w
}

// refine packs t's blocks within work and, while the peak stays above
// the goal, takes the blocks placed above it apart one level (and, after
// the first packing, every stack) and packs the rest again, letting
// blocks merge what is left anew when refine runs on a problem of scope
// whole. It returns the work spent.
func refine(in *instance, t trial, o Options, work int64, res *Result, sc scope) int64 {
	var spent int64
	roots := t.roots
	// The first packing is of the blocks as they are; the later ones, once
	// the stacks are apart, let blocks merge the rest again, in orders of
	// their own: a block that a stack took by chance from its own part
	// is merged into that part then (perfect packings of 5,000 buffers,
	// seeds 0 to 39, fast: 32 at the lower bound and up to +2.80 % above
	// it without, 37 and +1.36 % with; of 10,000, seed 0: +13.64 % and
	// +2.64 %).
	for round := 0; res.Peak > in.goal && spent < work && !o.halt.done(); round++ {
		sub := inner
		if round > 0 && sc == whole {
			sub = nested
		}
		// Each round may spend an even share of what is left to the
		// rounds that can still come. A packing at the exact effort
		// spends all it is given (its search has no node limit), so
		// without shares the first round took everything, and the later
		// ones, with the stacks apart, are where the tiling is found
		// (perfect packings of 10,000 buffers, seeds 0 to 4, exact: 3 at
		// the lower bound and up to +2.91 % without, all 5 with).
		share := (work - spent) / int64(blockRounds+1-round)
		r, w := packBlocks(in, t.k, roots, o, share, res, sub)
		spent += w
		if r == nil {
			break
		}
		// After the first packing, the stacks are taken apart too,
		// wherever they sit: a stack can hold a block of another part of
		// the tiling that lives over the same sections by chance, and no
		// placement of the blocks then meets the bound. On perfect
		// packings of 5,000 buffers about 25 of 80 blocks were not
		// rectangles of the tiling, nearly all of them such stacks.
		// So is every chain that meets where a guessed chain met, at its
		// size: when a guess paired the wrong blocks, the right partners
		// are among them, and blocks may pair them anew (perfect packings
		// of 5,000 buffers, seeds 0 to 119, fast: 116 at the lower bound
		// and up to +1.54 % above it without, all 120 with; of 10,000,
		// seeds 0 to 5 and 107, exact: 5 and up to +12.87 %, all 7).
		var guesses map[junction]bool
		if round == 0 {
			guesses = t.k.guesses()
		}
		var next []int32
		apart := false
		for j, id := range roots {
			x := &t.k.blocks[id]
			if x.buf < 0 && (r.Offsets[j]+x.size > in.goal || round == 0 && (x.stacked || guesses[t.k.junctionOf(id)])) {
				apart = true
				for _, q := range x.parts {
					if !t.k.blocks[q].empty {
						next = append(next, q)
					}
				}
			} else {
				next = append(next, id)
			}
		}
		if !apart || round >= blockRounds {
			break
		}
		roots = next
	}
	return spent
}
