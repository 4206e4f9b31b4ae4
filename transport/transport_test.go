package transport

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/tmmu/tmmu/ir"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewCreatesAndReusesBucket(t *testing.T) {
	s := startServer(t)
	ctx := testCtx(t)
	tr1, _ := newTransport(t, s, WithStorage(jetstream.MemoryStorage))
	st, err := tr1.kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 1 || st.Bucket() != Bucket {
		t.Fatalf("bucket %s history %d, want %s history 1", st.Bucket(), st.History(), Bucket)
	}
	if got := st.Config().Storage; got != jetstream.MemoryStorage {
		t.Fatalf("storage %v, want memory", got)
	}
	// A second transport (default file storage) reuses the bucket as is.
	tr2, _ := newTransport(t, s)
	r := report("job", 1, 0, hashOf("a"))
	if err := tr1.Report(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := tr2.Reports(ctx, "job", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != r {
		t.Fatalf("Reports via second transport = %v, want rank 0: %v", got, r)
	}
	if _, err := New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	// An identity the reports could not carry is refused up front.
	for _, id := range []string{"w\x00", strings.Repeat("w", MaxIdentityLen+1)} {
		if _, err := New(connect(t, s), WithIdentity(id)); err == nil || !strings.Contains(err.Error(), "identity") {
			t.Fatalf("New with identity %q: %v", id, err)
		}
	}
}

func TestReportCreateOnce(t *testing.T) {
	s := startServer(t)
	ctx := testCtx(t)
	tr, _ := newTransport(t, s)

	first := report("llama-7b", 3, 5, hashOf("plan-A"))
	if err := tr.Report(ctx, first); err != nil {
		t.Fatalf("first report: %v", err)
	}
	if err := tr.Report(ctx, first); err != nil {
		t.Fatalf("identical retry: %v", err)
	}

	other := first
	other.PlanHash = hashOf("plan-B")
	err := tr.Report(ctx, other)
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("different hash: err = %v, want ErrConflict", err)
	}
	for _, want := range []string{"rank 5", first.PlanHash.String(), other.PlanHash.String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("conflict error %q does not mention %q", err, want)
		}
	}

	// Another identity's report of the rank is stored under its own key:
	// which one counts is the leader's decision (the claim's holder).
	other2 := first
	other2.Identity = "someone-else"
	if err := tr.Report(ctx, other2); err != nil {
		t.Fatalf("same rank, other identity: %v", err)
	}

	got, err := tr.Reports(ctx, "llama-7b", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !slices.Contains(got, first) || !slices.Contains(got, other2) {
		t.Fatalf("stored = %v, want the first report %v and the other identity's", got, first)
	}

	// Invalid reports never reach the bucket.
	bad := first
	bad.PlanHash = [32]byte{}
	if err := tr.Report(ctx, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero hash: err = %v, want ErrInvalid", err)
	}
	bad = first
	bad.Job = "no.dots"
	if err := tr.Report(ctx, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad job: err = %v, want ErrInvalid", err)
	}
}

