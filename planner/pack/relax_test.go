package pack

import (
	"math/bits"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestPropertyRelax: from greedy-size's placement of random instances
// with alignments and conflicts (sizes multiples of the largest
// alignment, so that it runs), moved up by a few bytes, relax leaves the
// placement as it was or a valid one that peaks lower, and reports the
// peak its offsets have; it spends no more than its work and one pass,
// and does the same on every run.
func TestPropertyRelax(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := drawProblem(t, 40, 64, true)
		for i := range p.Buffers {
			p.Buffers[i].Size *= 16
		}
		in, err := newInstance(p)
		if err != nil {
			t.Fatal(err)
		}
		g, err := GreedySize(p)
		if err != nil {
			t.Fatal(err)
		}
		work := rapid.Int64Range(1, 1<<16).Draw(t, "work")
		// Every offset moved up by the same few bytes: still apart, but
		// off the largest alignment, which relax must land on again.
		shift := rapid.Uint64Range(0, 15).Draw(t, "shift")
		start := make([]uint64, len(g.Offsets))
		for i, off := range g.Offsets {
			start[i] = off + shift
		}
		run := func() (*Result, int64) {
			res := &Result{Offsets: append([]uint64(nil), start...), Peak: g.Peak + shift, Method: g.Method}
			return res, relax(in, 1<<20, work, res)
		}
		res, spent := run()
		if res.Method == "relax" {
			peak, err := Check(p, res.Offsets)
			if err != nil {
				t.Fatalf("relax left an invalid placement: %v", err)
			}
			if peak != res.Peak || peak >= g.Peak+shift {
				t.Fatalf("relax reports peak %d, its offsets peak at %d, the start's at %d", res.Peak, peak, g.Peak+shift)
			}
		} else if !slices.Equal(res.Offsets, start) || res.Peak != g.Peak+shift {
			t.Fatalf("relax found nothing but changed the placement")
		}
		// Past the limit by at most a buffer's sweep and move (at most n
		// neighbours: 6n for the sweep, and two orders kept, each at most
		// n shifts and twice a sort's n·log n) and a pass's n.
		n := int64(len(p.Buffers))
		if most := work + 10*n + 4*n*int64(bits.Len(uint(n))); spent > most {
			t.Fatalf("relax spent %d of %d", spent, work)
		}
		again, spentAgain := run()
		if spentAgain != spent || again.Peak != res.Peak || again.Method != res.Method || !slices.Equal(again.Offsets, res.Offsets) {
			t.Fatalf("relax differs between runs: peak %d after %d, then %d after %d", res.Peak, spent, again.Peak, spentAgain)
		}
	})
}

// TestRelaxReachesTheBound: on a tiling of four pieces that a first
// placement leaves above its lower bound, relax finds the tiling.
func TestRelaxReachesTheBound(t *testing.T) {
	// Sections [0,2) and [2,4); the box is 4 bytes tall: A [0,4)×2,
	// B [0,2)×2, C [2,4)×1, D [2,4)×1. Placed B 0, A 2, C 0, D 6: peak 7.
	p := &Problem{Buffers: []Buffer{{Start: 0, End: 4, Size: 2}, {Start: 0, End: 2, Size: 2}, {Start: 2, End: 4, Size: 1}, {Start: 2, End: 4, Size: 1}}}
	in, err := newInstance(p)
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Offsets: []uint64{2, 0, 0, 6}, Peak: 7}
	if _, err := Check(p, res.Offsets); err != nil {
		t.Fatal(err)
	}
	relax(in, 1<<10, 1<<16, res)
	if peak, err := Check(p, res.Offsets); err != nil || peak != 4 || res.Peak != 4 || res.Method != "relax" {
		t.Fatalf("relax: offsets %v peak %d (reported %d, %s), err %v; want peak 4", res.Offsets, peak, res.Peak, res.Method, err)
	}
}
