package pack_test

import (
	"os"
	"testing"

	"github.com/tmmu/tmmu/bench/families"
	"github.com/tmmu/tmmu/dsa"
	"github.com/tmmu/tmmu/planner/pack"
)

func problem(b *testing.B, name string) *pack.Problem {
	data, err := os.ReadFile("../../bench/dsa/" + name + ".csv")
	if err != nil {
		b.Fatal(err)
	}
	in, err := dsa.ParseBytes(name, data)
	if err != nil {
		b.Fatal(err)
	}
	return in.Problem()
}

// BenchmarkPack measures Pack at each effort on the committed instances
// (the whole portfolio and search, no IR): the real graphs at fast effort,
// the tight minimalloc ones at both. The peak's distance from the lower
// bound is reported as over_lb_%.
func BenchmarkPack(b *testing.B) {
	for _, c := range []struct {
		name   string
		effort pack.Effort
	}{
		{"iopddl-S_1", pack.Fast},
		{"iopddl-G_1", pack.Fast},
		{"somas-resnet50", pack.Fast},
		{"minimalloc-A", pack.Fast},
		{"minimalloc-A", pack.Exact},
		{"minimalloc-B", pack.Exact},
		{"minimalloc-C", pack.Exact},
		{"minimalloc-F", pack.Exact},
		{"minimalloc-D", pack.Exact},
		{"minimalloc-E", pack.Exact},
	} {
		b.Run(c.name+"/"+string(c.effort), func(b *testing.B) {
			p := problem(b, c.name)
			var r *pack.Result
			for b.Loop() {
				var err error
				if r, err = pack.Pack(p, pack.Options{Effort: c.effort}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(100*(float64(r.Peak)/float64(r.LowerBound)-1), "over_lb_%")
		})
	}
}

// BenchmarkGreedySize is the baseline on the largest instance.
func BenchmarkGreedySize(b *testing.B) {
	p := problem(b, "iopddl-S_1")
	for b.Loop() {
		if _, err := pack.GreedySize(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPackFarTilings measures the fast effort on tilings that blocks
// leave more than 5 % above the lower bound, where the overlap search
// runs (the suite's coarse 2,000 seed 0; held out, holed 5,000 seed 24).
func BenchmarkPackFarTilings(b *testing.B) {
	for _, in := range []*dsa.Instance{families.Coarse(2000, 0), families.Holed(5000, 24)} {
		b.Run(in.Name, func(b *testing.B) {
			p := in.Problem()
			var r *pack.Result
			for b.Loop() {
				var err error
				if r, err = pack.Pack(p, pack.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(100*(float64(r.Peak)/float64(r.LowerBound)-1), "over_lb_%")
		})
	}
}
