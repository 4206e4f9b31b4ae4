package planner

import (
	"fmt"
	"testing"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
)

func gpt2Train(b *testing.B, layers uint64) *ir.Model {
	c := models.DefaultGPT2Config()
	c.Layers, c.Train = layers, true
	m, err := models.GPT2(c)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func synthetic(b *testing.B, n uint64) *ir.Model {
	c := models.DefaultSyntheticConfig()
	c.Tensors = n
	m, err := models.Synthetic(c)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func benchPlan(b *testing.B, m *ir.Model, st Strategy) {
	g, err := ir.Compile(m)
	if err != nil {
		b.Fatal(err)
	}
	opts := DefaultOptions(g)
	opts.Strategy = st
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PlanMemory(g, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(g.Tensors)), "ns/tensor")
}

func benchCompile(b *testing.B, m *ir.Model) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ir.Compile(m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(m.Tensors)), "ns/tensor")
}

// BenchmarkPlan measures PlanMemory (liveness, placement, metrics and plan
// hash) on a compiled graph, with the slots and the packed strategy: GPT-2
// small train_full (994 tensors), a 6-layer GPT-2 train_full (about 500
// tensors) and synthetic graphs of 10^3 to 10^6 tensors, whose ns/tensor
// shows the growth with N.
func BenchmarkPlan(b *testing.B) {
	for _, st := range []Strategy{Slots, Packed} {
		b.Run(string(st)+"/gpt2-small-train", func(b *testing.B) { benchPlan(b, gpt2Train(b, 12), st) })
		b.Run(string(st)+"/gpt2-6layer-train", func(b *testing.B) { benchPlan(b, gpt2Train(b, 6), st) })
		for _, n := range []uint64{1_000, 10_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%s/synthetic-%d", st, n), func(b *testing.B) { benchPlan(b, synthetic(b, n), st) })
		}
	}
}

// BenchmarkCompile measures ir.Compile: validation, indexing, ir_hash and
// execution_order_hash.
func BenchmarkCompile(b *testing.B) {
	b.Run("gpt2-small-train", func(b *testing.B) { benchCompile(b, gpt2Train(b, 12)) })
	b.Run("gpt2-6layer-train", func(b *testing.B) { benchCompile(b, gpt2Train(b, 6)) })
	for _, n := range []uint64{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("synthetic-%d", n), func(b *testing.B) { benchCompile(b, synthetic(b, n)) })
	}
}

// BenchmarkVerify measures the independent verifier on GPT-2 small.
func BenchmarkVerify(b *testing.B) {
	g, err := ir.Compile(gpt2Train(b, 12))
	if err != nil {
		b.Fatal(err)
	}
	p, err := PlanMemory(g, DefaultOptions(g))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := Verify(g, p); err != nil {
			b.Fatal(err)
		}
	}
}
