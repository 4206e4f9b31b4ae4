package families_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/bench/families"
	"github.com/tmmu/tmmu/dsa"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/planner/pack"
)

// TestPerfectIsTight: the pieces of every tiling family tile the box, so
// the lower bound is the box's height, and the same seed gives the same
// instance (the area they cover pins the box's width: half as many ticks
// as pieces for dense, a tenth as many for coarse). Banded tilings are
// cut in bytes nine times in ten: most of their pieces live over more
// than a tenth of the box, where few of perfect's do.
func TestPerfectIsTight(t *testing.T) {
	for _, c := range []struct {
		family string
		tiling func(int, uint64) *dsa.Instance
	}{{"perfect", families.Perfect}, {"halving", families.Halving}, {"sliced", families.Sliced}, {"pinwheel", families.Pinwheel}, {"banded", families.Banded}, {"dense", families.Dense}, {"coarse", families.Coarse}} {
		for _, n := range []int{1, 2, 100, 1000} {
			checkTiling(t, c.family, c.tiling, n)
		}
	}
	long := func(in *dsa.Instance) (k int) {
		for _, b := range in.Buffers {
			if 10*(b.Upper-b.Lower) > boxTicks("banded", len(in.Buffers)) {
				k++
			}
		}
		return k
	}
	if b, p := long(families.Banded(1000, 7)), long(families.Perfect(1000, 7)); b < 800 || p > 100 {
		t.Errorf("1,000 pieces living over more than a tenth of the box: banded %d, perfect %d", b, p)
	}
}

// boxTicks is how many ticks wide the box a tiling of family cuts n
// pieces from is.
func boxTicks(family string, n int) int64 {
	switch family {
	case "coarse":
		return int64(max(n/10, 1))
	case "dense":
		return int64(max(n/2, 1))
	}
	return int64(4 * n)
}

// checkTiling checks the instance tiling cuts into n pieces from the box.
func checkTiling(t *testing.T, family string, tiling func(int, uint64) *dsa.Instance, n int) {
	t.Helper()
	in := tiling(n, 7)
	if len(in.Buffers) != n {
		t.Fatalf("%s %d: %d buffers", family, n, len(in.Buffers))
	}
	p := in.Problem()
	lb, _ := pack.LowerBound(p.Buffers)
	if lb != families.PerfectHeight {
		t.Fatalf("%s %d: lower bound %d, want the box height %d", family, n, lb, families.PerfectHeight)
	}
	// Every tick of the box is full: the live bytes never dip.
	var area float64
	for _, b := range p.Buffers {
		area += float64(b.End-b.Start) * float64(b.Size)
	}
	if want := float64(boxTicks(family, n)) * families.PerfectHeight; area != want {
		t.Fatalf("%s %d: pieces cover %.0f byte-ticks, the box %.0f", family, n, area, want)
	}
	if again := tiling(n, 7); !reflect.DeepEqual(in, again) {
		t.Fatalf("%s %d: two runs with one seed differ", family, n)
	}
}

// TestHoledIsTight: a holed tiling is a perfect one with about one piece
// in 32 missing, never at the first tick, so the live bytes reach the
// box height there and nowhere pass it; the same seed gives the same
// instance.
func TestHoledIsTight(t *testing.T) {
	for _, n := range []int{1, 100, 1000, 5000} {
		in := families.Holed(n, 7)
		p := in.Problem()
		if len(p.Buffers) > n || n >= 1000 && (len(p.Buffers) > n-n/64 || len(p.Buffers) < n-n/16) {
			t.Fatalf("holed %d: %d buffers, want about 31/32 of them", n, len(p.Buffers))
		}
		lb, _ := pack.LowerBound(p.Buffers)
		if lb != families.PerfectHeight {
			t.Fatalf("holed %d: lower bound %d, want the box height %d", n, lb, families.PerfectHeight)
		}
		var first uint64
		for _, b := range p.Buffers {
			if b.Start == 0 {
				first += b.Size
			}
		}
		if first != families.PerfectHeight {
			t.Fatalf("holed %d: %d bytes live at the first tick, want the box height", n, first)
		}
		if again := families.Holed(n, 7); !reflect.DeepEqual(in, again) {
			t.Fatalf("holed %d: two runs with one seed differ", n)
		}
	}
}

