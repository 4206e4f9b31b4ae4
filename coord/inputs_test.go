package coord_test

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/failure"
)

// post sends body to url and returns the status and the decoded API
// error (empty on success), again while the cluster answers 503 (no
// leader for a while, on a loaded machine), as the client does; a
// submission answered 202 (still being planned on a loaded machine) is
// followed at its Location until it is answered.
func post(t *testing.T, url string, body []byte) (int, api.APIError) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusAccepted && loc != "" {
			loc = strings.TrimSuffix(url, "/v1/jobs") + loc
			for resp.StatusCode == http.StatusAccepted && time.Now().Before(deadline) {
				resp.Body.Close()
				time.Sleep(50 * time.Millisecond)
				if resp, err = http.Get(loc); err != nil {
					t.Fatal(err)
				}
			}
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var e api.APIError
		if resp.StatusCode >= 400 {
			if err := json.Unmarshal(data, &e); err != nil {
				t.Fatalf("%s: %s is not an API error: %v", url, data, err)
			}
		}
		return resp.StatusCode, e
	}
}

// TestBadInputsAreRefused: submissions past a bound, a body past the
// size limit and voters that could not serve are refused with the
// status and failure code that name the culprit, and nothing is
// committed: the job does not exist and the voters are the three
// there were.
func TestBadInputsAreRefused(t *testing.T) {
	c, li := startCluster(t)
	base := c.URLs()[li]
	good := tinySubmit(t, "bounded")
	for _, tc := range []struct {
		field string
		set   func(*api.SubmitRequest)
	}{
		{"window", func(r *api.SubmitRequest) { r.Window = math.MaxUint64 }},
		{"window", func(r *api.SubmitRequest) { r.Window = coord.MaxWindow + 1 }},
		{"steps", func(r *api.SubmitRequest) { r.Steps = coord.MaxSteps + 1 }},
		{"checkpoint_every", func(r *api.SubmitRequest) { r.CheckpointEvery = math.MaxUint64 }},
		{"checkpoint_keep", func(r *api.SubmitRequest) { r.CheckpointKeep = coord.MaxCheckpointKeep + 1 }},
		{"shard_spec.world_size", func(r *api.SubmitRequest) { r.ShardSpec = json.RawMessage(`{"world_size": 1000000}`) }},
	} {
		req := *good
		tc.set(&req)
		body, _ := json.Marshal(&req)
		status, e := post(t, base+"/v1/jobs", body)
		if status != http.StatusBadRequest || e.FailureCode != failure.InvalidOptions || !strings.Contains(e.Error, tc.field) {
			t.Errorf("%s past its bound: %d %s %q, want 400 INVALID_OPTIONS naming it", tc.field, status, e.FailureCode, e.Error)
		}
	}
	// A body past MaxSubmitBytes: 413, read no further than the limit.
	huge := append([]byte(`{"name": "huge", "ir": "`), bytes.Repeat([]byte("x"), api.MaxSubmitBytes)...)
	huge = append(huge, `"}`...)
	if status, e := post(t, base+"/v1/jobs", huge); status != http.StatusRequestEntityTooLarge || e.FailureCode != failure.InvalidEncoding {
		t.Errorf("a %d-byte submission: %d %s %q, want 413 INVALID_ENCODING", len(huge), status, e.FailureCode, e.Error)
	}
	// Voters that could not serve.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := closed.Addr().String()
	closed.Close()
	for _, tc := range []struct {
		peer api.Peer
		want string
	}{
		{api.Peer{ID: "c4", RaftAddr: "not-an-addr"}, "raft_addr"},
		{api.Peer{ID: "c4", RaftAddr: "127.0.0.1:0"}, "raft_addr"},
		{api.Peer{ID: "c4", RaftAddr: "127.0.0.1:99999"}, "raft_addr"},
		{api.Peer{ID: "c4", RaftAddr: silent}, "does not answer"},
		{api.Peer{ID: "c4", RaftAddr: c.Peers[0].RaftAddr, HTTPAddr: "nowhere"}, "http_addr"},
		{api.Peer{ID: "../c4", RaftAddr: c.Peers[0].RaftAddr}, "id"},
		{api.Peer{ID: c.Peers[(li+1)%3].ID, RaftAddr: c.Peers[li].RaftAddr}, "remove it before"},
	} {
		body, _ := json.Marshal(tc.peer)
		status, e := post(t, base+"/v1/voters", body)
		if status != http.StatusBadRequest || e.FailureCode != failure.InvalidOptions || !strings.Contains(e.Error, tc.want) {
			t.Errorf("voter %+v: %d %s %q, want 400 INVALID_OPTIONS naming %q", tc.peer, status, e.FailureCode, e.Error, tc.want)
		}
	}
	// Nothing committed.
	s, _ := c.Nodes[li].State()
	if len(s.Jobs) != 0 {
		t.Errorf("jobs after refused submissions: %v", s.Names())
	}
	cf := c.Nodes[li].Raft().GetConfiguration()
	if err := cf.Error(); err != nil || len(cf.Configuration().Servers) != 3 {
		t.Errorf("voters after refused additions: %+v (%v)", cf.Configuration().Servers, err)
	}
	// The cluster still takes a good submission; the same again is a
	// retry, a changed one is 409 naming what changed, and the job keeps
	// what was first submitted. Each is answered 202 first (the API
	// waits 1 ms for a plan), as on a loaded machine, and followed.
	for _, n := range c.Nodes {
		n.SetSubmitWait(time.Millisecond)
	}
	body, _ := json.Marshal(good)
	// (200 when a retry after a 503 finds it committed.)
	if status, e := post(t, base+"/v1/jobs", body); status != http.StatusCreated && status != http.StatusOK {
		t.Errorf("a good submission after the refusals: %d %q", status, e.Error)
	}
	if status, e := post(t, base+"/v1/jobs", body); status != http.StatusOK {
		t.Errorf("the same submission again: %d %q, want 200", status, e.Error)
	}
	changed := *good
	changed.Steps, changed.Window = 7, 3
	body, _ = json.Marshal(&changed)
	if status, e := post(t, base+"/v1/jobs", body); status != http.StatusConflict || !strings.Contains(e.Error, "differs in steps, window") {
		t.Errorf("a changed resubmission: %d %s %q, want 409 naming steps and window", status, e.FailureCode, e.Error)
	}
	li, err = c.Leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, _ = c.Nodes[li].State()
	if j := s.Jobs["bounded"]; j == nil || j.Spec.Steps != good.Steps || j.Spec.Window != api.DefaultWindow {
		t.Errorf("the job after a changed resubmission: %+v", j)
	}
}
