package coord

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/failure"
)

// TestClientRetriesStaleNotFound: a node that does not know the leader
// yet (it restarted) answers a job read from its own empty state with a
// stale 404; the client asks the next node instead of taking it as the
// answer. A leader's 404 is an answer (the job does not exist), and 410
// says the job was deleted.
func TestClientRetriesStaleNotFound(t *testing.T) {
	var staleHits atomic.Int32
	stale := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		staleHits.Add(1)
		w.Header().Set("X-Tmmu-Stale", "1")
		writeError(w, http.StatusNotFound, errors.New(`no job "j"`))
	}))
	defer stale.Close()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/jobs/j":
			writeJSON(w, http.StatusOK, &api.Job{Spec: api.JobSpec{Name: "j"}, Status: api.StatusRunning, Epochs: []api.Epoch{{}}})
		case "/v1/jobs/gone":
			writeError(w, http.StatusGone, errors.New(`job "gone" was deleted`))
		default:
			writeError(w, http.StatusNotFound, errors.New("no such job"))
		}
	}))
	defer good.Close()
	c := api.NewClient(stale.URL, good.URL)
	j, err := c.RecentJob(context.Background(), "j")
	if err != nil || j.Spec.Name != "j" || staleHits.Load() == 0 {
		t.Fatalf("job %+v, err %v, stale node asked %d times", j, err, staleHits.Load())
	}
	if _, err := c.Job(context.Background(), "other"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a job the leader does not have: %v", err)
	}
	if _, err := c.Job(context.Background(), "gone"); !errors.Is(err, api.ErrGone) {
		t.Errorf("a deleted job: %v", err)
	}
	// Only stale nodes: not found, after the retries.
	only := api.NewClient(stale.URL)
	if _, err := only.Job(context.Background(), "j"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("only a stale node: %v", err)
	}
}

// TestClientRetriesLostLeadership: a replan whose commit lost the
// leadership half way is answered 503, which the client retries on the
// node that leads now (the request's id makes the retry idempotent); a
// refusal on its merits is 409 and not retried.
func TestClientRetriesLostLeadership(t *testing.T) {
	var lostHits atomic.Int32
	lost := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lostHits.Add(1)
		writeCommitError(w, fmt.Errorf("%w: %v", ErrNotLeader, raft.ErrLeadershipLost))
	}))
	defer lost.Close()
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/jobs/bad/replan" {
			writeCommitError(w, errors.New(`job "bad" is done`))
			return
		}
		writeJSON(w, http.StatusOK, api.ReplanReply{Ack: "accepted", Decision: "replan", Epoch: 2})
	}))
	defer leader.Close()
	c := api.NewClient(lost.URL, leader.URL)
	out, err := c.Replan(context.Background(), "j", "", &api.ReplanRequest{ID: "op-1", Reason: "try"})
	if err != nil || out.Epoch != 2 || lostHits.Load() != 1 {
		t.Fatalf("reply %+v, err %v, the node that lost the leadership asked %d times", out, err, lostHits.Load())
	}
	if _, err := c.Replan(context.Background(), "bad", "", &api.ReplanRequest{ID: "op-2", Reason: "try"}); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("a refused replan: %v", err)
	}
}

// TestClientKeepsFailureCodes: a failure a coordinator answers comes back
// to the client as the same typed error: errors.Is matches its code, and
// its operator, message and diagnostics are the server's.
func TestClientKeepsFailureCodes(t *testing.T) {
	sent := failure.New(failure.InvalidShardSpec, api.OpCoordinator, "data_parallel 2 × tensor_parallel 2 is not world_size 3", "field", "world_size")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/jobs":
			writeError(w, http.StatusBadRequest, sent)
		default:
			writeError(w, http.StatusConflict, errors.New("a plain error"))
		}
	}))
	defer srv.Close()
	c := api.NewClient(srv.URL)
	_, err := c.Submit(context.Background(), &api.SubmitRequest{Name: "j"})
	var got *failure.Error
	if !errors.Is(err, failure.InvalidShardSpec) || !errors.As(err, &got) || got.Operator != sent.Operator || got.Message != sent.Message || got.Diagnostics["field"] != "world_size" {
		t.Fatalf("got %#v (%v), want %v", got, err, sent)
	}
	if err.Error() != sent.Error() {
		t.Fatalf("message %q, want %q", err.Error(), sent.Error())
	}
	_, err = c.Job(context.Background(), "x")
	if failure.CodeOf(err) != "" || !strings.Contains(err.Error(), "409 Conflict: a plain error") {
		t.Fatalf("a plain error: %v", err)
	}
}
