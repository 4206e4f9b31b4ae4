package coord

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/rendezvous"
)

func (n *Node) summarize(j *api.Job) api.JobSummary {
	e := j.Current()
	spec, _ := j.World(e.Epoch)
	s := api.JobSummary{Name: j.Spec.Name, Status: j.Status, Reason: j.Reason, Epoch: e.Epoch, WorldSize: spec.WorldSize,
		LastStep: j.LastStep, Steps: j.Spec.Steps, GlobalPlanHash: e.GlobalPlanHash.String(), Paused: j.Paused, Checkpoints: len(j.Checkpoints)}
	if e.Outcome != nil {
		s.Agreed, s.Missing = e.Outcome.Agreed, e.Outcome.Missing
	}
	if k := j.LastCheckpoint(); k != nil {
		s.LastCheckpoint = k.Step
	}
	s.Absent = n.absentOf(j.Spec.Name)
	s.RankProblems = n.problemsOf(j.Spec.Name)
	s.Loss = j.Loss
	if v := j.Validations; len(v) > 0 {
		s.Val = &v[len(v)-1]
	}
	return s
}

// metrics are a node's Prometheus collectors (a registry per node, so
// several nodes can share a process).
type metrics struct {
	reg       *prometheus.Registry
	leader    prometheus.GaugeFunc
	term      prometheus.GaugeFunc
	applied   prometheus.GaugeFunc
	submits   prometheus.Counter
	outcomes  *prometheus.CounterVec
	agreement prometheus.Histogram
	refused   prometheus.Counter
	replans   *prometheus.CounterVec
	// checkpoints
	checkpoints     prometheus.Counter
	checkpointBytes prometheus.Gauge
	checkpointWrite prometheus.Histogram
	collected       prometheus.Counter
	recoveries      *prometheus.CounterVec
	forged          *prometheus.CounterVec
	raftRefused     prometheus.Counter
	raftHandshake   *prometheus.CounterVec
	answers         *prometheus.CounterVec
	// data: range reads served, blocks fetched for them
	dataServed  prometheus.Counter
	dataFetched prometheus.CounterFunc
}

func newMetrics(n *Node) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.leader = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tmmu_coordinator_is_leader", Help: "1 when this node is the raft leader."},
		func() float64 {
			if n.IsLeader() {
				return 1
			}
			return 0
		})
	m.term = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tmmu_coordinator_raft_term", Help: "The raft term."},
		func() float64 { v, _ := strconv.ParseFloat(n.raft.Stats()["term"], 64); return v })
	m.applied = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tmmu_coordinator_applied_index", Help: "The last raft index applied to the job state."},
		func() float64 { _, i := n.applied(); return float64(i) })
	m.submits = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_coordinator_jobs_submitted_total", Help: "Jobs this node submitted as leader."})
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tmmu_coordinator_epoch_outcomes_total", Help: "Epoch outcomes this node committed as leader."}, []string{"agreed"})
	m.replans = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tmmu_coordinator_replans_total", Help: "Replan decisions this node made as leader, by decision (none, replan, abort)."}, []string{"decision"})
	m.refused = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_coordinator_unauthorized_requests_total", Help: "API calls refused for a missing or wrong token."})
	m.agreement = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tmmu_coordinator_agreement_seconds", Help: "From watching an epoch's reports to committing its outcome.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.checkpoints = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_checkpoints_total", Help: "Checkpoints this node committed as leader (every rank of the world stored its shard)."})
	m.checkpointBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tmmu_checkpoint_bytes", Help: "Bytes of the last checkpoint this node committed, every rank's shard."})
	m.checkpointWrite = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tmmu_checkpoint_duration_seconds", Help: "The slowest rank's time to store its shard, per committed checkpoint.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)})
	m.collected = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_checkpoint_objects_collected_total", Help: "Checkpoint objects deleted because no kept checkpoint needs them."})
	m.recoveries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tmmu_coordinator_recovery_requests_total", Help: "Ranks' recovery requests by kind and the decision taken (none, rollback, pause, fail)."}, []string{"kind", "decision"})
	m.forged = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tmmu_forged_reports_total", Help: "Reports this node dropped as leader because their identity did not hold the rank they named (plan: not the etcd claim's holder at the revision named; progress, checkpoint, recovery, replan: not the holder the epoch's outcome recorded)."}, []string{"kind"})
	for _, k := range []string{ForgedPlan, ForgedProgress, ForgedCheckpoint, ForgedRecovery, ForgedReplan} {
		m.forged.WithLabelValues(k)
	}
	m.raftRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_coordinator_raft_refused_connections_total", Help: "Raft connections refused because the peer showed no certificate of a coordinator of this cluster's CA, or spoke no TLS (handshakes that timed out or that the peer closed are not counted: see tmmu_coordinator_raft_handshake_failures_total)."})
	m.raftHandshake = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tmmu_coordinator_raft_handshake_failures_total", Help: "Raft TLS handshakes that failed, by cause: timeout and closed (a slow or gone peer, not refused), no_certificate, wrong_ca, wrong_role, not_tls, other (refused)."}, []string{"cause"})
	m.answers = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tmmu_coordinator_http_responses_total", Help: "API answers by status code."}, []string{"code"})
	m.dataServed = prometheus.NewCounter(prometheus.CounterOpts{Name: "tmmu_coordinator_data_served_bytes_total", Help: "Bytes of stored datasets and weights this node served to workers' range reads."})
	m.dataFetched = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tmmu_coordinator_data_fetched_bytes_total", Help: "Bytes of dataset blocks this node fetched from the object store to serve range reads (the rest came from its cache)."},
		func() float64 {
			if rd := n.dataReader.Load(); rd != nil {
				return float64(rd.Fetched.Load())
			}
			return 0
		})
	m.reg.MustRegister(m.leader, m.term, m.applied, m.submits, m.outcomes, m.agreement, m.refused, m.replans, m.checkpoints, m.checkpointBytes, m.checkpointWrite, m.collected, m.recoveries, m.forged, m.raftRefused, m.raftHandshake, m.answers, m.dataServed, m.dataFetched)
	return m
}

