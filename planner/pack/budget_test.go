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