// TestReportConcurrentRanks: 64 ranks, each on its own connection, report
// concurrently (each one twice, as a retry would); Reports sees all 64, and
// none of a neighbouring epoch's.
func TestReportConcurrentRanks(t *testing.T) {
	const world = 64
	s := startServer(t)
	ctx := testCtx(t)
	leader, _ := newTransport(t, s)
	if err := leader.Report(ctx, report("job", 6, 0, hashOf("epoch 6"))); err != nil {
		t.Fatal(err)
	}
	want := planHashes("job", 7, world)
	workers := make([]*Transport, world)
	for r := range workers {
		workers[r], _ = newTransport(t, s)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*world)
	for r := range world {
		wg.Go(func() {
			rep := report("job", 7, uint64(r), want[r])
			errs <- workers[r].Report(ctx, rep)
			errs <- workers[r].Report(ctx, rep)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := leader.Reports(ctx, "job", 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != world {
		t.Fatalf("Reports returned %d reports, want %d", len(got), world)
	}
	for r := range uint64(world) {
		if got[r].PlanHash != want[r] || got[r].Rank != r || got[r].Epoch != 7 {
			t.Fatalf("rank %d: got %+v", r, got[r])
		}
	}
	if empty, err := leader.Reports(ctx, "job", 8); err != nil || len(empty) != 0 {
		t.Fatalf("Reports(epoch 8) = %v, %v; want empty", empty, err)
	}
}

// TestReportRaceOneRank: 16 contenders race to report different hashes for
// the same (job, epoch, rank): exactly one wins, every other one gets
// ErrConflict, and the winner's report is the one stored.
func TestReportRaceOneRank(t *testing.T) {
	const contenders = 16
	s := startServer(t)
	ctx := testCtx(t)
	tr, _ := newTransport(t, s)
	var wg sync.WaitGroup
	errs := make([]error, contenders)
	for i := range contenders {
		wg.Go(func() {
			errs[i] = tr.Report(ctx, report("job", 1, 2, hashOf("contender %d", i)))
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("contenders %d and %d both won", winner, i)
			}
			winner = i
		case !errors.Is(err, ErrConflict):
			t.Fatalf("contender %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no contender won")
	}
	got, err := tr.Reports(ctx, "job", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Rank != 2 || got[0].PlanHash != hashOf("contender %d", winner) {
		t.Fatalf("stored %s, want the winner's (%d)", got[2].PlanHash.Short(), winner)
	}
}

func TestWatchReports(t *testing.T) {
	s := startServer(t)
	ctx := testCtx(t)
	tr, _ := newTransport(t, s)
	worker, _ := newTransport(t, s)
	want := planHashes("job", 2, 8)
	for r := range 3 { // stored before the watch starts
		if err := worker.Report(ctx, report("job", 2, uint64(r), want[r])); err != nil {
			t.Fatal(err)
		}
	}
	// Noise the watch must not deliver.
	if err := worker.Report(ctx, report("job", 1, 0, hashOf("old"))); err != nil {
		t.Fatal(err)
	}
	if err := worker.Report(ctx, report("job2", 2, 0, hashOf("other job"))); err != nil {
		t.Fatal(err)
	}

	leaks := goleak.IgnoreCurrent()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := tr.WatchReports(wctx, "job", 2)
	if err != nil {
		t.Fatal(err)
	}
	for r := 3; r < 8; r++ { // stored after
		if err := worker.Report(ctx, report("job", 2, uint64(r), want[r])); err != nil {
			t.Fatal(err)
		}
	}
	tally := NewTally("job", 2, want)
	for !tally.Done() {
		select {
		case rep, ok := <-ch:
			if !ok {
				t.Fatal("channel closed early")
			}
			if res := tally.Add(rep); res != Accepted {
				t.Fatalf("report %+v: %v", rep, res)
			}
		case <-ctx.Done():
			t.Fatalf("timed out with %d of 8 reports", tally.Reported())
		}
	}
	if o := tally.Outcome(); !o.Agreed {
		t.Fatalf("outcome %+v", o)
	}

	cancel()
	for rep := range ch {
		t.Errorf("unexpected report after the tally was done: %+v", rep)
	}
	goleak.VerifyNone(t, leaks)
	if d := tr.Dropped(); d != 0 {
		t.Fatalf("Dropped() = %d", d)
	}
}

// TestWatchReportsConnClosed: the channel also closes when the connection
// does, and its goroutine returns.
func TestWatchReportsConnClosed(t *testing.T) {
	s := startServer(t)
	nc := connect(t, s)
	tr, err := New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := tr.WatchReports(context.Background(), "job", 1)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("got a report")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("channel not closed after the connection closed")
	}
}

// TestWatchReportsDropsGarbage: a value written to a report key by someone
// else (not decodable, or naming another rank) is skipped and counted.
func TestWatchReportsDropsGarbage(t *testing.T) {
	s := startServer(t)
	ctx := testCtx(t)
	tr, _ := newTransport(t, s)
	if _, err := tr.kv.Put(ctx, "job.1.0."+IdentityToken("worker-0"), []byte("not cbor")); err != nil {
		t.Fatal(err)
	}
	wrong, err := Encode(report("job", 1, 9, hashOf("x")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.kv.Put(ctx, "job.1.1."+IdentityToken("worker-9"), wrong); err != nil {
		t.Fatal(err)
	}
	// A report under another identity's token than its own.
	forged, err := Encode(report("job", 1, 3, hashOf("x")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.kv.Put(ctx, "job.1.3."+IdentityToken("worker-1"), forged); err != nil {
		t.Fatal(err)
	}
	good := report("job", 1, 2, hashOf("y"))
	if err := tr.Report(ctx, good); err != nil {
		t.Fatal(err)
	}
	got, err := tr.Reports(ctx, "job", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != good {
		t.Fatalf("Reports = %v", got)
	}
	if d := tr.Dropped(); d != 3 {
		t.Fatalf("Dropped() = %d, want 3", d)
	}
	// Reporting over a garbage key is a conflict, not a crash.
	if err := tr.Report(ctx, report("job", 1, 0, hashOf("z"))); !errors.Is(err, ErrConflict) {
		t.Fatalf("report over garbage: %v", err)
	}
}

func TestForget(t *testing.T) {
	s := startServer(t)
	ctx := testCtx(t)
	tr, _ := newTransport(t, s)
	for r := range uint64(4) {
		for _, e := range []uint64{1, 2, 12} {
			if err := tr.Report(ctx, report("job", e, r, hashOf("%d/%d", e, r))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tr.Forget(ctx, "job", 1); err != nil {
		t.Fatal(err)
	}
	if got, err := tr.Reports(ctx, "job", 1); err != nil || len(got) != 0 {
		t.Fatalf("after Forget: %v, %v", got, err)
	}
	for _, e := range []uint64{2, 12} { // "job.1.*" must not touch "job.12.*"
		if got, err := tr.Reports(ctx, "job", e); err != nil || len(got) != 4 {
			t.Fatalf("epoch %d after forgetting epoch 1: %d reports, %v", e, len(got), err)
		}
	}
	// A forgotten epoch can be reported again, with any hash.
	if err := tr.Report(ctx, report("job", 1, 0, hashOf("new"))); err != nil {
		t.Fatal(err)
	}
	if err := tr.Forget(ctx, "bad job", 1); err == nil {
		t.Fatal("Forget accepted a bad job name")
	}
}

// roundTrip subscribes with sub on one connection, publishes want with pub
// on another, and checks that exactly want arrives.
func roundTrip[T any](t *testing.T, want T,
	sub func(string, func(T)) (*nats.Subscription, error), subNC *nats.Conn,
	pub func(T) error, pubNC *nats.Conn) {
	t.Helper()
	got := make(chan T, 1)
	s, err := sub("job", func(v T) { got <- v })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	if err := subNC.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := pub(want); err != nil {
		t.Fatal(err)
	}
	if err := pubNC.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if !reflect.DeepEqual(v, want) {
			t.Fatalf("got %+v, want %+v", v, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
	}
}

func TestPublishSubscribeRoundTrip(t *testing.T) {
	s := startServer(t)
	a, anc := newTransport(t, s)
	b, bnc := newTransport(t, s)
	h := hashOf("plan")

	t.Run("outcome", func(t *testing.T) {
		want := Outcome{
			Job: "job", Epoch: 4, Agreed: false, StartStep: 100,
			Mismatches: []Mismatch{{Rank: 1, Expected: h, Got: hashOf("other")}},
			Missing:    []uint64{3, 7}, Reason: "deadline",
		}
		got := make(chan Outcome, 1)
		sub, err := b.SubscribeOutcomes("job", func(o Outcome) { got <- o })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := bnc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := a.PublishOutcome(want); err != nil {
			t.Fatal(err)
		}
		select {
		case o := <-got:
			if !reflect.DeepEqual(o, want) {
				t.Fatalf("got %+v, want %+v", o, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("timed out")
		}
	})
	t.Run("replan", func(t *testing.T) {
		roundTrip(t, ReplanRequest{Job: "job", Epoch: 4, Rank: 2, Step: 101, Reason: "oom", DedupeID: "r2-s101", Dims: map[string]uint64{"seq": 2048}, Identity: "w2"},
			b.SubscribeReplanRequests, bnc, a.PublishReplanRequest, anc)
	})
	t.Run("announce", func(t *testing.T) {
		roundTrip(t, Announcement{Job: "job", Epoch: 5, Kind: KindEpoch, StartStep: 102},
			b.SubscribeAnnouncements, bnc, a.PublishAnnouncement, anc)
	})
	t.Run("invalid-not-published", func(t *testing.T) {
		if err := a.PublishAnnouncement(Announcement{Job: "job", Kind: "reboot"}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("err = %v", err)
		}
		if err := a.PublishReplanRequest(ReplanRequest{Job: "a.b"}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("err = %v", err)
		}
		if _, err := a.SubscribeOutcomes("a.>", func(Outcome) {}); err == nil {
			t.Fatal("subscribed to a wildcard job")
		}
		if _, err := a.SubscribeOutcomes("job", nil); err == nil {
			t.Fatal("subscribed a nil handler")
		}
	})
	if d := a.Dropped() + b.Dropped(); d != 0 {
		t.Fatalf("dropped %d", d)
	}
}

// TestSubscribeDropsGarbage: undecodable, invalid and misaddressed messages
// are dropped and counted; the handler sees only the good one.
func TestSubscribeDropsGarbage(t *testing.T) {
	s := startServer(t)
	tr, nc := newTransport(t, s)
	raw := connect(t, s)
	got := make(chan ReplanRequest, 8)
	sub, err := tr.SubscribeReplanRequests("job", func(r ReplanRequest) { got <- r })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	good := ReplanRequest{Job: "job", Epoch: 1, Rank: 0, Step: 1, Reason: "seq=2048", DedupeID: "w0/1/1", Dims: map[string]uint64{"seq": 2048}, Identity: "w0"}
	otherJob := good
	otherJob.Job = "job2"
	otherJobBytes, _ := Encode(otherJob)
	noReason := good
	noReason.Reason = ""
	zeroBytes, _ := ir.CanonicalCBOR(noReason) // bypasses Encode's validation
	unknownField, _ := ir.CanonicalCBOR(map[string]any{"job": "job", "epoch": 1, "rank": 0, "step": 1, "reason": "r", "dedupe_id": "d", "extra": 1, "identity": "w0"})
	goodBytes, _ := Encode(good)
	subj := "tmmu.job.replan." + IdentityToken("w0")
	for _, data := range [][]byte{[]byte("garbage"), nil, otherJobBytes, zeroBytes, unknownField, goodBytes} {
		if err := raw.Publish(subj, data); err != nil {
			t.Fatal(err)
		}
	}
	// A request naming w0 on another identity's subject is rejected.
	if err := raw.Publish("tmmu.job.replan."+IdentityToken("w1"), goodBytes); err != nil {
		t.Fatal(err)
	}
	if err := raw.Publish(subj, goodBytes); err != nil {
		t.Fatal(err)
	}
	if err := raw.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if !reflect.DeepEqual(r, good) {
			t.Fatalf("got %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
	}
	// Messages on one subscription are delivered in order, so the five bad
	// ones were handled before the good one.
	if d := tr.Dropped(); d != 5 {
		t.Fatalf("Dropped() = %d, want 5", d)
	}
	select {
	case <-got: // the second good one, after the misaddressed one
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
	}
	if r := tr.Rejected(); r != 1 {
		t.Fatalf("Rejected() = %d, want 1 (the request on another identity's subject)", r)
	}
	if len(got) != 0 {
		t.Fatalf("%d extra messages delivered", len(got))
	}
}
