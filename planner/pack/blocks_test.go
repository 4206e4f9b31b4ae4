package pack

import (
	"cmp"
	"math/big"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// A tile is a piece of a box: ticks [t0, t1), bytes [b0, b1).
type tile struct {
	t0, t1 int64
	b0, b1 uint64
}

// pieces appends to dst the buffers of tiles, each moved by move (where
// it is if move is nil), but for the tiles at the indices in missing.
func pieces(dst []Buffer, tiles []tile, missing []int, move func(tile) tile) []Buffer {
	for j, x := range tiles {
		if slices.Contains(missing, j) {
			continue
		}
		if move != nil {
			x = move(x)
		}
		dst = append(dst, Buffer{Start: x.t0, End: x.t1, Size: x.b1 - x.b0})
	}
	return dst
}

// pinwheelCut cuts x into a pinwheel around the middle [m0, m1) ×
// [c0, c1), the pieces in wheel's order A, B, C, D, E: right is the hand
// whose bottom piece reaches from x's start to m1, the other its mirror
// in time.
func pinwheelCut(x tile, m0, m1 int64, c0, c1 uint64, right bool) []tile {
	if right {
		return []tile{{x.t0, m1, x.b0, c0}, {m1, x.t1, x.b0, c1}, {m0, x.t1, c1, x.b1}, {x.t0, m0, c0, x.b1}, {m0, m1, c0, c1}}
	}
	return []tile{{m0, x.t1, x.b0, c0}, {x.t0, m0, x.b0, c1}, {x.t0, m1, c1, x.b1}, {m1, x.t1, c0, x.b1}, {m0, m1, c0, c1}}
}

// drawTiling cuts a box into pieces with guillotine cuts, as the perfect
// family does, or into pinwheels, as the pinwheel family does, with
// random alignments: the lower bound is the box height (unless pieces
// are left out, as the holed family does), stacks need padding where an
// alignment is not met, and a pinwheel whose offsets miss an alignment
// is not made.
func drawTiling(t *rapid.T) *Problem {
	rects := []tile{{0, rapid.Int64Range(2, 40).Draw(t, "width"), 0, rapid.Uint64Range(2, 64).Draw(t, "height")}}
	for range rapid.IntRange(0, 40).Draw(t, "cuts") {
		k := rapid.IntRange(0, len(rects)-1).Draw(t, "piece")
		x := rects[k]
		switch {
		case x.t1-x.t0 >= 3 && x.b1-x.b0 >= 3 && rapid.IntRange(0, 3).Draw(t, "pinwheel") == 0:
			m0 := rapid.Int64Range(x.t0+1, x.t1-2).Draw(t, "middle start")
			m1 := rapid.Int64Range(m0+1, x.t1-1).Draw(t, "middle end")
			c0 := rapid.Uint64Range(x.b0+1, x.b1-2).Draw(t, "middle bottom")
			c1 := rapid.Uint64Range(c0+1, x.b1-1).Draw(t, "middle top")
			wheel := pinwheelCut(x, m0, m1, c0, c1, !rapid.Bool().Draw(t, "mirror"))
			rects[k] = wheel[0]
			rects = append(rects, wheel[1:]...)
			continue
		case rapid.Bool().Draw(t, "in time") && x.t1-x.t0 >= 2:
			c := rapid.Int64Range(x.t0+1, x.t1-1).Draw(t, "at")
			rects[k], x.t0 = tile{x.t0, c, x.b0, x.b1}, c
		case x.b1-x.b0 >= 2:
			c := rapid.Uint64Range(x.b0+1, x.b1-1).Draw(t, "at")
			rects[k], x.b0 = tile{x.t0, x.t1, x.b0, c}, c
		default:
			continue
		}
		rects = append(rects, x)
	}
	p := &Problem{}
	holed := rapid.Bool().Draw(t, "holed")
	for j, x := range rects {
		// A holed tiling has pieces missing (never the first): the bytes
		// live fall short of the box there, and holes finds some.
		if holed && j > 0 && rapid.IntRange(0, 7).Draw(t, "missing") == 0 {
			continue
		}
		b := Buffer{Start: x.t0, End: x.t1, Size: x.b1 - x.b0}
		if rapid.IntRange(0, 4).Draw(t, "aligned") == 0 {
			b.Align = 1 << rapid.IntRange(1, 3).Draw(t, "align")
		}
		p.Buffers = append(p.Buffers, b)
	}
	return p
}

// TestPropertyBlocks: on tilings, where blocks merge most buffers, every
// placement is valid and no worse than greedy-size's, and blocks on its
// own leaves a valid placement whose peak it reports.
func TestPropertyBlocks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawTiling(t)
		g, err := GreedySize(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range Efforts {
			// A small budget: with alignments the lower bound may be out
			// of reach, and the exact effort would spend all of its own.
			r := mustPack(t, p, Options{Effort: e, Budget: 1 << 20})
			if r.Peak > g.Peak {
				t.Fatalf("%s: packed peaks at %d, greedy-size at %d", e, r.Peak, g.Peak)
			}
		}
		// blocks on its own, from a placement no better than greedy's.
		in, err := newInstance(p)
		if err != nil {
			t.Fatal(err)
		}
		res := &Result{Offsets: append([]uint64(nil), g.Offsets...), Peak: g.Peak}
		blocks(in, Options{Effort: Fast}, 1<<20, res, whole)
		if peak, err := Check(p, res.Offsets); err != nil || peak != res.Peak {
			t.Fatalf("blocks: peak %d, checked %d: %v", res.Peak, peak, err)
		}
	})
}

