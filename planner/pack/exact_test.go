package pack_test

import (
	"testing"

	"github.com/tmmu/tmmu/bench/families"
	"github.com/tmmu/tmmu/planner/pack"
)

// TestExactNoWorseThanFast: the exact effort starts with the fast one, so
// with a budget that leaves fast its own (at least twice fast's) it ends
// no higher, on perfect packings fast leaves above their lower bound.
func TestExactNoWorseThanFast(t *testing.T) {
	for _, c := range []struct {
		n    int
		seed uint64
	}{{5000, 15}, {5000, 35}} {
		p := families.Perfect(c.n, c.seed).Problem()
		fast, err := pack.Pack(p, pack.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if fast.Optimal {
			t.Fatalf("perfect %d seed %d: fast reached the lower bound; pick a seed it does not", c.n, c.seed)
		}
		exact, err := pack.Pack(p, pack.Options{Effort: pack.Exact, Budget: 1 << 29})
		if err != nil {
			t.Fatal(err)
		}
		if exact.Peak > fast.Peak || exact.Work > exact.Budget+int64(10*c.n) {
			t.Errorf("perfect %d seed %d: exact peaks at %d after %d of %d work, fast at %d", c.n, c.seed, exact.Peak, exact.Work, exact.Budget, fast.Peak)
		}
	}
}
