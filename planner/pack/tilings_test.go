package pack_test

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/bench/families"
	"github.com/tmmu/tmmu/dsa"
	"github.com/tmmu/tmmu/planner/pack"
)

// TestBlocksFindTilings: perfect packings that the bench's suite does not
// hold (other seeds of its generator) are packed at or near their lower
// bound by the fast effort. Blocks merging in one order, with a repair
// pass, ended +9.00 % and +8.15 % above it on seeds 6 and 22 of 5,000
// buffers, and above +5 % on 6 of seeds 0 to 39; seeds 43 and 114 ended
// +1.20 % and +1.54 % above it before refine took guessed chains apart;
// seeds 107 and 114 of 10,000, +12.87 % and +6.27 % before the blocker
// chained before it stacked; seeds 2 and 5 of 20,000, +0.77 % and +7.59 %
// before stacks left out a block that spoils their sum.
func TestBlocksFindTilings(t *testing.T) {
	gap := func(n int, seed uint64) (float64, string) { return fastGap(t, families.Perfect(n, seed)) }
	for _, c := range []struct {
		n    int
		seed uint64
	}{{300, 5}, {1000, 2}, {1000, 7}, {2000, 4}, {2000, 6}, {5000, 22}, {5000, 43}, {5000, 114}, {10000, 107}, {10000, 114}, {20000, 2}, {20000, 5}} {
		if g, method := gap(c.n, c.seed); g != 0 {
			t.Errorf("perfect %d seed %d: %.2f %% over the lower bound (%s)", c.n, c.seed, 100*g, method)
		}
	}
	// 5,000 buffers, seeds 0 to 15: all at the bound. Before refine took
	// the stacks apart and merged the rest again, 12 were, and seed 13
	// ended +2.79 % above it; before its rounds shared its work, 15.
	at := 0
	for seed := range uint64(16) {
		g, method := gap(5000, seed)
		if g > 0.005 {
			t.Errorf("perfect 5000 seed %d: %.2f %% over the lower bound (%s)", seed, 100*g, method)
		}
		if g == 0 {
			at++
		}
	}
	if at < 16 {
		t.Errorf("perfect 5000 seeds 0 to 15: %d at the lower bound, want 16", at)
	}
}

// TestBlocksFindPinwheels: perfect packings cut into pinwheels as well
// as in time and bytes (family pinwheel, seeds the suite does not hold)
// are packed at their lower bound by the fast effort; stacks and chains
// alone cannot rebuild a pinwheel, and before the blocker made them
// these ended +23.14 to +34.98 % above it.
func TestBlocksFindPinwheels(t *testing.T) {
	for _, c := range []struct {
		n     int
		seeds []uint64
	}{{1000, []uint64{2, 3, 4, 5, 6, 7}}, {5000, []uint64{2, 3, 4, 5}}} {
		for _, seed := range c.seeds {
			if g, method := fastGap(t, families.Pinwheel(c.n, seed)); g != 0 {
				t.Errorf("pinwheel %d seed %d: %.2f %% over the lower bound (%s)", c.n, seed, 100*g, method)
			}
		}
	}
}

// TestBlocksFindBandedTilings: perfect packings with nine cuts in ten
// in bytes (family banded, seeds the suite does not hold) are packed at
// their lower bound by the fast effort. There the blocker reads long
// lists, and the first order spent more than its probe: it stopped with
// most buffers unmerged and blocks gave up, ending these +9.30, +6.62
// and +6.99 % above the bound (before orders took their number from
// what the first one spent).
func TestBlocksFindBandedTilings(t *testing.T) {
	for _, seed := range []uint64{3, 6, 7} {
		if g, method := fastGap(t, families.Banded(5000, seed)); g != 0 {
			t.Errorf("banded 5000 seed %d: %.2f %% over the lower bound (%s)", seed, 100*g, method)
		}
	}
}

// TestBlocksFindHoledTilings: perfect packings with pieces missing
// (family holed, seeds the suite does not hold) are packed at their lower
// bound, which is their optimum, by the fast effort: the blocker takes the
// holes it finds as buffers of their own. Before it did, these ended
// +2.29 to +21.93 % above it (1,000 buffers, seeds 2 and 3: +3.74 and
// +2.29 %; 2,000, seeds 2 to 5: +13.27, +7.71, +14.62 and +13.56 %;
// 5,000, seeds 2, 4, 5 and 7: +20.01, +18.61, +20.23 and +21.93 %, and,
// with exact holes but no relays, +10.24, +0.00, +2.36 and +9.74 %).
// Seeds 18, 28, 29 and 31 of 5,000 ended +9.83, +9.96, +5.41 and +7.79 %
// while blocks of holes alone were packed and before peels; seeds 19, 20
// and 23, +5.77, +5.53 and +7.57 % before holes were cut again where the
// buffers around them say so.
func TestBlocksFindHoledTilings(t *testing.T) {
	for _, c := range []struct {
		n     int
		seeds []uint64
	}{{1000, []uint64{2, 3}}, {2000, []uint64{2, 3, 4, 5}}, {5000, []uint64{2, 4, 5, 7, 18, 19, 20, 23, 28, 29, 31}}} {
		for _, seed := range c.seeds {
			if g, method := fastGap(t, families.Holed(c.n, seed)); g != 0 {
				t.Errorf("holed %d seed %d: %.2f %% over the lower bound (%s)", c.n, seed, 100*g, method)
			}
		}
	}
}

