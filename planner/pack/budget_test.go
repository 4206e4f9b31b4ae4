package pack_test

import (
	"testing"

	"github.com/tmmu/tmmu/bench/families"
	"github.com/tmmu/tmmu/planner/pack"
)

// TestBudgetKeepsNodes: a work budget does not lift an explicit node
// budget, at either effort.
func TestBudgetKeepsNodes(t *testing.T) {
	// A conflict leaves the skyline and blocks out, so that the canonical
	// search runs.
	p := families.Perfect(300, 1).Problem()
	p.Conflicts = [][2]int32{{0, 1}}
	for _, e := range pack.Efforts {
		r, err := pack.Pack(p, pack.Options{Effort: e, Nodes: 500, Budget: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if r.Nodes == 0 || r.Nodes > 2*500 {
			t.Fatalf("%s: %d canonical search nodes under a budget of 500", e, r.Nodes)
		}
	}
}

// TestBlocksAgainWithinBudget: where blocks leave the peak more than 5 %
// above the lower bound, the fast effort runs them again with three
// times its budget added, and says so in Result.Budget; a budget the
// caller sets is kept, and the work stays within it.
func TestBlocksAgainWithinBudget(t *testing.T) {
	p := families.Coarse(1000, 3).Problem()
	r, err := pack.Pack(p, pack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := pack.Pack(p, pack.Options{Budget: 1 << 27})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Budget != 1<<27 || plain.Work > plain.Budget+int64(10*len(p.Buffers)) {
		t.Errorf("budget 2^27: %d work of %d", plain.Work, plain.Budget)
	}
	if r.Budget < 3*plain.Budget || r.Work > r.Budget+int64(10*len(p.Buffers)) || r.Work <= plain.Budget {
		t.Errorf("fast: %d work of %d (plain: %d of %d): blocks did not run again", r.Work, r.Budget, plain.Work, plain.Budget)
	}
	if r.Peak >= plain.Peak {
		t.Errorf("fast peaks at %d, at %d without blocks again", r.Peak, plain.Peak)
	}
}
