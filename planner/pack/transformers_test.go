package pack_test

import (
	"testing"

	"github.com/tmmu/tmmu/bench/families"
	"github.com/tmmu/tmmu/planner/pack"
)

// TestFastOnTransformers: training steps of transformers that the bench's
// suite does not hold (its seeds are 0 to 3) are packed within +0.5 % of
// the lower bound by the fast effort, the bar for real graphs. The
// canonical search used to run there only on up to 1,024 buffers whose
// peak was more than 1 % above the bound and whose overlapping pairs fit
// in 2^20; these ended +0.51 to +1.65 % above it (in the generator's
// order: 1 layer seed 81 at 147 buffers and 4 layers seed 26 at 716
// below the 1 %, 8 layers seed 26 +1.65 % at 1,363 buffers, 24 layers
// seed 26 with more pairs than 2^20), and each is at it now, most after
// one dive of the search.
func TestFastOnTransformers(t *testing.T) {
	for _, c := range []struct {
		layers int
		seed   uint64
	}{{1, 81}, {4, 26}, {8, 26}, {8, 86}, {12, 26}, {16, 4}, {16, 54}, {24, 26}, {32, 36}} {
		in, err := families.Transformer(c.layers, c.seed)
		if err != nil {
			t.Fatal(err)
		}
		fastWithin(t, in, 0.005)
	}
}

// TestFastOnMixed: mixed training steps the bench's suite does not hold
// (other sizes and seeds), where the fast effort ends within 1 % of the
// lower bound with more overlapping pairs than it searches, so that
// neither blocks nor the search runs and most of the budget is left:
// the portfolio members its budget cut then run, and reach the bound.
// Before, only the two mandatory members ran there, and these ended
// +0.65 % (5,000 buffers, seed 2) and +0.46 % (10,000, seed 6) above it
// (in the generator's order, as here, and through the planner).
func TestFastOnMixed(t *testing.T) {
	fastWithin(t, families.Mixed(5000, 2), 0.00001)
	fastWithin(t, families.Mixed(10000, 6), 0.00001)
}

// TestExactLeavesTheCutMembersToItsSteps: the fast run the exact effort
// starts with does not run the members the portfolio budget cut (the
// exact steps' own portfolio runs them all), so the exact steps keep the
// work they had: mixed 2,000 seed 3 under a budget of 2^25 ends +0.113 %
// above the bound (best fit by area), where it ended +0.192 % once that
// fast run spent its half on them.
func TestExactLeavesTheCutMembersToItsSteps(t *testing.T) {
	in := families.Mixed(2000, 3)
	r, err := pack.Pack(in.Problem(), pack.Options{Effort: pack.Exact, Budget: 1 << 25})
	if err != nil {
		t.Fatal(err)
	}
	if g := float64(r.Peak)/float64(r.LowerBound) - 1; g > 0.00114 {
		t.Errorf("%s at the exact effort, budget 2^25: %.3f %% over the lower bound (%s), want at most 0.114 %%", in.Name, 100*g, r.Method)
	}
}
