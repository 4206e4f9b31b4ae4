package planner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/tmmu/tmmu/ir"
)

// FuzzPlan: any model that decodes and compiles plans without panicking in
// every mode, and every plan it gets passes the verifier.
func FuzzPlan(f *testing.F) {
	files, _ := filepath.Glob("testdata/cases/*.json")
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ir.Load(data)
		if err != nil {
			return
		}
		for _, mode := range Modes {
			for _, st := range Strategies {
				opts := DefaultOptions(g)
				opts.Mode, opts.Strategy = mode, st
				p, err := PlanMemory(g, opts)
				if err != nil {
					continue
				}
				if err := Verify(g, p); err != nil {
					t.Fatalf("mode %s, strategy %s: plan does not verify: %v", mode, st, err)
				}
			}
		}
	})
}

// FuzzVerifyPlan: the verifier rejects or accepts any plan file, however
// malformed, without panicking; only the planner's own plan is accepted
// unchanged.
func FuzzVerifyPlan(f *testing.F) {
	data, err := os.ReadFile("testdata/cases/views.json")
	if err != nil {
		f.Fatal(err)
	}
	g, err := ir.Load(data)
	if err != nil {
		f.Fatal(err)
	}
	p, err := PlanMemory(g, DefaultOptions(g))
	if err != nil {
		f.Fatal(err)
	}
	js, _ := json.Marshal(p)
	cb, _ := p.EncodeCBOR()
	f.Add(js)
	f.Add(cb)
	for _, file := range []string{"../cmd/tmmu/testdata/bad/collision.plan.json", "../cmd/tmmu/testdata/bad/hash-mismatch.plan.json"} {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q, err := DecodePlan(data)
		if err != nil {
			return
		}
		_ = Verify(g, q)
	})
}