// TestPinwheelHasPinwheels: the pinwheel family holds pinwheels of both
// hands, five pieces whose sections and sizes fit only so, which the
// perfect family's guillotine cuts never make.
func TestPinwheelHasPinwheels(t *testing.T) {
	for _, c := range []struct {
		in   *dsa.Instance
		want bool
	}{{families.Pinwheel(1000, 7), true}, {families.Perfect(1000, 7), false}} {
		right, left := pinwheels(c.in)
		if (right > 0 && left > 0) != c.want {
			t.Errorf("%s: %d pinwheels of one hand, %d of the other", c.in.Name, right, left)
		}
	}
}

// pinwheels counts the pinwheels of each hand among in's buffers: a
// middle E over [s, e); A from before s to e and B from e on, B as tall
// as A and E; C from s to where B ends and D from where A starts to s, D
// as tall as E and C (or the mirror in time).
func pinwheels(in *dsa.Instance) (right, left int) {
	starting, ending := map[int64][]dsa.Buffer{}, map[int64][]dsa.Buffer{}
	for _, x := range in.Buffers {
		starting[x.Lower] = append(starting[x.Lower], x)
		ending[x.Upper] = append(ending[x.Upper], x)
	}
	for _, e := range in.Buffers {
		// The right hand: A and E end together, B starts there; C
		// starts with E, D ends there.
		for _, a := range ending[e.Upper] {
			for _, b := range starting[e.Upper] {
				for _, c := range starting[e.Lower] {
					for _, d := range ending[e.Lower] {
						if a.Lower < e.Lower && b.Size == a.Size+e.Size && c.Upper == b.Upper && c.Upper > e.Upper && d.Lower == a.Lower && d.Size == e.Size+c.Size {
							right++
						}
					}
				}
			}
		}
		// The left hand: A and E start together, B ends there; C ends
		// with E, D starts there.
		for _, a := range starting[e.Lower] {
			for _, b := range ending[e.Lower] {
				for _, c := range ending[e.Upper] {
					for _, d := range starting[e.Upper] {
						if a.Upper > e.Upper && b.Size == a.Size+e.Size && c.Lower == b.Lower && c.Lower < e.Lower && d.Upper == a.Upper && d.Size == e.Size+c.Size {
							left++
						}
					}
				}
			}
		}
	}
	return right, left
}

func TestGenerateRejects(t *testing.T) {
	for _, s := range []families.Spec{{Family: "perfect", Size: 0}, {Family: "sliced", Size: 0}, {Family: "pinwheel", Size: 0}, {Family: "banded", Size: 0}, {Family: "dense", Size: 0}, {Family: "coarse", Size: 0}, {Family: "transformer", Size: 97}, {Family: "mixed", Size: 3}, {Family: "nope", Size: 10}} {
		if _, err := families.Generate(s); err == nil {
			t.Errorf("%v: no error", s)
		}
	}
}

