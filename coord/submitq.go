package coord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// Planning submissions happens off the request path, a bounded number at
// a time: the leader must keep answering raft, the workers and the API
// while it plans a large job.
const (
	// MaxPlanning is how many submissions the leader plans at once.
	MaxPlanning = 1
	// MaxQueued bounds the submissions planned or waiting to be: past it
	// a submission is refused with 503 and Retry-After, for the client to
	// retry.
	MaxQueued = 4
	// DefaultSubmitWait is how long POST /v1/jobs waits for the plan
	// before it answers 202 (Config.SubmitWait).
	DefaultSubmitWait = 10 * time.Second
	// submissionKept is how long an answered submission's answer stays
	// for GET /v1/submissions/{name}.
	submissionKept = 10 * time.Minute
)

// submission is one POST /v1/jobs being planned, or answered.
type submission struct {
	body     [32]byte // SHA-256 of the request body
	done     chan struct{}
	status   int // the answer, once done
	answer   any
	model    ir.Hash // the IR's digest, once stored
	finished time.Time
}

func (n *Node) pendingDigests() []ir.Hash {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	var out []ir.Hash
	for _, s := range n.subs {
		if !s.model.IsZero() {
			out = append(out, s.model)
		}
	}
	return out
}

// readBody reads a body of at most limit bytes; it answers 413 past it.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, what string) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if tooBig := new(http.MaxBytesError); errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, failure.New(failure.InvalidEncoding, api.OpCoordinator,
			fmt.Sprintf("%s: the body is larger than %d bytes", what, limit)))
		return nil, false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, failure.New(failure.InvalidEncoding, api.OpCoordinator, what+": "+err.Error()))
		return nil, false
	}
	return b, true
}

// handleSubmit answers POST /v1/jobs: it hands the submission to the
// planner (one at a time, MaxQueued at most, 503 past that) and waits up
// to SubmitWait for the outcome; a submission still being planned then is
// answered 202 with its status at /v1/submissions/{name}. The same body
// again joins the submission in progress; another body for a job being
// planned is 409.
func (n *Node) handleSubmit(w http.ResponseWriter, r *http.Request) {
	if n.redirect(w, r) {
		return
	}
	body, ok := readBody(w, r, api.MaxSubmitBytes, "submission")
	if !ok {
		return
	}
	var req api.SubmitRequest
	if !decodeJSON(w, body, "submission", &req) {
		return
	}
	if err := checkJobName(req.Name); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	sum := sha256.Sum256(body)
	now := time.Now()
	n.subMu.Lock()
	for name, s := range n.subs {
		if !s.finished.IsZero() && now.Sub(s.finished) > submissionKept {
			delete(n.subs, name)
		}
	}
	sub := n.subs[req.Name]
	switch {
	case sub != nil && sub.finished.IsZero() && sub.body != sum:
		n.subMu.Unlock()
		writeError(w, http.StatusConflict, failure.New(failure.InvalidOptions, api.OpCoordinator,
			fmt.Sprintf("another submission of job %q is being planned: wait for its answer (GET /v1/submissions/%s)", req.Name, req.Name)))
		return
	case sub == nil || !sub.finished.IsZero():
		queued := 0
		for _, s := range n.subs {
			if s.finished.IsZero() {
				queued++
			}
		}
		if queued >= MaxQueued {
			n.subMu.Unlock()
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, fmt.Errorf("coord: %d submissions are being planned; retry", queued))
			return
		}
		sub = &submission{body: sum, done: make(chan struct{})}
		n.subs[req.Name] = sub
		go n.plan(sub, &req)
	}
	n.subMu.Unlock()
	wait := n.cfg.SubmitWait
	if wait <= 0 {
		wait = DefaultSubmitWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-sub.done:
		writeJSON(w, sub.status, sub.answer)
	case <-t.C:
		w.Header().Set("Location", "/v1/submissions/"+req.Name)
		writeJSON(w, http.StatusAccepted, api.Submission{Name: req.Name, Status: "planning"})
	case <-r.Context().Done():
	}
}

// plan plans a submission, stores its IR and commits it, then records the
// answer. It holds one of the MaxPlanning slots while it plans.
func (n *Node) plan(sub *submission, req *api.SubmitRequest) {
	status, answer := n.prepare(sub, req)
	n.subMu.Lock()
	sub.status, sub.answer, sub.finished = status, answer, time.Now()
	n.subMu.Unlock()
	close(sub.done)
}

func (n *Node) prepare(sub *submission, req *api.SubmitRequest) (int, any) {
	n.planning <- struct{}{}
	defer func() { <-n.planning }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.resolveData(ctx, req); err != nil {
		return storeStatus(err), apiError(err)
	}
	cmd, _, err := PrepareSubmit(req)
	if err != nil {
		return http.StatusBadRequest, apiError(err)
	}
	if req.Weights != nil {
		m, err := ir.DecodeCBOR(cmd.Spec.Model)
		if err == nil {
			err = n.checkWeights(ctx, req.Weights, m)
		}
		if err != nil {
			return storeStatus(err), apiError(err)
		}
	}
	d, err := n.putModel(ctx, cmd.Spec.Model)
	if err != nil {
		return http.StatusServiceUnavailable, apiError(err)
	}
	n.subMu.Lock()
	sub.model = d
	n.subMu.Unlock()
	cmd.Spec.Model, cmd.Spec.ModelDigest = nil, d
	cmd.New.CommittedAt = time.Now().UnixNano()
	res, err := n.Apply(cmd, 10*time.Second)
	if err != nil {
		return commitStatus(err), apiError(err)
	}
	n.metrics.submits.Inc()
	s, _ := n.State()
	if !res.Changed {
		return http.StatusOK, s.Jobs[req.Name]
	}
	return http.StatusCreated, s.Jobs[req.Name]
}

// handleSubmission answers GET /v1/submissions/{name} (leader only): 202
// while the job is planned, the submission's answer once it is, 404 for
// one this leader does not know (the client submits again: submissions
// are idempotent).
func (n *Node) handleSubmission(w http.ResponseWriter, r *http.Request) {
	if n.redirect(w, r) {
		return
	}
	n.subMu.Lock()
	sub := n.subs[r.PathValue("name")]
	var status int
	var answer any
	if sub != nil && !sub.finished.IsZero() {
		status, answer = sub.status, sub.answer
	}
	n.subMu.Unlock()
	switch {
	case sub == nil:
		writeError(w, http.StatusNotFound, fmt.Errorf("no submission of job %q on this leader", r.PathValue("name")))
	case status == 0:
		writeJSON(w, http.StatusAccepted, api.Submission{Name: r.PathValue("name"), Status: "planning"})
	default:
		writeJSON(w, status, answer)
	}
}

// decodeJSON decodes a JSON body into v, refusing unknown fields; it
// answers 400 INVALID_ENCODING itself when the body does not decode.
func decodeJSON(w http.ResponseWriter, body []byte, what string, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, failure.New(failure.InvalidEncoding, api.OpCoordinator, what+": "+err.Error()))
		return false
	}
	return true
}
