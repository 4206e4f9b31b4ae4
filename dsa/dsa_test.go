package dsa_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tmmu/tmmu/dsa"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/planner/pack"
)

func load(t testing.TB, path string) *dsa.Instance {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	in, err := dsa.ParseBytes(filepath.Base(path), data)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestSuitePlansVerify plans every instance of the committed suite with
// every strategy through the IR and checks each plan with the planner's
// independent verifier; the activations arena's lower bound is the
// instance's.
func TestSuitePlansVerify(t *testing.T) {
	files, _ := filepath.Glob("../bench/dsa/*.csv")
	if len(files) == 0 {
		t.Fatal("no instances in ../bench/dsa")
	}
	for _, f := range files {
		in := load(t, f)
		lb, _ := pack.LowerBound(in.Problem().Buffers)
		for _, st := range planner.Strategies {
			if testing.Short() && strings.Contains(f, "S_1") {
				continue
			}
			start := time.Now()
			p, g, err := in.Plan(st, pack.Fast)
			if err != nil {
				t.Fatalf("%s %s: %v", in.Name, st, err)
			}
			el := time.Since(start)
			if err := planner.Verify(g, p); err != nil {
				t.Fatalf("%s %s: %v", in.Name, st, err)
			}
			a := p.Arenas[0]
			if len(p.Arenas) != 1 || a.LowerBoundBytes != lb || a.Storages != len(in.Buffers) {
				t.Fatalf("%s %s: arenas %d, lower bound %d (instance %d), storages %d (buffers %d)", in.Name, st, len(p.Arenas), a.LowerBoundBytes, lb, a.Storages, len(in.Buffers))
			}
			t.Logf("%-20s %-12s peak %d  %+.2f%%  %v", in.Name, st, a.PeakBytes, 100*(float64(a.PeakBytes)/float64(lb)-1), el)
		}
	}
}