// Handler returns the node's HTTP API:
//
//	POST /v1/jobs               submit: the leader plans every rank off the request path (one submission at a
//	                            time, MaxQueued at most: 503 past it), stores the IR in the IR store and commits
//	                            epoch 0; 201 (200 for a retry) within SubmitWait, else 202 (followers redirect, 307)
//	GET  /v1/submissions/{name} a submission being planned (202), or its answer
//	GET  /v1/jobs               job summaries
//	GET  /v1/jobs/{name}        a job with its epochs, expected plan hashes and checkpoints (?expected=recent: the hashes and holders of the last two epochs only, no checkpoint's shards)
//	GET  /v1/jobs/{name}/ir     the job's global IR (canonical CBOR) under the latest epoch, or ?epoch=E
//	GET  /v1/jobs/{name}/ranks/{rank}/plan
//	                            a rank's plan under the current epoch (planned on request)
//	GET  /v1/status             raft state, leader, term, voters, jobs
//	POST /v1/jobs/{name}/replan an operator's replan request
//	POST /v1/voters             add a voter {id, raft_addr, http_addr} (its node runs without bootstrap)
//	POST /v1/jobs/{name}/cancel cancel a job {reason}: its workers stop, its checkpoints stay
//	DELETE /v1/jobs/{name}      delete a job: its workers stop; its checkpoints, reports and rank reservations are removed
//	DELETE /v1/jobs/{name}/ranks/{identity}
//	                            release an identity's rank reservation in etcd (nodes given etcd)
//	DELETE /v1/voters/{id}      remove a voter
//	GET  /livez, /readyz        liveness; readiness (a leader is known)
//	GET  /metrics               Prometheus metrics
//
// Job reads on a follower point to the leader (307), so a read sees every
// write acknowledged before it; with ?local=1, or while no leader is known,
// the follower answers from its own applied state, which may trail the
// leader's by a few entries (the response then carries X-Tmmu-Stale: 1,
// and a client treats a stale 404 as an answer to retry). A deleted job
// answers 410 Gone.
// /v1/status always answers for the node asked, naming the leader.
//
// With an API token set, every call but /livez, /readyz and /metrics
// needs "Authorization: Bearer <token>" and is refused with 401
// otherwise; reads (GET of jobs, IRs, plans and status) also accept the
// read token. Without tokens (an unsecured cluster) nothing is asked.
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", n.authorized(n.handleSubmit))
	mux.HandleFunc("GET /v1/submissions/{name}", n.authorized(n.handleSubmission))
	mux.HandleFunc("GET /v1/jobs", n.readable(func(w http.ResponseWriter, r *http.Request) {
		if n.readRedirect(w, r) {
			return
		}
		s, _ := n.State()
		out := []api.JobSummary{}
		for _, name := range s.Names() {
			out = append(out, n.summarize(s.Jobs[name]))
		}
		writeJSON(w, http.StatusOK, out)
	}))
	mux.HandleFunc("GET /v1/jobs/{name}", n.readable(func(w http.ResponseWriter, r *http.Request) {
		j := n.job(w, r)
		if j == nil {
			return
		}
		if r.URL.Query().Get("expected") == "recent" {
			j = j.Clone() // the node's view is shared
			// Workers need the expected hashes and holders of the last
			// two epochs only, and which checkpoints are committed, not
			// their shards (a restore fetches the job whole): a long
			// history or a large world would make every poll large.
			for i := range len(j.Epochs) - 2 {
				j.Epochs[i].Expected = nil
				if o := j.Epochs[i].Outcome; o != nil {
					o.Holders = nil // j is a copy (Job.Clone copies outcomes)
				}
			}
			for i := range j.Checkpoints {
				j.Checkpoints[i].Shards = nil
			}
			j.Dropped = nil
		}
		writeJSON(w, http.StatusOK, j)
	}))
	mux.HandleFunc("GET /v1/jobs/{name}/ir", n.readable(func(w http.ResponseWriter, r *http.Request) {
		j := n.job(w, r)
		if j == nil {
			return
		}
		i := j.Current().Epoch
		if q := r.URL.Query().Get("epoch"); q != "" {
			e, err := strconv.ParseUint(q, 10, 64)
			if err != nil || e >= uint64(len(j.Epochs)) {
				writeError(w, http.StatusNotFound, fmt.Errorf("job %q has no epoch %q", j.Spec.Name, q))
				return
			}
			i = e
		}
		ref, _, _ := j.Inputs(i)
		model, err := n.model(r.Context(), ref)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err)
			return
		}
		w.Header().Set("Content-Type", "application/cbor")
		w.Write(model)
	}))
	mux.HandleFunc("GET /v1/jobs/{name}/ranks/{rank}/plan", n.readable(func(w http.ResponseWriter, r *http.Request) {
		j := n.job(w, r)
		if j == nil {
			return
		}
		rank, err := strconv.ParseUint(r.PathValue("rank"), 10, 64)
		if err != nil || rank >= j.Spec.ShardSpec.WorldSize {
			writeError(w, http.StatusNotFound, fmt.Errorf("job %q has no rank %q", j.Spec.Name, r.PathValue("rank")))
			return
		}
		rp, err := n.PlanRank(r.Context(), j, j.Current().Epoch, rank)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		writeJSON(w, http.StatusOK, rp)
	}))
	mux.HandleFunc("POST /v1/jobs/{name}/replan", n.authorized(func(w http.ResponseWriter, r *http.Request) {
		if n.redirect(w, r) {
			return
		}
		var req api.ReplanRequest
		if !decodeBody(w, r, 1<<20, "replan request", &req) {
			return
		}
		out, err := n.OperatorReplan(r.PathValue("name"), &req, 30*time.Second)
		if err != nil {
			writeCommitError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}))
	mux.HandleFunc("POST /v1/jobs/{name}/cancel", n.authorized(func(w http.ResponseWriter, r *http.Request) {
		if n.redirect(w, r) {
			return
		}
		var req api.CancelRequest
		if !decodeBody(w, r, 1<<16, "cancel request", &req) {
			return
		}
		if strings.TrimSpace(req.Reason) == "" {
			req.Reason = "cancelled by an operator"
		}
		n.mutate(w, r.PathValue("name"), &api.Command{Kind: api.CmdCancel, Job: r.PathValue("name"), Reason: req.Reason})
	}))
	mux.HandleFunc("DELETE /v1/jobs/{name}", n.authorized(func(w http.ResponseWriter, r *http.Request) {
		if n.redirect(w, r) {
			return
		}
		n.mutate(w, r.PathValue("name"), &api.Command{Kind: api.CmdDelete, Job: r.PathValue("name"), At: time.Now().UnixNano()})
	}))
	mux.HandleFunc("DELETE /v1/jobs/{name}/ranks/{identity}", n.authorized(func(w http.ResponseWriter, r *http.Request) {
		rv := n.rv.Load()
		if rv == nil {
			writeError(w, http.StatusServiceUnavailable, failure.New(failure.InvalidOptions, api.OpCoordinator, "this coordinator runs without etcd (--etcd): it holds no rank reservations to release"))
			return
		}
		job, id := r.PathValue("name"), r.PathValue("identity")
		if err := rv.Forget(r.Context(), job, id); err != nil {
			if errors.Is(err, rendezvous.ErrInvalidArgument) {
				writeError(w, http.StatusBadRequest, failure.New(failure.InvalidOptions, api.OpCoordinator, err.Error()))
				return
			}
			writeError(w, http.StatusServiceUnavailable, fmt.Errorf("coord: etcd: %w", err))
			return
		}
		n.log.Info("released a rank reservation", "job", job, "identity", id)
		writeJSON(w, http.StatusOK, api.Release{Job: job, Identity: id})
	}))
	mux.HandleFunc("POST /v1/voters", n.authorized(func(w http.ResponseWriter, r *http.Request) {
		if n.redirect(w, r) {
			return
		}
		var p api.Peer
		if !decodeBody(w, r, 1<<16, "voter", &p) {
			return
		}
		if err := CheckPeer(p, 3*time.Second); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		if err := n.AddVoter(p, 10*time.Second); err != nil {
			if fe := new(failure.Error); errors.As(err, &fe) {
				writeError(w, http.StatusBadRequest, err)
				return
			}
			writeCommitError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, n.Status())
	}))
	mux.HandleFunc("DELETE /v1/voters/{id}", n.authorized(func(w http.ResponseWriter, r *http.Request) {
		if n.redirect(w, r) {
			return
		}
		if err := n.RemoveVoter(r.PathValue("id"), 10*time.Second); err != nil {
			writeCommitError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, n.Status())
	}))
	n.dataHandlers(mux)
	mux.HandleFunc("GET /v1/status", n.readable(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.Status()) }))
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if id, _ := n.Leader(); id == "" {
			http.Error(w, "no leader", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	return promhttp.InstrumentHandlerCounter(n.metrics.answers, mux)
}

// Status returns the node's view of the cluster.
func (n *Node) Status() api.Status {
	s, idx := n.State()
	lid, lhttp := n.Leader()
	st := api.Status{ID: n.cfg.ID, State: n.raft.State().String(), Leader: lid, LeaderHTTP: lhttp, AppliedIndex: idx, Jobs: []api.JobSummary{}, JobsFrom: n.cfg.ID}
	st.Term, _ = strconv.ParseUint(n.raft.Stats()["term"], 10, 64)
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, sv := range f.Configuration().Servers {
			if sv.Suffrage == raft.Voter {
				st.Voters = append(st.Voters, api.Peer{ID: string(sv.ID), RaftAddr: string(sv.Address), HTTPAddr: n.httpAddr(string(sv.ID))})
			}
		}
	}
	for _, name := range s.Names() {
		st.Jobs = append(st.Jobs, n.summarize(s.Jobs[name]))
	}
	return st
}

