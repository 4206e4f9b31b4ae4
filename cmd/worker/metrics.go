package main

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runtime"
)

// metrics are the worker's Prometheus metrics, in base units.
type metrics struct {
	reg      *prometheus.Registry
	steps    prometheus.Counter
	duration prometheus.Histogram
	loss     prometheus.Gauge
	arena    prometheus.Gauge
	plans    prometheus.Counter
	running  atomic.Bool
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.steps = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_worker_steps_total", Help: "Steps this worker ran."})
	m.duration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tmmu_worker_step_duration_seconds", Help: "Time running one step (barrier excluded).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.loss = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tmmu_worker_loss", Help: "The training loss of the last step (computing executors only)."})
	m.arena = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tmmu_arena_peak_bytes", Help: "Reserved bytes of the running plan's arenas."})
	m.plans = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_worker_plans_total", Help: "Plans this worker started running (the first one and every switch at a safepoint)."})
	m.reg.MustRegister(m.steps, m.duration, m.loss, m.arena, m.plans, prometheus.NewGoCollector())
	return m
}

// wrap counts every executor built and measures its steps.
func (m *metrics) wrap(next func(*ir.Graph, *planner.Plan) (runtime.Executor, error)) func(*ir.Graph, *planner.Plan) (runtime.Executor, error) {
	return func(g *ir.Graph, p *planner.Plan) (runtime.Executor, error) {
		x, err := next(g, p)
		if err != nil {
			return nil, err
		}
		m.plans.Inc()
		m.arena.Set(float64(p.Metrics.ReservedBytes))
		m.running.Store(true)
		return &measured{Executor: x, m: m}, nil
	}
}

func (m *metrics) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !m.running.Load() {
			http.Error(w, "not running steps yet", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return mux
}

// measured is an executor whose steps are measured. It passes the
// optional interfaces (state carrying, closing) through.
type measured struct {
	runtime.Executor
	m *metrics
}

func (x *measured) Step(ctx context.Context, step uint64) (runtime.StepStats, error) {
	t := time.Now()
	st, err := x.Executor.Step(ctx, step)
	if err == nil {
		x.m.steps.Inc()
		x.m.duration.Observe(time.Since(t).Seconds())
		if st.HasLoss {
			x.m.loss.Set(st.Loss)
		}
	}
	return st, err
}

func (x *measured) Export() (map[string][]uint32, error) {
	if c, ok := x.Executor.(runtime.StateCarrier); ok {
		return c.Export()
	}
	return nil, nil
}

func (x *measured) Import(s map[string][]uint32) error {
	if c, ok := x.Executor.(runtime.StateCarrier); ok && s != nil {
		return c.Import(s)
	}
	return nil
}

func (x *measured) SetDataMode(mode string) error {
	if s, ok := x.Executor.(runtime.ModeSetter); ok {
		return s.SetDataMode(mode)
	}
	return nil
}

func (x *measured) Close() error {
	if c, ok := x.Executor.(runtime.Closer); ok {
		return c.Close()
	}
	return nil
}
