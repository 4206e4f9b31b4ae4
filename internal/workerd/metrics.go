package workerd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/transport"
)

// metrics are the worker's Prometheus metrics, in base units. They are
// the worker's worker.Stats too.
type metrics struct {
	reg         *prometheus.Registry
	steps       prometheus.Counter
	duration    prometheus.Histogram
	loss        prometheus.Gauge
	valLoss     prometheus.Gauge
	dataFetched prometheus.Gauge
	dataFed     prometheus.Gauge
	arena       prometheus.Gauge
	plans       prometheus.Counter
	ckpts       prometheus.Counter
	ckptBytes   prometheus.Gauge
	ckptTime    prometheus.Histogram
	restores    prometheus.Counter
	restoreTime prometheus.Histogram
	reconnects  *prometheus.CounterVec
	retries     *prometheus.CounterVec
	waitingG    *prometheus.GaugeVec
	running     atomic.Bool

	waitMu sync.Mutex
	waits  map[string]wait // what the worker retries now, by what
}

// wait is one thing the worker retries: the last error, since when, and
// how many tries have failed.
type wait struct {
	err   string
	since time.Time
	tries int
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.steps = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_worker_steps_total", Help: "Steps this worker ran."})
	m.duration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tmmu_worker_step_duration_seconds", Help: "Time running one step (barrier excluded).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.loss = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tmmu_worker_loss", Help: "The training loss of the last step (computing executors only)."})
	m.valLoss = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tmmu_worker_val_loss", Help: "The last validation loss: the mean loss over this rank's rows of the validation set's first batches (jobs with validation data)."})
	m.arena = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tmmu_arena_peak_bytes", Help: "Reserved bytes of the running plan's arenas."})
	m.plans = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_worker_plans_total", Help: "Plans this worker started running (the first one and every switch at a safepoint)."})
	m.ckpts = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_checkpoints_total", Help: "Shards of checkpoints this worker stored and reported."})
	m.ckptBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tmmu_checkpoint_bytes", Help: "Bytes of the last shard this worker stored."})
	m.ckptTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tmmu_checkpoint_duration_seconds", Help: "Time to export, encode and store one shard.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)})
	m.restores = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_worker_restores_total", Help: "Checkpoints this worker restored (verified by digest and state hash)."})
	m.restoreTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tmmu_worker_restore_duration_seconds", Help: "Time to read, verify, recut and load a checkpoint.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)})
	m.reconnects = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tmmu_worker_reconnects_total", Help: "Recoveries from a failed dependency: nats (the connection came back), etcd (the rank claimed again after its lease lapsed), coordinator (an answer after failures)."}, []string{"to"})
	for _, to := range []string{"nats", "etcd", "coordinator"} {
		m.reconnects.WithLabelValues(to)
	}
	m.dataFetched = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tmmu_worker_data_fetched_bytes", Help: "Bytes of training data this worker fetched from where the dataset lives (range reads from the coordinators for a stored dataset, or from mounted files), since it started."})
	m.dataFed = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tmmu_worker_data_fed_bytes", Help: "Bytes of training data this worker fed its graph (its rows' tokens), since it started."})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tmmu_worker_retries_total", Help: "Failed tries of something the worker retries (what: claiming a rank, getting ready for a step, storing or reading a checkpoint, ...)."}, []string{"what"})
	m.waitingG = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tmmu_worker_waiting_seconds", Help: "How long the worker has been retrying what (0: it is not); /readyz says why."}, []string{"what"})
	m.waits = map[string]wait{}
	m.reg.MustRegister(m.retries, m.waitingG)
	m.reg.MustRegister(m.steps, m.duration, m.loss, m.valLoss, m.dataFetched, m.dataFed, m.arena, m.plans, m.ckpts, m.ckptBytes, m.ckptTime, m.restores, m.restoreTime, m.reconnects, collectors.NewGoCollector())
	return m
}

// watch exports what the transport dropped: decisions whose signature did
// not verify, and stored values that did not decode or match their key.
func (m *metrics) watch(tr *transport.Transport) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tmmu_worker_rejected_decisions_total",
			Help: "Outcomes and announcements ignored because their signature did not verify (or they had none)."},
			func() float64 { return float64(tr.Rejected()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tmmu_worker_dropped_messages_total",
			Help: "Messages and stored values dropped because they did not decode, validate or match their subject or key."},
			func() float64 { return float64(tr.Dropped()) }))
}

// Checkpointed counts a stored shard (worker.Stats).
func (m *metrics) Checkpointed(step, bytes uint64, took time.Duration) {
	m.ckpts.Inc()
	m.ckptBytes.Set(float64(bytes))
	m.ckptTime.Observe(took.Seconds())
}