// redirect sends a write to the leader (307, which clients follow with
// the body) and reports whether it did; with no leader known it answers
// 503.
func (n *Node) redirect(w http.ResponseWriter, r *http.Request) bool {
	if n.IsLeader() {
		return false
	}
	_, addr := n.Leader()
	if addr == "" {
		writeError(w, http.StatusServiceUnavailable, errors.New("no leader known; retry"))
		return true
	}
	http.Redirect(w, r, n.scheme()+addr+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	return true
}

// scheme is the URL scheme of the nodes' APIs.
func (n *Node) scheme() string {
	if n.cfg.HTTPS {
		return "https://"
	}
	return "http://"
}

// job answers a read of job {name}: it redirects to the leader or writes
// a 404 and returns nil, or returns the job.
func (n *Node) job(w http.ResponseWriter, r *http.Request) *api.Job {
	if n.readRedirect(w, r) {
		return nil
	}
	s, _ := n.State()
	j, ok := s.Jobs[r.PathValue("name")]
	if !ok {
		if at, gone := s.Deleted[r.PathValue("name")]; gone {
			writeError(w, http.StatusGone, fmt.Errorf("job %q was deleted at %s", r.PathValue("name"), time.Unix(0, at).UTC().Format(time.RFC3339)))
			return nil
		}
		writeError(w, http.StatusNotFound, fmt.Errorf("no job %q", r.PathValue("name")))
		return nil
	}
	return j
}

// mutate commits c for job and answers with the job (404 for no job).
func (n *Node) mutate(w http.ResponseWriter, job string, c *api.Command) {
	s, _ := n.State()
	if s.Jobs[job] == nil {
		writeError(w, http.StatusNotFound, fmt.Errorf("no job %q", job))
		return
	}
	if _, err := n.Apply(c, 10*time.Second); err != nil {
		writeCommitError(w, err)
		return
	}
	s, _ = n.State()
	if j := s.Jobs[job]; j != nil {
		writeJSON(w, http.StatusOK, j)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": job})
}

// writeCommitError answers a write that did not commit (commitStatus).
func writeCommitError(w http.ResponseWriter, err error) { writeError(w, commitStatus(err), err) }

// commitStatus is the status of a write that did not commit: 503 when
// this node lost (or never had) the leadership before it committed,
// which the client retries on another node (every write is idempotent: a
// submission by its content, a replan by its id), else 409.
func commitStatus(err error) int {
	if errors.Is(err, ErrNotLeader) {
		return http.StatusServiceUnavailable
	}
	return http.StatusConflict
}

// readRedirect points a job read on a follower to the leader, unless the
// client asked for a local answer or no leader is known.
func (n *Node) readRedirect(w http.ResponseWriter, r *http.Request) bool {
	if n.IsLeader() {
		return false
	}
	if _, addr := n.Leader(); addr != "" && r.URL.Query().Get("local") == "" {
		http.Redirect(w, r, n.scheme()+addr+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		return true
	}
	w.Header().Set("X-Tmmu-Stale", "1")
	return false
}

// decodeBody decodes a request body of at most limit bytes into v,
// refusing unknown fields. It answers the request itself when the body
// does not decode: 413 past limit, else 400, both INVALID_ENCODING
// naming what (a submission, a voter...).
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, what string, v any) bool {
	body, ok := readBody(w, r, limit, what)
	return ok && decodeJSON(w, body, what, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // compact: workers poll these
}

func writeError(w http.ResponseWriter, status int, err error) { writeJSON(w, status, apiError(err)) }

// apiError is the body that answers err.
func apiError(err error) api.APIError {
	e := api.APIError{Error: err.Error()}
	var fe *failure.Error
	if errors.As(err, &fe) {
		e.FailureCode, e.Diagnostics, e.Operator, e.Message = fe.Code, fe.Diagnostics, fe.Operator, fe.Message
	}
	return e
}

// authorized wraps a mutating handler: with an API token set, the request
// must carry it as a bearer token (compared in constant time).
func (n *Node) authorized(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok := *n.token.Load(); tok != "" && !bearer(r, tok) {
			n.metrics.refused.Inc()
			writeError(w, http.StatusUnauthorized, errors.New("this call changes the cluster and needs the API token (Authorization: Bearer …; tmmu --token or TMMU_TOKEN)"))
			return
		}
		h(w, r)
	}
}

// readable wraps a read of jobs, IRs, plans or status (what a forger
// would need): with a token set, the request must carry the API token or
// the read token.
func (n *Node) readable(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, read := *n.token.Load(), *n.readToken.Load()
		if (tok != "" || read != "") && !(tok != "" && bearer(r, tok)) && !(read != "" && bearer(r, read)) {
			n.metrics.refused.Inc()
			writeError(w, http.StatusUnauthorized, errors.New("this read shows models, plans or hashes and needs the read token or the API token (Authorization: Bearer …; tmmu --token or TMMU_TOKEN)"))
			return
		}
		h(w, r)
	}
}

// bearer says whether r carries tok as its bearer token (compared in
// constant time).
func bearer(r *http.Request, tok string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1
}