// TestHolesFindMissingPieces: of a tiling of a box 12 ticks wide and 12
// bytes tall, two pieces are missing whose ends meet no other missing
// piece's; holes finds exactly those two, and nothing on the whole
// tiling. The blocker, given them, merges everything into one block of
// the box, and the placement it gives peaks at the box height. Two
// pieces missing, one ending where the other starts, are found as a
// relay.
func TestHolesFindMissingPieces(t *testing.T) {
	tiles := []tile{{0, 6, 0, 6}, {6, 12, 0, 6}, {0, 4, 6, 12}, {4, 9, 6, 9}, {4, 9, 9, 12}, {9, 12, 6, 12}}
	problem := func(missing ...int) *Problem { return &Problem{Buffers: pieces(nil, tiles, missing, nil)} }
	whole, err := newInstance(problem())
	if err != nil {
		t.Fatal(err)
	}
	if hs, _, spent := holes(whole, 1<<20, 1<<20); len(hs) != 0 || spent != 0 {
		t.Fatalf("holes in a whole tiling: %v, after %d work", hs, spent)
	}
	in, err := newInstance(problem(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	hs, _, _ := holes(in, 1<<20, 1<<20)
	// Sections are the instants buffers start or end at: 0, 4, 6, 9, 12.
	want := []hole{{1, 3, 3}, {2, 4, 6}} // [4, 9) × 3 and [6, 12) × 6
	if !slices.Equal(hs, want) {
		t.Fatalf("holes %v, want %v", hs, want)
	}
	k := newBlocker(in, hs)
	k.run(1<<20, 0, false, nil)
	if roots := k.roots(); len(roots) != 1 || k.blocks[roots[0]].size != 12 {
		t.Fatalf("blocks left: %v", roots)
	}
	relay, err := newInstance(problem(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	// Sections 0, 4, 6, 9, 12 again: [0, 4) × 6 ends where [4, 9) × 3
	// starts.
	if hs, _, _ := holes(relay, 1<<20, 1<<20); !slices.Equal(hs, []hole{{0, 1, 6}, {1, 3, 3}}) {
		t.Fatalf("holes %v, want the relay [0, 4) × 6, [4, 9) × 3", hs)
	}
	res := &Result{Offsets: make([]uint64, len(in.bufs)), Peak: ^uint64(0)}
	keep(k, k.roots(), &Result{Offsets: []uint64{0}, Peak: 12}, res)
	if peak, err := Check(problem(1, 3), res.Offsets); err != nil || peak != res.Peak || peak != 12 {
		t.Fatalf("placement peaks at %d, reported %d: %v", peak, res.Peak, err)
	}
}

// forkTiles tile a box of 24 ticks and 12 bytes: a column [0, 4) × 12;
// [4, 12) cut in bytes into three rows of one byte, each cut in time (at
// 6, 8 and 10), and one of 9; [12, 24) into 9 and 3. forkMissing: the
// rows' first pieces and [12, 24) × 9.
var (
	forkTiles = []tile{{0, 4, 0, 12}, {4, 6, 0, 1}, {4, 8, 1, 2}, {4, 10, 2, 3}, {4, 12, 3, 12},
		{6, 12, 0, 1}, {8, 12, 1, 2}, {10, 12, 2, 3}, {12, 24, 0, 9}, {12, 24, 9, 12}}
	forkMissing = []int{1, 2, 3, 8}
)

// TestHolesPeelForks: three pieces missing that start together and end
// apart (a fork), beside one missing alone, and the same tiling mirrored
// in time (a join). Relays read the last two of the fork as one piece
// ending where another starts; peels, before relays, find the three, and
// the blocker given them makes one block of the box.
func TestHolesPeelForks(t *testing.T) {
	for _, mirror := range []bool{false, true} {
		move := func(x tile) tile {
			if mirror {
				x.t0, x.t1 = 24-x.t1, 24-x.t0
			}
			return x
		}
		in, err := newInstance(&Problem{Buffers: pieces(nil, forkTiles, forkMissing, move)})
		if err != nil {
			t.Fatal(err)
		}
		// Sections start at 0, 4, 6, 8, 10, 12 (mirrored: 0, 12, 14, 16,
		// 18, 20).
		want := []hole{{5, 6, 9}, {1, 2, 1}, {1, 3, 1}, {1, 4, 1}}
		if mirror {
			want = []hole{{0, 1, 9}, {4, 5, 1}, {3, 5, 1}, {2, 5, 1}}
		}
		// Relays first read the fork's last two as a piece of 2 ending
		// where one of 1 starts.
		relays := []hole{{5, 6, 9}, {1, 2, 1}, {1, 3, 2}, {3, 4, 1}}
		if mirror {
			relays = []hole{{0, 1, 9}, {4, 5, 1}, {2, 3, 1}, {3, 5, 2}}
		}
		hs, alt, _ := holes(in, 1<<20, 0)
		if !slices.Equal(alt, want) {
			t.Fatalf("mirrored %v: holes %v, want %v", mirror, alt, want)
		}
		if !slices.Equal(hs, relays) {
			t.Fatalf("mirrored %v: holes with relays first %v, want %v", mirror, hs, relays)
		}
		// Cut again where the buffers around say so, the relay is the
		// fork: each piece of the fork ends where a buffer of its size
		// starts, the relay's piece of 2 bytes meets none.
		hs, alt, _ = holes(in, 1<<20, 1<<20)
		for _, got := range [][]hole{hs, alt} {
			if !sameHoles(got, want) {
				t.Fatalf("mirrored %v: holes cut again %v, want %v", mirror, got, want)
			}
		}
		k := newBlocker(in, alt)
		k.run(1<<20, 0, false, nil)
		if roots := k.roots(); len(roots) != 1 || k.blocks[roots[0]].size != 12 {
			t.Fatalf("mirrored %v: blocks left: %v", mirror, roots)
		}
	}
}

// sameHoles reports whether a and b hold the same holes, in any order.
func sameHoles(a, b []hole) bool {
	order := func(x, y hole) int {
		return cmp.Or(cmp.Compare(x.start, y.start), cmp.Compare(x.end, y.end), cmp.Compare(x.size, y.size))
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, order)
	slices.SortFunc(b, order)
	return slices.Equal(a, b)
}

// TestHolesExplainTheShortfall: holes finds none where those it would
// find explain less than minExplained of the shortfall: one exact hole of
// one byte over one section beside a shortfall that steps up by 3 and
// down by 1 three times, which neither exact matching nor a relay
// explains.
func TestHolesExplainTheShortfall(t *testing.T) {
	p := &Problem{Buffers: []Buffer{{Start: 0, End: 4, Size: 10}, {Start: 4, End: 8, Size: 9}, {Start: 8, End: 12, Size: 10}}}
	in, err := newInstance(p)
	if err != nil {
		t.Fatal(err)
	}
	if hs, _, _ := holes(in, 1<<20, 1<<20); !slices.Equal(hs, []hole{{1, 2, 1}}) {
		t.Fatalf("holes %v, want [4, 8) × 1", hs)
	}
	for j, size := range []uint64{7, 8, 9, 10} {
		p.Buffers = append(p.Buffers, Buffer{Start: int64(12 + j), End: int64(13 + j), Size: size})
	}
	if in, err = newInstance(p); err != nil {
		t.Fatal(err)
	}
	if hs, _, _ := holes(in, 1<<20, 1<<20); len(hs) != 0 {
		t.Fatalf("holes %v explaining a seventh of the shortfall", hs)
	}
}

// TestHolesWithinWork: a shortfall that steps up by 3 and then falls by
// one byte at every section makes the relay from that step look, at every
// section, for a fall of 2 over the rest of the instance; holes stops
// within its work, passed by a few sections' worth (the last holes and
// its final pass), where without its bounds in every scan it spent sixty
// times it. So it does where the first pass explains enough of the
// shortfall and the two readings after it run out of work (without
// halving what is left between them, 11,100 on a budget of 8,325).
func TestHolesWithinWork(t *testing.T) {
	const m = 2000
	// Section 0 is full (3,000 bytes); the shortfall is 2,000 in section
	// 1, 2,003 in section 2, and one less in each section after it.
	p := &Problem{Buffers: []Buffer{{Start: 0, End: 1, Size: 3000}, {Start: 1, End: 2, Size: 1000}}}
	for s := int64(2); s < m; s++ {
		p.Buffers = append(p.Buffers, Buffer{Start: s, End: s + 1, Size: 997 + uint64(s-2)})
	}
	in, err := newInstance(p)
	if err != nil {
		t.Fatal(err)
	}
	work := int64(16 * m)
	if _, _, spent := holes(in, work, 0); spent > work+3*m {
		t.Fatalf("holes spent %d on a budget of %d", spent, work)
	}
	// Where the first pass explains enough and the readings run out:
	// 300 copies of TestHolesPeelForks' tiling one after the other,
	// each with the same pieces missing.
	p = &Problem{}
	for c := range int64(300) {
		p.Buffers = pieces(p.Buffers, forkTiles, forkMissing, func(x tile) tile {
			x.t0, x.t1 = 24*c+x.t0, 24*c+x.t1
			return x
		})
	}
	if in, err = newInstance(p); err != nil {
		t.Fatal(err)
	}
	_, alt, full := holes(in, 1<<40, 0)
	if len(alt) != 4*300 {
		t.Fatalf("%d holes with peels first, want %d", len(alt), 4*300)
	}
	// Cutting the holes again stays within its own budget, passed by
	// one group's ways at most (three holes, six points: 680 ways of
	// three rectangles over five sections). With 100,000 units every
	// relay of the first reading has become its fork (360,000 cut every
	// pair and triple again, to no avail after that); with 1,000, few
	// have.
	for _, recut := range []int64{1000, 10_000, 100_000} {
		hs, alt, spent := holes(in, 1<<40, recut)
		if spent > full+recut+680*3*5 {
			t.Fatalf("holes spent %d cutting again on a budget of %d", spent-full, recut)
		}
		if same := sameHoles(hs, alt); same != (recut == 100_000) {
			t.Fatalf("cut again within %d: the readings are the same: %v", recut, same)
		}
	}
	for _, work := range []int64{full / 4, full / 2, 3 * full / 4} {
		if _, alt, spent := holes(in, work, 0); spent > work+3*int64(in.positions) || len(alt) >= 4*300 {
			t.Fatalf("holes spent %d and found %d on a budget of %d (%d when nothing stops it)", spent, len(alt), work, full)
		}
	}
}

// TestKeepPeaksAtBuffers: a hole on top of a packing of blocks does not
// count in the peak keep reports.
func TestKeepPeaksAtBuffers(t *testing.T) {
	in, err := newInstance(&Problem{Buffers: []Buffer{{Start: 0, End: 2, Size: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	k := newBlocker(in, []hole{{0, 1, 4}})
	k.run(1<<20, 0, false, nil)
	roots := k.roots()
	if len(roots) != 1 || k.blocks[roots[0]].size != 8 {
		t.Fatalf("blocks left: %v", roots)
	}
	res := &Result{Offsets: make([]uint64, 1), Peak: ^uint64(0)}
	keep(k, roots, &Result{Offsets: []uint64{0}, Peak: 8}, res)
	if res.Peak != 4 || res.Offsets[0] != 0 {
		t.Fatalf("kept peak %d, offset %d; want 4 and 0", res.Peak, res.Offsets[0])
	}
}

// TestRootsLeaveHolesOut: holes that no merge takes into a block with a
// buffer, alone or stacked with each other, are not among the blocks to
// pack.
func TestRootsLeaveHolesOut(t *testing.T) {
	// Sections [0, 2) and [2, 4): two buffers that merge with nothing,
	// and two holes over both sections, which stack with each other only.
	in, err := newInstance(&Problem{Buffers: []Buffer{{Start: 0, End: 2, Size: 4}, {Start: 2, End: 4, Size: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	k := newBlocker(in, []hole{{0, 2, 5}, {0, 2, 6}})
	k.run(1<<20, 0, false, nil)
	if roots := k.roots(); !slices.Equal(roots, []int32{0, 1}) {
		var stacks int
		for _, id := range roots {
			if k.blocks[id].stacked {
				stacks++
			}
		}
		t.Fatalf("blocks to pack %v (%d stacks), want the two buffers", roots, stacks)
	}
}

// TestTrimKeepsTheFewestThatSum: of blocks live over the same sections,
// trim keeps the fewest (two or more) whose sizes sum to a block meeting
// them in time; all of them when they all do; and, of more than
// maxSubset, all but one when those do.
func TestTrimKeepsTheFewestThatSum(t *testing.T) {
	// sizes of the buffers live over [10, 20), and of those that end at
	// 10 (their neighbours), each case's answer as sizes
	for _, c := range []struct {
		same, near, want []uint64
	}{
		{[]uint64{5, 7, 11, 13}, []uint64{18}, []uint64{7, 11}}, // 5+13 sums to 18 too: the first pair by ascending mask is kept
		{[]uint64{5, 7, 11, 13}, []uint64{36}, []uint64{5, 7, 11, 13}},
		{[]uint64{5, 7, 11, 13}, []uint64{99}, []uint64{5, 7, 11, 13}},
		{[]uint64{5, 7, 11, 13}, []uint64{23, 31}, []uint64{5, 7, 11}}, // no pair sums to either; 5+7+11 = 23
		{[]uint64{1, 2, 4, 8, 16, 32, 64, 128, 256}, []uint64{510}, []uint64{2, 4, 8, 16, 32, 64, 128, 256}},
	} {
		k, same := trimCase(t, c.same, c.near)
		if got := blockSizes(k, k.trim(same, k.blocks[0].start, k.blocks[0].end)); !slices.Equal(got, c.want) {
			t.Errorf("same %v, near %v: kept %v, want %v", c.same, c.near, got, c.want)
		}
	}
}

// trimCase returns a blocker of buffers of sizes same live over [10,
// 20), then of sizes near over [0, 10) (their neighbours), and the ids of
// the first.
func trimCase(t *testing.T, same, near []uint64) (*blocker, []int32) {
	t.Helper()
	p := &Problem{}
	for _, s := range same {
		p.Buffers = append(p.Buffers, Buffer{Start: 10, End: 20, Size: s})
	}
	for _, s := range near {
		p.Buffers = append(p.Buffers, Buffer{Start: 0, End: 10, Size: s})
	}
	in, err := newInstance(p)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int32, len(same))
	for i := range ids {
		ids[i] = int32(i)
	}
	return newBlocker(in, nil), ids
}

// blockSizes returns the sizes of the blocks ids of k.
func blockSizes(k *blocker, ids []int32) []uint64 {
	var out []uint64
	for _, id := range ids {
		out = append(out, k.blocks[id].size)
	}
	return out
}

// TestBlockerMakesPinwheels: a box cut into a pinwheel, in either hand,
// whose pieces are cut again (the middle into a pinwheel of its own, one
// piece in time, one in bytes), is merged back into one block that tiles
// the box, whether pinwheels are looked for before stacks or not; stacks
// and chains alone (noWheels) leave the pieces apart.
func TestBlockerMakesPinwheels(t *testing.T) {
	for _, right := range []bool{true, false} {
		for _, inner := range []bool{true, false} {
			box := tile{0, 100, 0, 1000}
			// Sizes chosen so that no two pieces meet at a size that
			// would mislead trim or a chain.
			rects := pinwheelCut(box, 30, 60, 310, 690, right)
			// The middle [30, 60) × [310, 690) becomes a pinwheel of
			// either hand; the first piece is cut in time, the second
			// in bytes.
			mid := rects[4]
			rects = append(rects[:4], pinwheelCut(mid, 40, 50, 400, 530, inner)...)
			a, b := rects[0], rects[1]
			ta := a.t0 + 7 // a tick no other piece starts or ends at
			rects[0], a.t0 = tile{a.t0, ta, a.b0, a.b1}, ta
			bb := b.b0 + 123
			rects[1], b.b0 = tile{b.t0, b.t1, b.b0, bb}, bb
			rects = append(rects, a, b)
			p := &Problem{Buffers: pieces(nil, rects, nil, nil)}
			in, err := newInstance(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, first := range []bool{false, true} {
				k := newBlocker(in, nil)
				k.wheelsFirst = first
				k.run(1<<30, 0, false, nil)
				roots := k.roots()
				if len(roots) != 1 || !k.blocks[roots[0]].wheel {
					t.Errorf("hands %v, %v, wheels first %v: %d blocks left, want one pinwheel", right, inner, first, len(roots))
					continue
				}
				offsets := make([]uint64, len(p.Buffers))
				k.expand(roots[0], 0, offsets)
				if peak, err := Check(p, offsets); err != nil || peak != box.b1 {
					t.Errorf("hands %v, %v, wheels first %v: the pinwheel peaks at %d, want %d: %v", right, inner, first, peak, box.b1, err)
				}
			}
			k := newBlocker(in, nil)
			k.noWheels = true
			k.run(1<<30, 0, false, nil)
			if n := len(k.roots()); n < 5 {
				t.Errorf("hands %v, %v, no pinwheels: %d blocks left, want the pieces apart", right, inner, n)
			}
		}
	}
}

// TestPropertyRecutKeepsTheShortfall: better replaces two or three holes
// only by as many rectangles with the same shortfall at every section,
// each of positive size, more of them with evidence; else it leaves them
// as they are. Sizes reach 2^63, where sums of sizes wrap a uint64: three
// holes starting together, [0, 1) × 2^61, [0, 3) × 2^62 + 2^61 and [0, 2)
// × 2^61, would read as [0, 2), [1, 3) and a third of 2^64 − 2^62 − 2^61
// over [1, 2) if wrapped sums balanced.
func TestPropertyRecutKeepsTheShortfall(t *testing.T) {
	profile := func(group []hole, at int32) *big.Int {
		sum := new(big.Int)
		for _, h := range group {
			if h.start <= at && at < h.end {
				sum.Add(sum, new(big.Int).SetUint64(h.size))
			}
		}
		return sum
	}
	check := func(fatalf func(string, ...any), group []hole, e *evidence) {
		before := slices.Clone(group)
		_, ok := e.better(group)
		if !ok {
			if !slices.Equal(group, before) {
				fatalf("%v changed to %v, reported unchanged", before, group)
			}
			return
		}
		for _, h := range group {
			if h.size == 0 || h.start >= h.end {
				fatalf("%v cut into %v: %v is no rectangle", before, group, h)
			}
		}
		for at := int32(0); at < 8; at++ {
			if profile(group, at).Cmp(profile(before, at)) != 0 {
				fatalf("%v cut into %v: the shortfall at %d is %v, was %v", before, group, at, profile(group, at), profile(before, at))
			}
		}
		if e.score(group) <= e.score(before) {
			fatalf("%v cut into %v with no more evidence", before, group)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		e := &evidence{life: map[[2]int32]bool{}, ends: map[sectionSize]bool{}, starts: map[sectionSize]bool{}}
		for a := int32(0); a < 7; a++ {
			for b := a + 1; b < 8; b++ {
				if rapid.IntRange(0, 3).Draw(t, "backed") == 0 {
					e.life[[2]int32{a, b}] = true
				}
			}
		}
		group := make([]hole, rapid.IntRange(2, 3).Draw(t, "holes"))
		for q := range group {
			a := rapid.Int32Range(0, 6).Draw(t, "start")
			size := rapid.Uint64Range(1, 8).Draw(t, "size")
			if rapid.Bool().Draw(t, "huge") {
				size = rapid.Uint64Range(1<<61, 1<<63).Draw(t, "huge size")
			}
			group[q] = hole{a, rapid.Int32Range(a+1, 7).Draw(t, "end"), size}
		}
		check(t.Fatalf, group, e)
	})
	// The wrap above, with evidence for its first two rectangles (and so
	// for [1, 3) of another way, which keeps the shortfall).
	e := &evidence{life: map[[2]int32]bool{{0, 2}: true, {1, 3}: true}, ends: map[sectionSize]bool{}, starts: map[sectionSize]bool{}}
	check(t.Fatalf, []hole{{0, 1, 1 << 61}, {0, 3, 1<<62 + 1<<61}, {0, 2, 1 << 61}}, e)
}

// TestTrimWaryRefusesUnconfirmed: a wary blocker stacks three blocks or
// more only where some of them sum to a neighbour's size; a blocker that
// is not wary stacks all of them and counts the stack as unconfirmed. A
// refused stack is not weighed again (no subsets are tried) until a
// neighbour changes: a block whose size is their sum, ending where they
// start, confirms them. Pairs are stacked as before.
func TestTrimWaryRefusesUnconfirmed(t *testing.T) {
	start, end := int32(1), int32(2) // the sections of [10, 20)

	k, same := trimCase(t, []uint64{5, 7, 11, 13}, []uint64{99})
	if got := blockSizes(k, k.trim(slices.Clone(same), start, end)); len(got) != 4 || k.unconfirmed != 1 {
		t.Fatalf("not wary: kept %v, %d unconfirmed; want all four, 1", got, k.unconfirmed)
	}

	k, same = trimCase(t, []uint64{5, 7, 11, 13}, []uint64{99})
	k.wary = true
	if got := k.trim(slices.Clone(same), start, end); len(got) != 0 || k.unconfirmed != 0 {
		t.Fatalf("wary: kept %v, %d unconfirmed; want none, 0", blockSizes(k, got), k.unconfirmed)
	}
	first := k.work
	if got := k.trim(slices.Clone(same), start, end); len(got) != 0 {
		t.Fatalf("wary, again: kept %v, want none", blockSizes(k, got))
	}
	if again := k.work - first; again >= first {
		t.Errorf("wary, again: %d units, the first time %d: want fewer (no subsets weighed)", again, first)
	}
	k.add(block{start: 0, end: start, size: 5 + 7 + 11 + 13, align: 1, buf: -1})
	if got := blockSizes(k, k.trim(slices.Clone(same), start, end)); len(got) != 4 {
		t.Errorf("wary, with a neighbour of their sum: kept %v, want all four", got)
	}

	k, same = trimCase(t, []uint64{5, 7, 11, 13}, []uint64{18})
	k.wary = true
	if got := blockSizes(k, k.trim(slices.Clone(same), start, end)); !slices.Equal(got, []uint64{7, 11}) {
		t.Errorf("wary, a pair sums to a neighbour: kept %v, want [7 11]", got)
	}

	k, same = trimCase(t, []uint64{5, 7}, []uint64{99})
	k.wary = true
	if got := blockSizes(k, k.trim(slices.Clone(same), start, end)); len(got) != 2 {
		t.Errorf("wary, a pair: kept %v, want both", got)
	}
}