// TestSelect: with no sizes or seeds Select is the suite with the named
// families alone, in the suite's order whatever the names' order; with
// them, every family at each size in its range and every seed, sizes
// first; a size no selected family takes, a named family that takes none
// of the sizes, unknown families and too many instances are turned down,
// naming them.
func TestSelect(t *testing.T) {
	all, err := families.Select(nil, nil, nil)
	if err != nil || !reflect.DeepEqual(all, families.Suite(0)) {
		t.Fatalf("Select(nil, nil, nil): %d specs, err %v; Suite(0) has %d", len(all), err, len(families.Suite(0)))
	}
	two, err := families.Select([]string{"mixed", "coarse"}, nil, nil)
	if err != nil || len(two) != 16 || two[0].String() != "coarse-100-s0" || two[15].String() != "mixed-20000-s1" {
		t.Fatalf("coarse and mixed: %v, %v", two, err)
	}
	held, err := families.Select([]string{"transformer", "holed"}, []int{3, 7}, []uint64{10, 11, 12})
	var names []string
	for _, s := range held {
		names = append(names, s.String())
	}
	want := "holed-3-s10 holed-3-s11 holed-3-s12 holed-7-s10 holed-7-s11 holed-7-s12 transformer-3-s10 transformer-3-s11 transformer-3-s12 transformer-7-s10 transformer-7-s11 transformer-7-s12"
	if err != nil || strings.Join(names, " ") != want {
		t.Fatalf("held out: %v, %v", names, err)
	}
	seeds, err := families.Select([]string{"transformer"}, nil, []uint64{9})
	if err != nil || len(seeds) != 6 || seeds[5].String() != "transformer-96-s9" {
		t.Fatalf("transformer seed 9 at the suite's sizes: %v, %v", seeds, err)
	}
	// A size goes to the families that take it: with every family, 5
	// leaves mixed out and 100 transformers; named, sliced takes 200 and
	// 24, the transformer 24 alone.
	var at5 []string
	all5, err := families.Select(nil, []int{5}, []uint64{0})
	for _, s := range all5 {
		at5 = append(at5, s.String())
	}
	if err != nil || len(all5) != 9 || at5[8] != "transformer-5-s0" || slices.Contains(at5, "mixed-5-s0") {
		t.Fatalf("every family at 5: %v, %v", at5, err)
	}
	all100, err := families.Select(nil, []int{100}, []uint64{0})
	if err != nil || len(all100) != 9 || all100[8].String() != "mixed-100-s0" {
		t.Fatalf("every family at 100: %v, %v", all100, err)
	}
	mixedSizes, err := families.Select([]string{"transformer", "sliced"}, []int{200, 24}, []uint64{0})
	if err != nil || fmt.Sprint(mixedSizes) != "[sliced-200-s0 sliced-24-s0 transformer-24-s0]" {
		t.Fatalf("sliced and transformer at 200 and 24: %v, %v", mixedSizes, err)
	}
	many := make([]uint64, families.MaxSelected/2+1)
	for _, c := range []struct {
		names []string
		sizes []int
		seeds []uint64
		want  string
	}{
		{[]string{"nope"}, nil, nil, `unknown family "nope"`},
		{[]string{"transformer"}, []int{97}, nil, "transformer takes 1 to 96 layers, not 97"},
		{[]string{"mixed"}, []int{9}, nil, "mixed takes 10 to 65536 buffers, not 9"},
		{[]string{"coarse"}, []int{0}, nil, "coarse takes 1 to 65536 buffers, not 0"},
		{[]string{"perfect"}, []int{families.MaxBuffers + 1}, nil, "perfect takes 1 to 65536 buffers, not 65537"},
		{[]string{"coarse", "transformer"}, []int{24, 0}, nil, "coarse takes 1 to 65536 buffers; transformer takes 1 to 96 layers, not 0"},
		{[]string{"coarse", "transformer"}, []int{100, 200}, nil, "transformer takes 1 to 96 layers, none of 100, 200"},
		{nil, []int{70000}, nil, "perfect, halving, sliced, pinwheel, banded, dense, coarse, holed take 1 to 65536 buffers; transformer takes 1 to 96 layers; mixed takes 10 to 65536 buffers, not 70000"},
		{[]string{"perfect"}, []int{1, 2}, many, "too many instances: more than 100000 selected (perfect adds 2 sizes × 50001 seeds to 0)"},
		{[]string{"coarse", "perfect"}, []int{1}, many, "too many instances: more than 100000 selected (coarse adds 1 size × 50001 seeds to 50001)"},
	} {
		_, err := families.Select(c.names, c.sizes, c.seeds)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Select(%v, %v, %d seeds): %v, want %q", c.names, c.sizes, len(c.seeds), err, c.want)
		}
		if want := map[bool]error{true: families.ErrFamily, false: families.ErrSize}[strings.Contains(c.want, "unknown")]; !strings.Contains(c.want, "too many") && !errors.Is(err, want) {
			t.Errorf("Select(%v, %v): %v is not %v", c.names, c.sizes, err, want)
		}
	}
}

// TestPackedNeverLosesToGreedy is the guarantee over every family
// instance of up to 5,000 buffers, at both efforts: a valid placement no
// higher than GreedySize's. The exact effort runs under a small budget
// here; the guarantee does not depend on it.
func TestPackedNeverLosesToGreedy(t *testing.T) {
	for _, spec := range families.Suite(5000) {
		in, err := families.Generate(spec)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Buffers) > 5000 {
			continue
		}
		t.Run(in.Name, func(t *testing.T) {
			p := in.Problem()
			g, err := pack.GreedySize(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range []pack.Options{{Effort: pack.Fast}, {Effort: pack.Exact, Budget: 1 << 22}} {
				r, err := pack.Pack(p, o)
				if err != nil {
					t.Fatal(err)
				}
				peak, err := pack.Check(p, r.Offsets)
				if err != nil {
					t.Fatalf("%s: %v", o.Effort, err)
				}
				if peak != r.Peak || r.Peak > g.Peak || r.Peak < r.LowerBound {
					t.Fatalf("%s: peak %d (checked %d), greedy-size %d, lower bound %d", o.Effort, r.Peak, peak, g.Peak, r.LowerBound)
				}
				if o.Budget > 0 && r.Work > o.Budget+int64(10*len(p.Buffers)) {
					t.Fatalf("%s: spent %d work on a budget of %d", o.Effort, r.Work, o.Budget)
				}
			}
		})
	}
}

