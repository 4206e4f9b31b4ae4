package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/tmmu/tmmu/internal/freeport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// freeURL returns an http URL on a loopback port that was free a moment
// ago, never the same one twice (see internal/freeport).
func freeURL(t *testing.T) url.URL {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return url.URL{Scheme: "http", Host: addr}
}

// startEtcd starts a single-member embedded etcd server for the test and
// returns its client endpoint. The server is closed in t.Cleanup.
func startEtcd(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	curl, purl := freeURL(t), freeURL(t)
	cfg.ListenClientUrls = []url.URL{curl}
	cfg.AdvertiseClientUrls = []url.URL{curl}
	cfg.ListenPeerUrls = []url.URL{purl}
	cfg.AdvertisePeerUrls = []url.URL{purl}
	cfg.InitialCluster = cfg.Name + "=" + purl.String()
	cfg.LogLevel = "error"
	// Even at level error, a clean Close logs "server closed" errors from
	// the serving goroutines; start-up failures still surface through
	// StartEtcd and e.Err().
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd failed: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("etcd not ready after 10s")
	}
	return curl.String()
}

// newEtcdClient connects to endpoint; the client is closed in t.Cleanup
// (before the server, which was registered earlier).
func newEtcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// setup starts a server and returns a raw etcd client and a rendezvous
// client on it using prefix "/test" and the given TTL.
func setup(t *testing.T, ttl int64) (*clientv3.Client, *Client) {
	t.Helper()
	cli := newEtcdClient(t, startEtcd(t))
	return cli, New(cli, "/test", ttl)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustClaim(t *testing.T, ctx context.Context, c *Client, job string, world uint64, id string) *Claim {
	t.Helper()
	cl, err := c.Claim(ctx, job, world, id)
	if err != nil {
		t.Fatalf("Claim(%q, %d, %q): %v", job, world, id, err)
	}
	return cl
}

func mustMissing(t *testing.T, ctx context.Context, c *Client, job string, world uint64) []uint64 {
	t.Helper()
	m, err := c.Missing(ctx, job, world)
	if err != nil {
		t.Fatalf("Missing: %v", err)
	}
	return m
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not closed after 10s", what)
	}
}

