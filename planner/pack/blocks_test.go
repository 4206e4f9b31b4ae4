package pack

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// drawTiling cuts a box into pieces with guillotine cuts, as the perfect
// family does, with random alignments: the lower bound is the box height
// and stacks need padding where an alignment is not met.
func drawTiling(t *rapid.T) *Problem {
	type rect struct {
		t0, t1 int64
		b0, b1 uint64
	}
	rects := []rect{{0, rapid.Int64Range(2, 40).Draw(t, "width"), 0, rapid.Uint64Range(2, 64).Draw(t, "height")}}
	for range rapid.IntRange(0, 40).Draw(t, "cuts") {
		k := rapid.IntRange(0, len(rects)-1).Draw(t, "piece")
		x := rects[k]
		switch {
		case rapid.Bool().Draw(t, "in time") && x.t1-x.t0 >= 2:
			c := rapid.Int64Range(x.t0+1, x.t1-1).Draw(t, "at")
			rects[k], x.t0 = rect{x.t0, c, x.b0, x.b1}, c
		case x.b1-x.b0 >= 2:
			c := rapid.Uint64Range(x.b0+1, x.b1-1).Draw(t, "at")
			rects[k], x.b0 = rect{x.t0, x.t1, x.b0, c}, c
		default:
			continue
		}
		rects = append(rects, x)
	}
	p := &Problem{}
	for _, x := range rects {
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
		p := &Problem{}
		for _, s := range c.same {
			p.Buffers = append(p.Buffers, Buffer{Start: 10, End: 20, Size: s})
		}
		for _, s := range c.near {
			p.Buffers = append(p.Buffers, Buffer{Start: 0, End: 10, Size: s})
		}
		in, err := newInstance(p)
		if err != nil {
			t.Fatal(err)
		}
		k := newBlocker(in)
		same := make([]int32, len(c.same))
		for i := range same {
			same[i] = int32(i)
		}
		var got []uint64
		for _, id := range k.trim(same, in.start[0], in.end[0]) {
			got = append(got, k.blocks[id].size)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("same %v, near %v: kept %v, want %v", c.same, c.near, got, c.want)
		}
	}
}