// Restored counts a restored checkpoint (worker.Stats).
func (m *metrics) Restored(step, bytes uint64, took time.Duration) {
	m.restores.Inc()
	m.restoreTime.Observe(took.Seconds())
}

// Reconnected counts a recovered dependency (worker.Stats).
func (m *metrics) Reconnected(what string) { m.reconnects.WithLabelValues(what).Inc() }

// Waiting records a failed try of what (worker.WaitStats).
func (m *metrics) Waiting(what string, err error, since time.Time, tries int) {
	m.retries.WithLabelValues(what).Inc()
	m.waitingG.WithLabelValues(what).Set(time.Since(since).Seconds())
	m.waitMu.Lock()
	m.waits[what] = wait{err: err.Error(), since: since, tries: tries}
	m.waitMu.Unlock()
}

// Waited records that what succeeded (worker.WaitStats).
func (m *metrics) Waited(what string) {
	m.waitingG.WithLabelValues(what).Set(0)
	m.waitMu.Lock()
	delete(m.waits, what)
	m.waitMu.Unlock()
}

// waiting describes what the worker retries now, one line each, sorted.
func (m *metrics) waiting() []string {
	m.waitMu.Lock()
	defer m.waitMu.Unlock()
	var out []string
	for what, w := range m.waits {
		out = append(out, fmt.Sprintf("waiting: %s, %d tries since %s: %s", what, w.tries, w.since.UTC().Format(time.RFC3339), w.err))
	}
	slices.Sort(out)
	return out
}

// wrap counts every executor built and measures its steps. The wrapper
// passes the optional interfaces through: an executor that holds state
// is wrapped as one that does, one that does not as one that does not.
func (m *metrics) wrap(next func(*ir.Graph, *planner.Plan) (runner.Executor, error)) func(*ir.Graph, *planner.Plan) (runner.Executor, error) {
	return func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
		x, err := next(g, p)
		if err != nil {
			return nil, err
		}
		m.plans.Inc()
		m.arena.Set(float64(p.Metrics.ReservedBytes))
		m.running.Store(true)
		w := &measured{Executor: x, m: m}
		if c, ok := x.(runner.StateCarrier); ok {
			return &measuredState{measured: w, c: c}, nil
		}
		return w, nil
	}
}

func (m *metrics) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		waits := m.waiting()
		if !m.running.Load() || len(waits) > 0 {
			msg := "running steps"
			if !m.running.Load() {
				msg = "not running steps yet"
			}
			http.Error(w, strings.Join(append([]string{msg}, waits...), "\n"), http.StatusServiceUnavailable)
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
	runner.Executor
	m *metrics
}

func (x *measured) Step(ctx context.Context, step uint64) (runner.StepStats, error) {
	t := time.Now()
	st, err := x.Executor.Step(ctx, step)
	if err == nil {
		x.m.steps.Inc()
		x.m.duration.Observe(time.Since(t).Seconds())
		if st.HasLoss {
			x.m.loss.Set(st.Loss)
		}
		if st.DataFed > 0 {
			x.m.dataFetched.Set(float64(st.DataFetched))
			x.m.dataFed.Set(float64(st.DataFed))
		}
	}
	return st, err
}

// Validate validates when the executor can (runner.Validator).
func (x *measured) Validate(ctx context.Context, step uint64) (float64, bool, error) {
	v, ok := x.Executor.(runner.Validator)
	if !ok {
		return 0, false, nil
	}
	loss, has, err := v.Validate(ctx, step)
	if err == nil && has {
		x.m.valLoss.Set(loss)
	}
	return loss, has, err
}

func (x *measured) Configure(s runner.Setup) error {
	if c, ok := x.Executor.(runner.Configurer); ok {
		return c.Configure(s)
	}
	return nil
}

// MemoryReport is the wrapped executor's, or "" when it has none.
func (x *measured) MemoryReport() string {
	if r, ok := x.Executor.(runner.MemoryReporter); ok {
		return r.MemoryReport()
	}
	return ""
}

func (x *measured) Close() error {
	if c, ok := x.Executor.(runner.Closer); ok {
		return c.Close()
	}
	return nil
}

// measuredState is a measured executor that holds model state.
type measuredState struct {
	*measured
	c runner.StateCarrier
}

func (x *measuredState) Export() (runner.State, error)         { return x.c.Export() }
func (x *measuredState) Import(s runner.State) error           { return x.c.Import(s) }
func (x *measuredState) StateHash() (string, error)            { return x.c.StateHash() }
func (x *measuredState) HashOf(s runner.State) (string, error) { return x.c.HashOf(s) }