func ExampleSuite() {
	for _, s := range families.Suite(300) {
		if s.Family != "transformer" {
			fmt.Println(s)
		}
	}
	// Output:
	// perfect-100-s0
	// perfect-100-s1
	// perfect-300-s0
	// perfect-300-s1
	// halving-100-s0
	// halving-100-s1
	// halving-300-s0
	// halving-300-s1
	// sliced-100-s0
	// sliced-100-s1
	// sliced-300-s0
	// sliced-300-s1
	// pinwheel-100-s0
	// pinwheel-100-s1
	// pinwheel-300-s0
	// pinwheel-300-s1
	// banded-100-s0
	// banded-100-s1
	// banded-300-s0
	// banded-300-s1
	// dense-100-s0
	// dense-100-s1
	// dense-300-s0
	// dense-300-s1
	// coarse-100-s0
	// coarse-100-s1
	// coarse-300-s0
	// coarse-300-s1
	// holed-100-s0
	// holed-100-s1
	// holed-300-s0
	// holed-300-s1
	// mixed-300-s0
	// mixed-300-s1
}

// TestTransformerStep: every buffer is a valid interval with bytes and
// its own id, a seed gives the same instance twice, seeds 2 and 3 mod 4
// accumulate over a second micro-batch (its copies are there, and
// buffers without a copy, the parameters' gradients, live through all of
// it), and the largest instances pass 20,000 buffers, as the SOMAS
// graphs of multi-billion-parameter transformers do.
func TestTransformerStep(t *testing.T) {
	for _, c := range []struct {
		layers int
		seed   uint64
	}{{1, 0}, {1, 1}, {4, 2}, {4, 3}, {96, 3}} {
		in, err := families.Transformer(c.layers, c.seed)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		var second int
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64) // the second micro-batch
		for _, b := range in.Buffers {
			if b.Lower >= b.Upper || b.Size == 0 || ids[b.ID] {
				t.Fatalf("%s: buffer %+v is empty or repeated", in.Name, b)
			}
			ids[b.ID] = true
			if strings.HasSuffix(b.ID, "/1") {
				second++
				lo, hi = min(lo, b.Lower), max(hi, b.Upper)
			}
		}
		accumulated := 0
		for _, b := range in.Buffers {
			if !strings.HasSuffix(b.ID, "/1") && !ids[b.ID+"/1"] && b.Lower < lo && b.Upper > hi {
				accumulated++
			}
		}
		if two := c.seed/2%2 == 1; two && (second == 0 || accumulated == 0) || !two && second > 0 {
			t.Errorf("%s: %d buffers of a second micro-batch, %d living through it", in.Name, second, accumulated)
		}
		if again, _ := families.Transformer(c.layers, c.seed); !reflect.DeepEqual(in, again) {
			t.Errorf("%s: two runs with one seed differ", in.Name)
		}
		if c.layers == 96 && len(in.Buffers) <= 20000 {
			t.Errorf("%s: %d buffers", in.Name, len(in.Buffers))
		}
	}
}

// TestPlanSameWithSpawn: a plan whose packing runs blocks (sliced 2,000
// seed 0 ends above its lower bound at the fast effort) has the same
// hash whether the planner is lent goroutines or not.
func TestPlanSameWithSpawn(t *testing.T) {
	in := families.Sliced(2000, 0)
	g, err := ir.Compile(in.Model())
	if err != nil {
		t.Fatal(err)
	}
	var hashes [2]ir.Hash
	for j, spawn := range []func(func()){nil, func(f func()) { go f() }} {
		opts := in.Options(g)
		opts.Spawn = spawn
		p, err := planner.PlanMemory(g, opts)
		if err != nil {
			t.Fatal(err)
		}
		if p.Metrics.PeakBytes <= p.Metrics.LowerBoundBytes {
			t.Fatalf("peak %d at the lower bound: blocks did not run; pick an instance fast leaves above it", p.Metrics.PeakBytes)
		}
		hashes[j] = p.PlanHash
	}
	if hashes[0] != hashes[1] {
		t.Errorf("plan hash %x alone, %x with goroutines", hashes[0], hashes[1])
	}
}
