package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

var update = flag.Bool("update", false, "rewrite the corrupted plans in testdata/bad from chain.json")

// TestBadPlansUpToDate derives the two corrupted plans that TestBadInputs
// feeds to verify from testdata/bad/chain.json: collision.plan.json moves
// tensor b onto a while both are live and recomputes the plan hash, so only
// the collision is wrong; hash-mismatch.plan.json flips one bit of the hash.
// With -update it rewrites them; without, it checks they are current.
func TestBadPlansUpToDate(t *testing.T) {
	dir := filepath.Join("testdata", "bad")
	data, err := os.ReadFile(filepath.Join(dir, "chain.json"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	plan := func() *planner.Plan {
		p, err := planner.PlanMemory(g, planner.DefaultOptions(g))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	collision := plan()
	for i := range collision.Tensors {
		if collision.Tensors[i].ID == "b" {
			collision.Tensors[i].Offset = 0
		}
	}
	collision.PlanHash = collision.ComputeHash()
	mismatch := plan()
	mismatch.PlanHash[0] ^= 1
	for name, p := range map[string]*planner.Plan{"collision.plan.json": collision, "hash-mismatch.plan.json": mismatch} {
		want, err := json.MarshalIndent(p, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, '\n')
		path := filepath.Join(dir, name)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != string(want) {
			t.Errorf("%s is stale (go test ./cmd/tmmu -run BadPlans -update)", path)
		}
	}
}
