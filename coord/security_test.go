package coord_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord"
	"github.com/tmmu/tmmu/coord/coordtest"

	"github.com/hashicorp/raft"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/trust"
)

// tlsCluster starts 3 nodes whose raft transport and API speak TLS with
// certificates of one CA (written by trust.Generate under dir).
func tlsCluster(t *testing.T) (*coordtest.Cluster, trust.Layout) {
	t.Helper()
	dir := t.TempDir()
	l := trust.Layout{Dir: filepath.Join(dir, "secrets")}
	if _, err := trust.Generate(l.Dir, trust.Plan{Coordinators: []string{"c0", "c1", "c2", "c3"}, Workers: []string{"w0"}}, nil); err != nil {
		t.Fatal(err)
	}
	conf := func(i int) (*coord.RaftTLS, *tls.Config) {
		files := l.TLS(trust.RoleCoordinator, fmt.Sprint("c", i))
		s, err := files.Server(true, trust.RoleCoordinator)
		if err != nil {
			t.Fatal(err)
		}
		c, err := files.Client(trust.RoleCoordinator)
		if err != nil {
			t.Fatal(err)
		}
		api, err := files.Server(false)
		if err != nil {
			t.Fatal(err)
		}
		return &coord.RaftTLS{Server: s, Client: c}, api
	}
	c, err := coordtest.StartClusterWith(filepath.Join(dir, "coord"), 3, coordtest.ClusterOptions{
		Configure: func(i int, cfg *coord.Config) { cfg.RaftTLS, _ = conf(i); cfg.HTTPS = true },
		HTTPTLS:   func(i int) *tls.Config { _, api := conf(i); return api },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Leader(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c, l
}

// TestRaftRefusesPeersWithoutACoordinatorCertificate: the attack of issue
// 16 — a RequestVote as voter c2, with a higher term and leadership
// transfer, from a node on the network — over plain TCP, over TLS with no
// certificate, with a worker's certificate and with a coordinator
// certificate of another CA, is refused by every node; an append is
// refused the same way; the leader and its term stay; and a node
// configured with the foreign certificate cannot join as a voter.
func TestRaftRefusesPeersWithoutACoordinatorCertificate(t *testing.T) {
	c, l := tlsCluster(t)
	li, _ := c.Leader(10 * time.Second)
	leader, term := c.Nodes[li].ID(), c.Nodes[li].Raft().CurrentTerm()

	other := trust.Layout{Dir: t.TempDir()}
	if _, err := trust.Generate(other.Dir, trust.Plan{Coordinators: []string{"c2"}}, nil); err != nil {
		t.Fatal(err)
	}
	dialers := map[string]func() (raft.Transport, error){
		"plain TCP": func() (raft.Transport, error) {
			return raft.NewTCPTransport("127.0.0.1:0", nil, 1, time.Second, io.Discard)
		},
	}
	for name, files := range map[string]trust.TLSFiles{
		"TLS, no certificate":                {CA: l.CACert()},
		"TLS, a worker's certificate":        l.TLS(trust.RoleWorker, "w0"),
		"TLS, a coordinator's of another CA": {CA: l.CACert(), Cert: other.Cert(trust.RoleCoordinator, "c2"), Key: other.Key(trust.RoleCoordinator, "c2")},
	} {
		dialers[name] = func() (raft.Transport, error) {
			cl, err := files.Client()
			if err != nil {
				return nil, err
			}
			srv, err := l.TLS(trust.RoleCoordinator, "c3").Server(true)
			if err != nil {
				return nil, err
			}
			st, err := coord.NewTLSStream("127.0.0.1:0", nil, &coord.RaftTLS{Server: srv, Client: cl}, nil)
			if err != nil {
				return nil, err
			}
			return raft.NewNetworkTransport(st, 1, time.Second, io.Discard), nil
		}
	}
	for name, dial := range dialers {
		trans, err := dial()
		if err != nil {
			t.Fatal(name, err)
		}
		for _, p := range c.Peers {
			req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("c2"), Addr: []byte(p.RaftAddr)},
				Term: term + 100, LastLogIndex: 1 << 30, LastLogTerm: term + 100, LeadershipTransfer: true}
			var resp raft.RequestVoteResponse
			if err := trans.RequestVote("c2", raft.ServerAddress(p.RaftAddr), req, &resp); err == nil {
				t.Errorf("%s: %s answered the vote request (granted %v)", name, p.ID, resp.Granted)
			}
			app := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("c2"), Addr: []byte(p.RaftAddr)}, Term: term + 100}
			var aresp raft.AppendEntriesResponse
			if err := trans.AppendEntries("c2", raft.ServerAddress(p.RaftAddr), app, &aresp); err == nil {
				t.Errorf("%s: %s took an append (success %v)", name, p.ID, aresp.Success)
			}
		}
		if c, ok := trans.(io.Closer); ok {
			c.Close()
		}
	}
	time.Sleep(time.Second)
	for _, n := range c.Nodes {
		// 4 dialers, a vote and an append each, on every node: each
		// refused connection is counted (raft may dial again after one).
		if got := n.RaftRefused(); got < 8 {
			t.Errorf("%s counted %v refused raft connections, want at least 8", n.ID(), got)
		}
	}
	li2, err := c.Leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if c.Nodes[li2].ID() != leader || c.Nodes[li2].Raft().CurrentTerm() != term {
		t.Fatalf("leadership moved: %s term %d → %s term %d", leader, term, c.Nodes[li2].ID(), c.Nodes[li2].Raft().CurrentTerm())
	}

	// A node with the foreign CA's certificate, added as a voter by the
	// leader, never catches up: it cannot talk to the others.
	srv, _ := other.TLS(trust.RoleCoordinator, "c2").Server(true, trust.RoleCoordinator)
	cl, _ := other.TLS(trust.RoleCoordinator, "c2").Client(trust.RoleCoordinator)
	ra, _ := coordtest.FreeAddr()
	rogue, err := coord.Open(coord.Config{ID: "rogue", RaftAddr: ra, DataDir: t.TempDir(), RaftTLS: &coord.RaftTLS{Server: srv, Client: cl}, Peers: c.Peers})
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Shutdown()
	time.Sleep(2 * time.Second)
	if _, idx := rogue.AppliedState(); idx != 0 || rogue.IsLeader() {
		t.Fatalf("the node with another CA's certificate applied index %d (leader %v)", idx, rogue.IsLeader())
	}
}

