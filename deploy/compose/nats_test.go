// Package compose holds the docker-compose cluster's files; its tests
// check the NATS configuration the cluster runs with.
package compose

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/transport"
)

// startNATS runs nats.conf (this folder's) in process, on free ports and a
// temporary store, with the role passwords from the environment.
func startNATS(t *testing.T) *server.Server {
	t.Helper()
	t.Setenv("NATS_COORDINATOR_PASSWORD", "coord-pw")
	t.Setenv("NATS_WORKER_PASSWORD", "worker-pw")
	o, err := server.ProcessConfigFile("nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	o.Port, o.HTTPPort, o.StoreDir, o.NoLog, o.NoSigs = -1, -1, t.TempDir(), true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t *testing.T, s *server.Server, user, password string) (*nats.Conn, error) {
	opts, err := cli.NATSAuth(user, password, "")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err == nil {
		t.Cleanup(nc.Close)
		t.Cleanup(func() { close(errs) })
	}
	return nc, err
}

// TestRoles: the cluster's NATS refuses a worker with a wrong password or
// none; a worker with its credentials can do what a rank does (report,
// store steps, exchange collective data) but cannot publish an outcome or
// an announcement, which only coordinators may.
func TestRoles(t *testing.T) {
	s := startNATS(t)
	for _, c := range []struct{ user, password string }{{"worker", "wrong"}, {"coordinator", "worker-pw"}, {"", ""}} {
		if _, err := connect(t, s, c.user, c.password); err == nil || !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(err.Error(), "Authorization") {
			t.Errorf("user %q with password %q: %v, want an authorization error", c.user, c.password, err)
		}
	}
	cnc, err := connect(t, s, "coordinator", "coord-pw")
	if err != nil {
		t.Fatal(err)
	}
	coordT, err := transport.New(cnc) // creates the buckets
	if err != nil {
		t.Fatal(err)
	}
	wnc, err := connect(t, s, "worker", "worker-pw")
	if err != nil {
		t.Fatal(err)
	}
	workerT, err := transport.New(wnc)
	if err != nil {
		t.Fatalf("a worker opening the buckets: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := workerT.PutStep(ctx, transport.StepReport{Job: "j", Epoch: 0, Rank: 0, Step: 1, PlanHash: ir.Hash{1}}); err != nil {
		t.Fatalf("a worker storing a step report: %v", err)
	}
	steps, err := coordT.Steps(ctx, "j", 0)
	if err != nil || steps[0].Step != 1 {
		t.Fatalf("the coordinator reading it: %v %v", steps, err)
	}
	g, err := workerT.NewGroup("j", 0, 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if out, err := g.Exchange(ctx, "k", []byte("x")); err != nil || string(out[0]) != "x" {
		t.Fatalf("a worker's collective: %q %v", out, err)
	}
	// A worker stores its checkpoint shard and reports it; the
	// coordinator reads both; a recovery request reaches it.
	wstore, err := checkpoint.NewNATSStore(ctx, workerT.JetStream(), checkpoint.NATSConfig{})
	if err != nil {
		t.Fatalf("a worker opening the checkpoint store: %v", err)
	}
	name := checkpoint.ObjectName("j", 10, 0, ir.Hash{7})
	if err := wstore.Put(ctx, name, []byte("shard")); err != nil {
		t.Fatalf("a worker storing a shard: %v", err)
	}
	cstore, err := checkpoint.NewNATSStore(ctx, coordT.JetStream(), checkpoint.NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := cstore.Get(ctx, name); err != nil || string(data) != "shard" {
		t.Fatalf("the coordinator reading a shard: %q %v", data, err)
	}
	reports, err := coordT.WatchCheckpoints(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	rep := transport.CheckpointReport{Job: "j", Step: 10, Rank: 0, Identity: "w0", Digest: ir.Hash{7}, Bytes: 5}
	if err := workerT.PutCheckpoint(ctx, rep); err != nil {
		t.Fatalf("a worker reporting a checkpoint: %v", err)
	}
	if r := <-reports; r != rep {
		t.Fatalf("the coordinator reading a checkpoint report: %+v", r)
	}
	recov := make(chan transport.RecoveryRequest, 1)
	rsub, err := coordT.SubscribeRecovery("j", func(q transport.RecoveryRequest) { recov <- q })
	if err != nil {
		t.Fatal(err)
	}
	defer rsub.Unsubscribe()
	cnc.Flush()
	if err := workerT.PublishRecovery(transport.RecoveryRequest{Job: "j", Kind: transport.RecoverStateless, Identity: "w0", Step: 11}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-recov:
	case <-time.After(5 * time.Second):
		t.Fatal("a worker's recovery request did not arrive")
	}
	// An outcome published by a worker never reaches a subscriber: the
	// server refuses it.
	got := make(chan transport.Outcome, 1)
	sub, err := coordT.SubscribeOutcomes("j", func(o transport.Outcome) { got <- o })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	cnc.Flush()
	if err := workerT.PublishOutcome(transport.Outcome{Job: "j", Epoch: 0, Agreed: true}); err != nil {
		t.Fatal(err)
	}
	wnc.Flush()
	select {
	case o := <-got:
		t.Fatalf("a worker published an outcome: %+v", o)
	case <-time.After(300 * time.Millisecond):
	}
	if err := coordT.PublishOutcome(transport.Outcome{Job: "j", Epoch: 0, Agreed: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the coordinator's outcome did not arrive")
	}
}

// TestMonitoringOnLoopback: the monitoring port (connz lists every user
// and address) listens on the container's loopback only, where the
// healthcheck asks it.
func TestMonitoringOnLoopback(t *testing.T) {
	t.Setenv("NATS_COORDINATOR_PASSWORD", "coord-pw")
	t.Setenv("NATS_WORKER_PASSWORD", "worker-pw")
	o, err := server.ProcessConfigFile("nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if o.HTTPHost != "127.0.0.1" || o.HTTPPort != 8222 {
		t.Fatalf("monitoring on %s:%d, want 127.0.0.1:8222", o.HTTPHost, o.HTTPPort)
	}
}
