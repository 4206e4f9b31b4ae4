package planner

import (
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
		m, err := ir.Decode(data)
		if err != nil {
			return
		}
		g, err := ir.Compile(m)
		if err != nil {
			return
		}
		for _, mode := range Modes {
			opts := DefaultOptions(g)
			opts.Mode = mode
			p, err := PlanMemory(g, opts)
			if err != nil {
				continue
			}
			if err := Verify(g, p); err != nil {
				t.Fatalf("mode %s: plan does not verify: %v", mode, err)
			}
		}
	})
}
