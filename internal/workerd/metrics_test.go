package workerd

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/worker"
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

// TestReadyzSaysWhatTheWorkerWaitsOn: a retried failure makes /readyz
// answer 503 with what is retried, since when, how often and the last
// error, and counts in the metrics; once it succeeds the worker is
// ready again.
func TestReadyzSaysWhatTheWorkerWaitsOn(t *testing.T) {
	mt := newMetrics()
	mt.running.Store(true)
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		mt.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("readyz %d %q before any wait", code, body)
	}
	var _ worker.WaitStats = mt
	since := time.Now().Add(-time.Minute)
	mt.Waiting("claiming a rank", errors.New(`identity key "/tmmu/jobs/j/identities/w0" holds "x"`), since, 7)
	code, body := get()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting: claiming a rank, 7 tries since") || !strings.Contains(body, `holds "x"`) {
		t.Fatalf("readyz %d %q while claiming fails", code, body)
	}
	if v := value(t, mt.retries.WithLabelValues("claiming a rank")); v != 1 {
		t.Fatalf("retries %v", v)
	}
	if v := value(t, mt.waitingG.WithLabelValues("claiming a rank")); v < 59 {
		t.Fatalf("waiting %v s, want about 60", v)
	}
	mt.Waited("claiming a rank")
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("readyz %d %q after the wait ended", code, body)
	}
	if v := value(t, mt.waitingG.WithLabelValues("claiming a rank")); v != 0 {
		t.Fatalf("waiting %v s after the wait ended", v)
	}
}

// value reads a counter's or a gauge's value.
func value(t *testing.T, m interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}
