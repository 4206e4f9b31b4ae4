// Package plantest compiles, plans and verifies graphs for tests.
package plantest

import (
	"testing"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// Verified compiles m, plans it with the default options and checks the
// plan with the verifier, failing t at the first error.
func Verified(t testing.TB, m *ir.Model) (*ir.Graph, *planner.Plan) {
	t.Helper()
	g, err := ir.Compile(m)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	p, err := planner.PlanMemory(g, planner.DefaultOptions(g))
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if err := planner.Verify(g, p); err != nil {
		t.Fatalf("verify: %v", err)
	}
	return g, p
}
