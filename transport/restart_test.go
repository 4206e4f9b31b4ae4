package transport

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/internal/freeport"
)

// restartable is a nats-server with JetStream on disk that a test stops
// and starts again on the same port and store, as an operator restarting
// NATS does.
type restartable struct {
	t    *testing.T
	opts server.Options
	mu   sync.Mutex
	s    *server.Server
}

func newRestartable(t *testing.T) *restartable {
	// A port below the kernel's ephemeral range, which no listener on
	// port 0 nor outgoing connection is given, so that none takes it
	// while NATS is down (see internal/freeport).
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	r := &restartable{t: t, opts: server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *restartable) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.opts
	s, err := server.NewServer(&o)
	if err != nil {
		r.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		r.t.Fatal("nats-server not ready")
	}
	r.s = s
}

func (r *restartable) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.s != nil {
		r.s.Shutdown()
		r.s.WaitForShutdown()
		r.s = nil
	}
}

func (r *restartable) url() string { return r.s.ClientURL() }

// TestWatchesRideThroughARestart: NATS stops for a second and comes back
// with its JetStream store. Step reports stored after the restart reach a
// watch opened before it, promptly (not after the client's 10-second
// heartbeat check), a collective exchange started while NATS is down
// completes once it is back, and checkpoint reports round-trip.
func TestWatchesRideThroughARestart(t *testing.T) {
	r := newRestartable(t)
	dial := func() *Transport {
		nc, err := nats.Connect(r.url(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		tr, err := New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	a, b := dial(), dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	steps, err := a.WatchJobSteps(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	ckpts, err := a.WatchCheckpoints(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	h := hashOf("plan")
	if err := b.PutStep(ctx, StepReport{Job: "j", Epoch: 0, Rank: 1, Step: 1, PlanHash: h, Identity: "w1"}); err != nil {
		t.Fatal(err)
	}
	if got := <-steps; got.Step != 1 {
		t.Fatalf("before the restart: %+v", got)
	}
	ga, err := a.NewGroup("j", 0, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ga.Close()
	gb, err := b.NewGroup("j", 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gb.Close()

	r.stop()
	// An exchange that starts while NATS is down waits for it.
	type result struct {
		all [][]byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		all, err := ga.Exchange(ctx, "e1/7/node", []byte("from 0"))
		done <- result{all, err}
	}()
	time.Sleep(time.Second)
	r.start()
	back := time.Now()
	for {
		err := b.PutStep(ctx, StepReport{Job: "j", Epoch: 0, Rank: 1, Step: 2, PlanHash: h, Identity: "w1"})
		if err == nil {
			break
		}
		if time.Since(back) > 20*time.Second {
			t.Fatalf("putting a step report after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case got := <-steps:
		if got.Step != 2 {
			t.Fatalf("after the restart: %+v", got)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the watch did not deliver a report stored after the restart within 8 s")
	}
	seen := time.Since(back)
	if _, err := gb.Exchange(ctx, "e1/7/node", []byte("from 1")); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || string(res.all[0]) != "from 0" || string(res.all[1]) != "from 1" {
		t.Fatalf("the exchange across the restart: %q %v", res.all, res.err)
	}
	rep := CheckpointReport{Job: "j", Step: 10, Epoch: 0, Rank: 1, Identity: "w1", Digest: hashOf("d"), StateHash: hashOf("s"), Bytes: 100}
	if err := b.PutCheckpoint(ctx, rep); err != nil {
		t.Fatal(err)
	}
	if got := <-ckpts; got != rep {
		t.Fatalf("checkpoint report: %+v", got)
	}
	if err := b.ForgetCheckpoint(ctx, "j", 10); err != nil {
		t.Fatal(err)
	}
	t.Logf("a step report stored after NATS came back reached the watch %s later (%d watch reopenings); the exchange retried %d stores", seen.Round(time.Millisecond), a.Resumed(), ga.Retries())
}

func TestRecoveryRequests(t *testing.T) {
	s := startServer(t)
	tr, err := New(connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan RecoveryRequest, 1)
	sub, err := tr.SubscribeRecovery("j", func(r RecoveryRequest) { got <- r })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	q := RecoveryRequest{Job: "j", Kind: RecoverStateless, Rank: 2, Identity: "w2", Step: 41, Detail: "a new process"}
	if err := tr.PublishRecovery(q); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != q {
		t.Fatalf("got %+v", r)
	}
	for _, bad := range []RecoveryRequest{{Job: "j", Kind: "other", Identity: "x"}, {Job: "j", Kind: RecoverCorrupt}, {Kind: RecoverCorrupt, Identity: "x"}} {
		if err := tr.PublishRecovery(bad); err == nil {
			t.Errorf("%+v was published", bad)
		}
	}
}
