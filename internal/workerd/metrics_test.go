package workerd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
)

// The metrics wrapper keeps what the worker asks of an engine executor:
// its memory report (logged when a plan is applied), its state and its
// closing, and it counts the steps it measures.
func TestWrapperPassesTheExecutorThrough(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "gpt2-tiny-train.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ir.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	opts := planner.DefaultOptions(g)
	opts.Arenas = engine.ExecutableArenas(engine.NewCPU().Limits(), nil)
	p, err := planner.PlanMemory(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	mt := newMetrics()
	x, err := mt.wrap(engine.Factory(engine.FactoryOptions{Backend: "cpu"}))(g, p)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := x.(runner.MemoryReporter)
	if !ok {
		t.Fatal("the wrapped executor has no memory report")
	}
	if rep := r.MemoryReport(); !strings.Contains(rep, "exactly the plan's bytes") {
		t.Errorf("memory report %q", rep)
	}
	c, ok := x.(runner.StateCarrier)
	if !ok {
		t.Fatal("the wrapped executor carries no state")
	}
	if _, err := x.Step(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if h, err := c.StateHash(); err != nil || len(h) != 64 {
		t.Errorf("state hash %q, %v", h, err)
	}
	if n := stepsCounted(t, mt); n != 1 {
		t.Errorf("%v steps counted, want 1", n)
	}
	if err := x.(runner.Closer).Close(); err != nil {
		t.Fatal(err)
	}
}

// stepsCounted reads tmmu_worker_steps_total.
func stepsCounted(t *testing.T, m *metrics) float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "tmmu_worker_steps_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no tmmu_worker_steps_total")
	return 0
}