// TestExactNoWorseThanFast: the exact effort starts with the fast one, so
// with a budget that leaves fast its own (at least twice fast's) it ends
// no higher, on instances fast leaves above their lower bound (fast
// reaches it on every perfect packing of 5,000 buffers tried, of 10,000
// in seeds 100 to 115, of 20,000 in seeds 0 to 7, and on halving ones
// of 5,000 in seeds 0 to 5).
func TestExactNoWorseThanFast(t *testing.T) {
	for _, c := range []struct {
		name string
		p    *pack.Problem
	}{
		{"sliced 2000 seed 0", families.Sliced(2000, 0).Problem()},
		{"mixed 2000 seed 1", families.Mixed(2000, 1).Problem()},
	} {
		fast, err := pack.Pack(c.p, pack.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if fast.Optimal {
			t.Fatalf("%s: fast reached the lower bound; pick an instance it does not", c.name)
		}
		exact, err := pack.Pack(c.p, pack.Options{Effort: pack.Exact, Budget: 1 << 29})
		if err != nil {
			t.Fatal(err)
		}
		if exact.Peak > fast.Peak || exact.Work > exact.Budget+int64(10*len(c.p.Buffers)) {
			t.Errorf("%s: exact peaks at %d after %d of %d work, fast at %d", c.name, exact.Peak, exact.Work, exact.Budget, fast.Peak)
		}
	}
}

// TestBlocksOnHalving: on tilings whose cuts in bytes halve their piece,
// pieces of one size meet in time by chance everywhere. Each guess used
// to make the blocker meet every block again; on 5,000 buffers that spent
// every order's share before any packing of its blocks, so blocks placed
// nothing and the fast effort ended +16.0 to +21.1 % above the lower
// bound (seeds 0 to 2). Meeting again only the blocks the guess touched
// left blocks their packings (+9.4 to +13.3 %); chaining, among
// several candidates, the pair whose chain stacks at once leaves few
// guesses to go astray: now all three at the bound (the test allows
// +2 %).
func TestBlocksOnHalving(t *testing.T) {
	for seed := range uint64(3) {
		if g, method := fastGap(t, families.Halving(5000, seed)); !strings.HasPrefix(method, "blocks") || g > 0.02 {
			t.Errorf("halving 5000 seed %d: %.2f %% over the lower bound (%s)", seed, 100*g, method)
		}
	}
}

// TestBlocksOnSliced: on tilings cut into slivers (family sliced, seed 7
// of 5,000 buffers, not in the suite), blocks' packings used to reserve
// their greedy members' cost ahead at the whole instance's cost per
// buffer, several times what it was, so that most orders packed nothing
// and the fast effort ended +17.80 % above the lower bound; packings that
// count that cost as it comes ended +12.84 %, stacks of three or more
// that leave out a block spoiling their sum +7.70 %, and with pairs
// trimmed too +2.09 %. Seed 0 ended +5.64 % while trim only left out one
// block; keeping the fewest blocks whose sum a neighbour has, +1.77 %.
func TestBlocksOnSliced(t *testing.T) {
	gapsWithin(t, families.Sliced, []gapCase{{5000, 7, 0.05}, {5000, 0, 0.03}})
}

// TestBlocksOnCoarse: on tilings with about ten pieces to a tick (family
// coarse, seeds the suite does not hold), a quarter or more of the stacks
// the first order makes are of three blocks or more that no neighbour's
// size confirms, and wary orders, which refuse those, run too. Coarse
// 500, seeds 0 to 2, ended +5.80, +4.55 and +2.70 % above the lower
// bound without them, and now are at it; coarse 1,000 seeds 10 and 12,
// +10.13 and +10.08 %, now within +5 %. Seed 3 of 1,000 ended +9.22 %
// before blocks ran again where they left the peak more than 5 % above
// the bound, now +0.07 %.
func TestBlocksOnCoarse(t *testing.T) {
	gapsWithin(t, families.Coarse, []gapCase{{500, 0, 0}, {500, 1, 0}, {500, 2, 0}, {1000, 10, 0.05}, {1000, 12, 0.05}, {1000, 3, 0.01}})
}

// TestBlocksOnDense: on tilings with about two pieces to a tick (family
// dense, seeds the suite does not hold), the orders confirming chains
// first spend nearly a probe on merging alone; before they were given
// half as much again as the second order spent, a third of them packed
// nothing on seed 9, and seeds 9 and 12 of 5,000 buffers ended +14.89
// and +17.82 % above the lower bound, now +0.91 % and at it. Seed 3
// ended +11.51 % before blocks ran again where they left the peak more
// than 5 % above the bound, now +4.40 %.
func TestBlocksOnDense(t *testing.T) {
	gapsWithin(t, families.Dense, []gapCase{{5000, 9, 0.01}, {5000, 12, 0}, {5000, 3, 0.05}})
}

// TestRelaxOnFarTilings: where blocks leave a tiling more than 5 % above
// its lower bound (seeds the suite does not hold), the overlap search
// lowers it: coarse 2,000 seed 0 ended +14.72 % above the bound before
// it, now within +10 %; dense 5,000 seed 10 +6.63 %, now within +5 %;
// holed 5,000 seed 24 +11.40 %, now within +6 %. Coarse 3,000 seed 104
// ended +11.46 % while each sweep sorted its corners, now within
// +10.5 %.
func TestRelaxOnFarTilings(t *testing.T) {
	fastWithin(t, families.Coarse(2000, 0), 0.10)
	fastWithin(t, families.Dense(5000, 10), 0.05)
	fastWithin(t, families.Holed(5000, 24), 0.06)
	fastWithin(t, families.Coarse(3000, 104), 0.105)
}

// gapCase is a tiling of n buffers cut with seed that the fast effort
// must pack at most a fraction most above its lower bound.
type gapCase struct {
	n    int
	seed uint64
	most float64
}

// gapsWithin checks each case of the tilings tiling cuts.
func gapsWithin(t *testing.T, tiling func(int, uint64) *dsa.Instance, cases []gapCase) {
	t.Helper()
	for _, c := range cases {
		fastWithin(t, tiling(c.n, c.seed), c.most)
	}
}

// fastGap returns how far above the lower bound the fast effort ends on
// in, as a fraction of it, and the method that placed it.
func fastGap(t *testing.T, in *dsa.Instance) (float64, string) {
	t.Helper()
	r, err := pack.Pack(in.Problem(), pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return float64(r.Peak)/float64(r.LowerBound) - 1, r.Method
}

// fastWithin fails t unless the fast effort packs in within most (a
// fraction) of its lower bound.
func fastWithin(t *testing.T, in *dsa.Instance, most float64) {
	t.Helper()
	if g, method := fastGap(t, in); g > most {
		t.Errorf("%s (%d buffers): %.3f %% over the lower bound (%s), want at most %.3f %%", in.Name, len(in.Buffers), 100*g, method, 100*most)
	}
}

// TestSameWithSpawn: with a spawner blocks runs its orders ahead on
// another core and refines its best trials two at a time, skyline
// restarts run two at a time, and what will be thrown away is halted, yet
// the placement, the work and the nodes are the same as without one, at
// both efforts, on one core or several (sliced 2,000 seed 0 and pinwheel
// 2,000 seed 18: fast ends above the lower bound, so every step runs; on
// the second every order looks for pinwheels; on holed 5,000 seed 6 half
// the orders take holes; on coarse 2,000 seed 0 the first order's blocker
// spends so much that 40 orders run where 64 would; on dense 5,000 seed
// 9 the second order's blocker runs before the others, and the odd
// orders may spend more than the even ones).
func TestSameWithSpawn(t *testing.T) {
	for _, in := range []*dsa.Instance{families.Sliced(2000, 0), families.Pinwheel(2000, 18), families.Holed(5000, 6), families.Coarse(2000, 0), families.Dense(5000, 9)} {
		sameWithSpawn(t, in.Name, in.Problem())
	}
}

func sameWithSpawn(t *testing.T, name string, p *pack.Problem) {
	spawn := func(f func()) { go f() }
	for _, o := range []pack.Options{{}, {Effort: pack.Exact, Budget: 1 << 28}} {
		alone, err := pack.Pack(p, o)
		if err != nil {
			t.Fatal(err)
		}
		if o.Effort == "" && alone.Optimal {
			t.Fatalf("%s: fast reached the lower bound; pick an instance it does not", name)
		}
		for _, procs := range []int{1, 4} {
			prev := runtime.GOMAXPROCS(procs)
			o.Spawn = spawn
			r, err := pack.Pack(p, o)
			o.Spawn = nil
			runtime.GOMAXPROCS(prev)
			if err != nil {
				t.Fatal(err)
			}
			if r.Peak != alone.Peak || r.Work != alone.Work || r.Nodes != alone.Nodes || r.Method != alone.Method || !slices.Equal(r.Offsets, alone.Offsets) {
				t.Errorf("%s, effort %q: alone, peak %d after %d work and %d nodes (%s); spawning on %d cores, %d after %d and %d (%s); offsets equal: %v",
					name, o.Effort, alone.Peak, alone.Work, alone.Nodes, alone.Method, procs, r.Peak, r.Work, r.Nodes, r.Method, slices.Equal(r.Offsets, alone.Offsets))
			}
		}
	}
}