// pollMissing waits until Missing(job, world) equals want.
func pollMissing(t *testing.T, ctx context.Context, c *Client, job string, world uint64, want []uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := mustMissing(t, ctx, c, job, world)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Missing = %v, want %v after 10s", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConcurrentClaims: 8 workers with their own etcd connections claim a
// world of 8 at once and get a permutation of 0..7; Members shows all of them
// present; a 9th identity gets ErrJobFull.
func TestConcurrentClaims(t *testing.T) {
	endpoint := startEtcd(t)
	ctx := testCtx(t)
	const world = 8
	claims := make([]*Claim, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range world {
		c := New(newEtcdClient(t, endpoint), "/test", 0)
		wg.Go(func() {
			<-start
			claims[i], errs[i] = c.Claim(ctx, "job", world, fmt.Sprintf("worker-%d", i))
		})
	}
	close(start)
	wg.Wait()

	seen := make([]bool, world)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker-%d: %v", i, err)
		}
		cl := claims[i]
		if cl.Rank >= world || seen[cl.Rank] {
			t.Fatalf("worker-%d got rank %d; ranks must be a permutation of 0..%d", i, cl.Rank, world-1)
		}
		seen[cl.Rank] = true
		if cl.Identity != fmt.Sprintf("worker-%d", i) || cl.Job != "job" || cl.Lease == 0 || cl.Revision <= 0 {
			t.Fatalf("bad claim %+v", cl)
		}
	}

	c := New(newEtcdClient(t, endpoint), "/test", 0)
	members, err := c.Members(ctx, "job", world)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range claims {
		if m := members[cl.Rank]; m != (Member{Rank: cl.Rank, Identity: cl.Identity, Present: true}) {
			t.Fatalf("member %d = %+v, want held by %q", cl.Rank, m, cl.Identity)
		}
	}
	if m := mustMissing(t, ctx, c, "job", world); len(m) != 0 {
		t.Fatalf("Missing = %v, want none", m)
	}

	if _, err := c.Claim(ctx, "job", world, "worker-8"); !errors.Is(err, ErrJobFull) {
		t.Fatalf("9th claim: err = %v, want ErrJobFull", err)
	}
	// Another job under the same prefix is independent.
	if cl := mustClaim(t, ctx, c, "job2", 1, "worker-8"); cl.Rank != 0 {
		t.Fatalf("job2 rank = %d, want 0", cl.Rank)
	}
	for _, cl := range claims {
		if err := cl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReleaseKeepsReservation: a released claim, or one whose lease is
// revoked behind its back, shows as missing but stays reserved: a new
// identity gets ErrJobFull while the job has no free rank, and the same
// identity gets its rank back. Release is idempotent and closes Lost.
func TestReleaseKeepsReservation(t *testing.T) {
	cli, c := setup(t, 0)
	ctx := testCtx(t)
	const world = 3
	a := mustClaim(t, ctx, c, "job", world, "a")
	b := mustClaim(t, ctx, c, "job", world, "b")
	d := mustClaim(t, ctx, c, "job", world, "d")
	if a.Rank != 0 || b.Rank != 1 || d.Rank != 2 {
		t.Fatalf("ranks = %d,%d,%d; want lowest free ranks 0,1,2", a.Rank, b.Rank, d.Rank)
	}
	if isClosed(a.Lost()) {
		t.Fatal("Lost closed on a live claim")
	}

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	waitClosed(t, a.Lost(), "Lost after Release")
	// Revoke d's lease directly, as an operator or the server would.
	if _, err := cli.Revoke(ctx, d.Lease); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, d.Lost(), "Lost after revoke")

	if got := mustMissing(t, ctx, c, "job", world); !slices.Equal(got, []uint64{0, 2}) {
		t.Fatalf("Missing = %v, want [0 2]", got)
	}
	members, err := c.Members(ctx, "job", world)
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{{0, "a", false}, {1, "b", true}, {2, "d", false}}
	if !slices.Equal(members, want) {
		t.Fatalf("Members = %+v, want %+v", members, want)
	}

	// Reserved ranks are not handed to newcomers.
	if _, err := c.Claim(ctx, "job", world, "newcomer"); !errors.Is(err, ErrJobFull) {
		t.Fatalf("newcomer: err = %v, want ErrJobFull", err)
	}

	a2 := mustClaim(t, ctx, c, "job", world, "a")
	d2 := mustClaim(t, ctx, c, "job", world, "d")
	if a2.Rank != 0 || d2.Rank != 2 {
		t.Fatalf("reclaimed ranks %d,%d; want 0,2", a2.Rank, d2.Rank)
	}
	if a2.Lease == a.Lease || a2.Revision <= a.Revision {
		t.Fatalf("reclaim must have a new lease and a later revision: %+v vs %+v", a2, a)
	}
	if got := mustMissing(t, ctx, c, "job", world); len(got) != 0 {
		t.Fatalf("Missing = %v, want none", got)
	}
	// Releasing after a revoke treats the gone lease as released.
	if err := d.Release(ctx); err != nil {
		t.Fatalf("Release of a revoked claim: %v", err)
	}
	for _, cl := range []*Claim{a2, b, d2} {
		if err := cl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := mustMissing(t, ctx, c, "job", world); !slices.Equal(got, []uint64{0, 1, 2}) {
		t.Fatalf("Missing = %v, want [0 1 2]", got)
	}
}

// TestLeaseExpiry: when keepalives stop without a revoke (a hung worker),
// Lost is closed and the rank key disappears once the lease TTL (2 s) runs
// out; the rank becomes missing, the reservation stays, and Release of the
// expired claim succeeds.
func TestLeaseExpiry(t *testing.T) {
	cli, c := setup(t, 2)
	ctx := testCtx(t)
	a := mustClaim(t, ctx, c, "job", 2, "a")
	b := mustClaim(t, ctx, c, "job", 2, "b")

	if got := mustMissing(t, ctx, c, "job", 2); len(got) != 0 {
		t.Fatalf("Missing = %v before expiry, want none", got)
	}

	a.stopKeepAlive() // no revoke: the lease runs out on the server
	waitClosed(t, a.Lost(), "Lost after keepalive stopped")
	pollMissing(t, ctx, c, "job", 2, []uint64{a.Rank})
	if isClosed(b.Lost()) {
		t.Fatal("b lost its lease although its keepalive runs")
	}
	members, err := c.Members(ctx, "job", 2)
	if err != nil {
		t.Fatal(err)
	}
	if members[a.Rank] != (Member{Rank: a.Rank, Identity: "a", Present: false}) {
		t.Fatalf("member %d = %+v, want reserved by a, not present", a.Rank, members[a.Rank])
	}
	ttl, err := cli.TimeToLive(ctx, a.Lease)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("expired lease has TTL %d, want -1", ttl.TTL)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release of an expired claim: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClientCloseLosesLease: a worker whose etcd client goes away (the
// process died) loses its claim: Lost is closed at once and the rank becomes
// missing after the TTL.
func TestClientCloseLosesLease(t *testing.T) {
	endpoint := startEtcd(t)
	ctx := testCtx(t)
	obs := New(newEtcdClient(t, endpoint), "/test", 2)
	workerCli := newEtcdClient(t, endpoint)
	a := mustClaim(t, ctx, New(workerCli, "/test", 2), "job", 1, "a")
	if err := workerCli.Close(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, a.Lost(), "Lost after client close")
	pollMissing(t, ctx, obs, "job", 1, []uint64{0})
	// The reservation outlives the worker; a restart gets rank 0 again.
	if cl := mustClaim(t, ctx, obs, "job", 1, "a"); cl.Rank != 0 {
		t.Fatalf("restart got rank %d, want 0", cl.Rank)
	}
}

// TestContextCancelStopsKeepAlive: cancelling the context given to Claim
// stops the keepalive and closes Lost.
func TestContextCancelStopsKeepAlive(t *testing.T) {
	_, c := setup(t, 0)
	ctx, cancel := context.WithCancel(testCtx(t))
	a := mustClaim(t, ctx, c, "job", 1, "a")
	cancel()
	waitClosed(t, a.Lost(), "Lost after ctx cancel")
	if err := a.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := mustMissing(t, testCtx(t), c, "job", 1); !slices.Equal(got, []uint64{0}) {
		t.Fatalf("Missing = %v, want [0]", got)
	}
}

// TestReclaimWhileLive: a second Claim by an identity whose first claim is
// live gets the same rank with a fresh lease and a higher revision; the rank
// key moves to the new lease, so releasing the stale claim does not make the
// rank missing.
func TestReclaimWhileLive(t *testing.T) {
	cli, c := setup(t, 0)
	ctx := testCtx(t)
	_ = mustClaim(t, ctx, c, "job", 2, "x")
	first := mustClaim(t, ctx, c, "job", 2, "a")
	second := mustClaim(t, ctx, c, "job", 2, "a")
	if first.Rank != 1 || second.Rank != 1 {
		t.Fatalf("ranks %d,%d; want 1,1", first.Rank, second.Rank)
	}
	if second.Lease == first.Lease || second.Revision <= first.Revision {
		t.Fatalf("second claim must have a fresh lease and a later revision: %+v vs %+v", second, first)
	}
	resp, err := cli.Get(ctx, "/test/jobs/job/ranks/1")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != second.Lease || string(resp.Kvs[0].Value) != "a" {
		t.Fatalf("rank key = %v, want value a under lease %x", resp.Kvs, second.Lease)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustMissing(t, ctx, c, "job", 2); len(got) != 0 {
		t.Fatalf("Missing = %v after releasing the stale claim, want none", got)
	}
	if isClosed(second.Lost()) {
		t.Fatal("releasing the stale claim closed the live claim's Lost")
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustMissing(t, ctx, c, "job", 2); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("Missing = %v, want [1]", got)
	}
}

// TestForget: Forget drops a reservation so a new identity can take the rank;
// the forgotten identity then finds the job full. Forgetting an unknown
// identity is not an error.
func TestForget(t *testing.T) {
	_, c := setup(t, 0)
	ctx := testCtx(t)
	a := mustClaim(t, ctx, c, "job", 1, "a")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "job", 1, "b"); !errors.Is(err, ErrJobFull) {
		t.Fatalf("b before Forget: err = %v, want ErrJobFull", err)
	}
	if err := c.Forget(ctx, "job", "a"); err != nil {
		t.Fatal(err)
	}
	members, err := c.Members(ctx, "job", 1)
	if err != nil {
		t.Fatal(err)
	}
	if members[0] != (Member{Rank: 0}) {
		t.Fatalf("member 0 after Forget = %+v, want free", members[0])
	}
	b := mustClaim(t, ctx, c, "job", 1, "b")
	if b.Rank != 0 {
		t.Fatalf("b got rank %d, want 0", b.Rank)
	}
	if _, err := c.Claim(ctx, "job", 1, "a"); !errors.Is(err, ErrJobFull) {
		t.Fatalf("forgotten a: err = %v, want ErrJobFull", err)
	}
	if err := c.Forget(ctx, "job", "nobody"); err != nil {
		t.Fatalf("Forget of unknown identity: %v", err)
	}

	// Forgetting a live holder keeps its rank key: the rank stays present
	// (with no reserving identity) and is not given away until the lease ends.
	if err := c.Forget(ctx, "job", "b"); err != nil {
		t.Fatal(err)
	}
	if members, err = c.Members(ctx, "job", 1); err != nil {
		t.Fatal(err)
	}
	if members[0] != (Member{Rank: 0, Present: true}) {
		t.Fatalf("member 0 = %+v, want present and unreserved", members[0])
	}
	if _, err := c.Claim(ctx, "job", 1, "c"); !errors.Is(err, ErrJobFull) {
		t.Fatalf("c while forgotten b is live: err = %v, want ErrJobFull", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if cl := mustClaim(t, ctx, c, "job", 1, "c"); cl.Rank != 0 {
		t.Fatalf("c got rank %d, want 0", cl.Rank)
	}
}

// TestForeignHolder: a reservation whose rank key is held by another
// identity (inconsistent state, written here by hand) makes Claim fail with
// an error naming both identities, and leaves the keys alone.
func TestForeignHolder(t *testing.T) {
	cli, c := setup(t, 0)
	ctx := testCtx(t)
	if _, err := cli.Put(ctx, "/test/jobs/job/identities/alice", "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/test/jobs/job/ranks/0", "bob"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Claim(ctx, "job", 2, "alice")
	if err == nil || !strings.Contains(err.Error(), `"alice"`) || !strings.Contains(err.Error(), `"bob"`) ||
		!strings.HasPrefix(err.Error(), "rendezvous: ") {
		t.Fatalf("err = %v, want an error naming alice and bob", err)
	}
	resp, err := cli.Get(ctx, "/test/jobs/job/ranks/0")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "bob" {
		t.Fatalf("rank key changed: %v %v", resp, err)
	}
	// A reservation outside the world is also refused.
	if _, err := cli.Put(ctx, "/test/jobs/job/identities/carol", "5"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(ctx, "job", 2, "carol"); err == nil || !strings.Contains(err.Error(), "outside world") {
		t.Fatalf("carol: err = %v, want outside-world error", err)
	}
	// The failed claims revoked their leases.
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Leases) != 0 {
		t.Fatalf("failed claims left %d leases", len(leases.Leases))
	}
}

// TestDefaults: New with "" and 0 uses the prefix "/tmmu" and a 10 s TTL.
func TestDefaults(t *testing.T) {
	cli := newEtcdClient(t, startEtcd(t))
	ctx := testCtx(t)
	c := New(cli, "", 0)
	a := mustClaim(t, ctx, c, "job", 1, "a")
	resp, err := cli.Get(ctx, "/tmmu/jobs/job/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	want := map[string]string{"/tmmu/jobs/job/ranks/0": "a", "/tmmu/jobs/job/identities/a": "0"}
	if len(got) != len(want) || got["/tmmu/jobs/job/ranks/0"] != "a" || got["/tmmu/jobs/job/identities/a"] != "0" {
		t.Fatalf("keys = %v, want %v", got, want)
	}
	ttl, err := cli.TimeToLive(ctx, a.Lease)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != DefaultTTL {
		t.Fatalf("granted TTL = %d, want %d", ttl.GrantedTTL, DefaultTTL)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestInvalidArguments: world 0, empty names and names with '/' are refused
// with ErrInvalidArgument and a "rendezvous: " prefix, before touching etcd.
func TestInvalidArguments(t *testing.T) {
	_, c := setup(t, 0)
	ctx := testCtx(t)
	claim := func(job string, world uint64, id string) func() error {
		return func() error { _, err := c.Claim(ctx, job, world, id); return err }
	}
	cases := map[string]func() error{
		"claim world 0":         claim("job", 0, "a"),
		"claim world too large": claim("job", 1<<40, "a"),
		"claim empty job":       claim("", 1, "a"),
		"claim slash job":       claim("a/b", 1, "a"),
		"claim empty identity":  claim("job", 1, ""),
		"claim slash identity":  claim("job", 1, "x/y"),
		"members world 0": func() error {
			_, err := c.Members(ctx, "job", 0)
			return err
		},
		"members slash job": func() error {
			_, err := c.Members(ctx, "a/b", 1)
			return err
		},
		"missing empty job": func() error {
			_, err := c.Missing(ctx, "", 1)
			return err
		},
		"forget empty identity": func() error { return c.Forget(ctx, "job", "") },
		"forget slash job":      func() error { return c.Forget(ctx, "/", "a") },
	}
	for name, f := range cases {
		err := f()
		if !errors.Is(err, ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "rendezvous: ") {
			t.Errorf("%s: err = %v, want rendezvous: ... ErrInvalidArgument", name, err)
		}
	}
	resp, err := c.cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("invalid calls wrote %d keys", resp.Count)
	}
}

// TestHeldAt: a claim's revision proves its identity holds the rank
// (also after the identity claims again); another identity, another rank,
// a made-up or future revision prove nothing; once etcd compacted the
// revision away, the reservation answers; a forgotten identity's old
// claim no longer proves a rank another identity now holds.
func TestHeldAt(t *testing.T) {
	cli, c := setup(t, 0)
	ctx := testCtx(t)
	a := mustClaim(t, ctx, c, "job", 2, "a")
	b := mustClaim(t, ctx, c, "job", 2, "b")
	again := mustClaim(t, ctx, c, "job", 2, "a")
	held := func(rank uint64, id string, rev int64) bool {
		t.Helper()
		ok, err := c.HeldAt(ctx, "job", rank, id, rev)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, tc := range []struct {
		rank uint64
		id   string
		rev  int64
		want bool
	}{
		{a.Rank, "a", a.Revision, true},
		{a.Rank, "a", again.Revision, true},
		{b.Rank, "b", b.Revision, true},
		{b.Rank, "a", b.Revision, false}, // a at b's claim
		{b.Rank, "a", a.Revision, false}, // a's revision, b's rank
		{a.Rank, "b", a.Revision, false},
		{a.Rank, "a", b.Revision, false}, // b's transaction
		{a.Rank, "a", 0, false},
		{a.Rank, "a", again.Revision + 1000, false}, // the future
	} {
		if got := held(tc.rank, tc.id, tc.rev); got != tc.want {
			t.Errorf("HeldAt(rank %d, %q, revision %d) = %v, want %v", tc.rank, tc.id, tc.rev, got, tc.want)
		}
	}
	// Compacted: the reservation answers.
	st, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, st.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if !held(a.Rank, "a", a.Revision) || held(a.Rank, "b", a.Revision) || held(b.Rank, "a", b.Revision) {
		t.Fatal("after compaction the reservations do not answer as the history did")
	}
	// a is forgotten and its rank goes to c: a's old claims prove nothing.
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Forget(ctx, "job", "a"); err != nil {
		t.Fatal(err)
	}
	cc := mustClaim(t, ctx, c, "job", 2, "c")
	if cc.Rank != a.Rank || held(a.Rank, "a", again.Revision) || !held(cc.Rank, "c", cc.Revision) {
		t.Fatalf("after forgetting a: c has rank %d; a's claim holds %v", cc.Rank, held(a.Rank, "a", again.Revision))
	}
}

// TestMalformedKeysBlockOnlyTheirOwner: keys this package does not write
// (a rank key that is not a number, an identity key holding no rank, two
// identities reserving one rank) are skipped and listed by Survey;
// every other identity claims as usual, the owner of a bad key is
// refused with ErrBadReservation naming the key, and once the key is
// forgotten it claims a free rank.
func TestMalformedKeysBlockOnlyTheirOwner(t *testing.T) {
	cli, c := setup(t, 0)
	ctx := testCtx(t)
	for k, v := range map[string]string{
		"/test/jobs/job/identities/zz":  "x",
		"/test/jobs/job/ranks/abc":      "y",
		"/test/jobs/job/identities/amy": "1",
		"/test/jobs/job/identities/bob": "1",
		"/test/jobs/job/stray":          "z",
	} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	_, probs, err := c.Survey(ctx, "job", 3)
	if err != nil || len(probs) != 4 {
		t.Fatalf("problems %q, %v; want 4", probs, err)
	}
	for _, want := range []string{`"/test/jobs/job/identities/zz" holds "x"`, `"/test/jobs/job/ranks/abc"`, `"/test/jobs/job/identities/bob" reserves rank 1, which identity "amy" reserves too`, `"/test/jobs/job/stray"`} {
		if !strings.Contains(strings.Join(probs, "\n"), want) {
			t.Fatalf("problems %q do not mention %s", probs, want)
		}
	}
	if cl := mustClaim(t, ctx, c, "job", 3, "amy"); cl.Rank != 1 {
		t.Fatalf("amy got rank %d, want her reserved 1", cl.Rank)
	}
	if cl := mustClaim(t, ctx, c, "job", 3, "new"); cl.Rank != 0 {
		t.Fatalf("new got rank %d, want 0", cl.Rank)
	}
	for _, id := range []string{"zz", "bob"} {
		_, err := c.Claim(ctx, "job", 3, id)
		if !errors.Is(err, ErrBadReservation) || !strings.Contains(err.Error(), "identities/"+id) || !strings.Contains(err.Error(), "tmmu rank release job "+id) {
			t.Fatalf("%s: err = %v, want ErrBadReservation naming its key and the fix", id, err)
		}
	}
	if ms, err := c.Members(ctx, "job", 3); err != nil || len(ms) != 3 || !ms[0].Present || ms[1].Identity != "amy" {
		t.Fatalf("members %+v, %v", ms, err)
	}
	if err := c.Forget(ctx, "job", "zz"); err != nil {
		t.Fatal(err)
	}
	if cl := mustClaim(t, ctx, c, "job", 3, "zz"); cl.Rank != 2 {
		t.Fatalf("zz got rank %d after its key was forgotten, want 2", cl.Rank)
	}
	// Many bad keys are described up to maxProblems, the rest counted.
	for i := range 40 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/test/jobs/many/identities/x%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	if _, probs, err := c.Survey(ctx, "many", 1); err != nil || len(probs) != maxProblems+1 || probs[maxProblems] != "and 24 more skipped keys" {
		t.Fatalf("40 bad keys: %d problems (last %q), %v", len(probs), probs[len(probs)-1], err)
	}
}

// TestForgetJob: a deleted job's reservations go, so a job submitted
// again under its name with a smaller world gives its ranks to whoever
// claims, not to identities reserving ranks outside it; other jobs keep
// theirs.
func TestForgetJob(t *testing.T) {
	_, c := setup(t, 0)
	ctx := testCtx(t)
	for _, id := range []string{"a", "b", "c"} {
		mustClaim(t, ctx, c, "job", 3, id).Release(ctx)
	}
	mustClaim(t, ctx, c, "jobx", 1, "a")
	if _, err := c.Claim(ctx, "job", 2, "c"); !errors.Is(err, ErrBadReservation) {
		t.Fatalf("c before ForgetJob: %v, want its rank 2 outside world 2 refused", err)
	}
	n, err := c.ForgetJob(ctx, "job")
	if err != nil || n != 3 {
		t.Fatalf("ForgetJob removed %d keys, %v; want 3 reservations", n, err)
	}
	if cl := mustClaim(t, ctx, c, "job", 2, "c"); cl.Rank != 0 {
		t.Fatalf("c got rank %d in the new job, want 0", cl.Rank)
	}
	if ms, err := c.Members(ctx, "jobx", 1); err != nil || !ms[0].Present || ms[0].Identity != "a" {
		t.Fatalf("another job lost its keys: %+v %v", ms, err)
	}
}

// TestReclaimIsFenced: a claim whose lease lapsed (a paused worker) gets
// its rank back with Reclaim when nobody claimed since; once a
// replacement with the same identity claimed the rank, Reclaim fails
// with ErrTakenOver and leaves the replacement's keys alone; so it does
// after an operator released the reservation.
func TestReclaimIsFenced(t *testing.T) {
	cli, c := setup(t, 2)
	ctx := testCtx(t)
	a := mustClaim(t, ctx, c, "job", 2, "w0")
	a.stopKeepAlive()
	waitClosed(t, a.Lost(), "Lost after the keepalive stopped")
	a2, err := c.Reclaim(ctx, a, 2)
	if err != nil || a2.Rank != a.Rank || a2.Revision <= a.Revision {
		t.Fatalf("reclaim with nobody in between: %+v, %v", a2, err)
	}

	a2.stopKeepAlive()
	waitClosed(t, a2.Lost(), "Lost after the keepalive stopped")
	b := mustClaim(t, ctx, c, "job", 2, "w0") // the replacement
	_, err = c.Reclaim(ctx, a2, 2)
	if !errors.Is(err, ErrTakenOver) || !strings.Contains(err.Error(), "claimed its rank again") {
		t.Fatalf("reclaim after a replacement claimed: %v, want ErrTakenOver", err)
	}
	resp, err := cli.Get(ctx, c.rankKey("job", b.Rank))
	if err != nil || len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != b.Lease {
		t.Fatalf("the replacement's rank key changed: %+v %v", resp, err)
	}

	if err := c.Forget(ctx, "job", "w0"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reclaim(ctx, b, 2); !errors.Is(err, ErrTakenOver) || !strings.Contains(err.Error(), "no longer reserves") {
		t.Fatalf("reclaim after a release: %v, want ErrTakenOver", err)
	}
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Leases {
		if l.ID != a.Lease && l.ID != a2.Lease && l.ID != b.Lease {
			t.Fatalf("lease %x is none of the claims' (a %x, a2 %x, b %x): a failed reclaim must revoke its own", l.ID, a.Lease, a2.Lease, b.Lease)
		}
	}
}
