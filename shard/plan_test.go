package shard

import (
	"testing"

	"github.com/tmmu/tmmu/planner"
)

// TestPlanViewIsPlanRank: planning a kept view gives PlanRank's plan, for
// every strategy.
func TestPlanViewIsPlanRank(t *testing.T) {
	m := tinyGPT2(64)
	spec, err := Decode([]byte(`{"world_size": 4, "data_parallel": {"zero_stage": 3}}`))
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := spec.Resolve()
	v, err := RankView(m, rs, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []planner.Strategy{planner.Slots, planner.Packed, planner.GreedySize} {
		want, err := PlanRank(m, spec, 2, planner.Options{Strategy: st})
		if err != nil {
			t.Fatal(err)
		}
		got, err := PlanView(v, spec, planner.Options{Strategy: st})
		if err != nil {
			t.Fatal(err)
		}
		if got.Plan.PlanHash != want.Plan.PlanHash || got.View != v {
			t.Errorf("%s: PlanView %s, PlanRank %s", st, got.Plan.PlanHash.Short(), want.Plan.PlanHash.Short())
		}
	}
}