// TestSubmissionsArePlannedOffTheRequestPath: with the planner busy, a
// submission is answered 202 (and /v1/submissions/{name} 202) instead of
// holding the request; past MaxQueued it is 503 with Retry-After; once the
// planner is free every queued submission is committed, and the client
// follows a 202 to the job. The raft log and snapshot hold the IR's
// digest, never the IR: the IR store does, and the API serves it back
// byte for byte, from every node.
func TestSubmissionsArePlannedOffTheRequestPath(t *testing.T) {
	c, li := startCluster(t)
	for _, n := range c.Nodes {
		n.SetSubmitWait(100 * time.Millisecond)
	}
	lead := c.Nodes[li]
	lead.Planning() <- struct{}{} // the planner is busy
	base := c.URLs()[li]
	post := func(name string) (int, http.Header) {
		t.Helper()
		body, _ := jsonBody(tinySubmit(t, name))
		resp, err := http.Post(base+"/v1/jobs", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	for i := range coord.MaxQueued {
		if s, h := post(fmt.Sprint("q", i)); s != http.StatusAccepted || h.Get("Location") != fmt.Sprint("/v1/submissions/q", i) {
			t.Fatalf("submission %d while the planner is busy: %d (Location %q), want 202", i, s, h.Get("Location"))
		}
	}
	if s, h := post("over"); s != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
		t.Fatalf("a submission past %d queued: %d, want 503 with Retry-After", coord.MaxQueued, s)
	}
	resp, err := http.Get(base + "/v1/submissions/q0")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("GET /v1/submissions/q0 while planning: %d", resp.StatusCode)
	}
	<-lead.Planning()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := api.NewClient(c.URLs()...)
	for i := range coord.MaxQueued {
		j, err := cl.Submit(ctx, tinySubmit(t, fmt.Sprint("q", i))) // follows 202s to the answer
		if err != nil || j.Spec.Name != fmt.Sprint("q", i) {
			t.Fatalf("q%d: %v", i, err)
		}
	}
	j, err := cl.Job(ctx, "q0")
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Spec.Model) != 0 || j.Spec.ModelDigest.IsZero() {
		t.Fatalf("the committed job holds %d bytes of IR and digest %s", len(j.Spec.Model), j.Spec.ModelDigest)
	}
	m, _ := jsonModel(tinySubmit(t, "q0"))
	want, _ := m.EncodeCBOR()
	if ir.Hash(sha256.Sum256(want)) != j.Spec.ModelDigest {
		t.Fatal("the committed digest is not the IR's")
	}
	// Every node serves the IR from the store; no log entry carries it.
	for i, n := range c.Nodes {
		got, err := n.Model(ctx, api.ModelRef{Digest: j.Spec.ModelDigest})
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("node %d: the IR from the store: %v", i, err)
		}
		entries, err := n.LogEntries()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if bytes.Contains(e.Data, want[:min(len(want), 256)]) {
				t.Fatalf("node %d: log entry %d (%d bytes) carries the IR", i, e.Index, len(e.Data))
			}
		}
	}
	snap, err := c.Nodes[li].SnapshotBytes()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(snap, want[:256]) || len(snap) > 64<<10 {
		t.Fatalf("the snapshot (%d bytes) carries the IR", len(snap))
	}
}

func jsonBody(req *api.SubmitRequest) ([]byte, error) { return json.Marshal(req) }

func jsonModel(req *api.SubmitRequest) (*ir.Model, error) { return ir.DecodeJSON(req.IR) }
