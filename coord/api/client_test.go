package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestBackoffDoublesWithJitter: waits double from Wait up to Max, each
// within a quarter of its nominal value.
func TestBackoffDoublesWithJitter(t *testing.T) {
	b := Backoff{Rounds: 8, Wait: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for k, w := range want {
		w *= time.Millisecond
		for range 50 {
			if d := b.wait(k); d < w*3/4 || d > w*5/4 {
				t.Fatalf("round %d waited %s, want %s ± 25%%", k, d, w)
			}
		}
	}
	if d := (Backoff{Wait: time.Millisecond}).wait(5); d > 2*time.Millisecond {
		t.Fatalf("a zero Max doubled the wait to %s", d)
	}
}

// TestClientRetriesAsItsBackoffSays: a client whose nodes all answer 503
// tries every node once per round, for its own number of rounds.
func TestClientRetriesAsItsBackoffSays(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "no leader", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := NewClient(srv.URL, srv.URL)
	c.Backoff = Backoff{Rounds: 3, Wait: time.Millisecond}
	if _, err := c.Job(context.Background(), "j"); err == nil {
		t.Fatal("no error from a cluster that never answers")
	}
	if got := hits.Load(); got != 6 {
		t.Fatalf("%d requests, want 3 rounds over 2 URLs", got)
	}
}

// roundTrip answers every request with a 503, counting them, without a
// network (so it runs in a synctest bubble).
type roundTrip struct{ n *atomic.Int32 }

func (r roundTrip) RoundTrip(req *http.Request) (*http.Response, error) {
	r.n.Add(1)
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
		Body: io.NopCloser(strings.NewReader("no leader")), Header: http.Header{}, Request: req}, nil
}

// TestClientWaitsAsItsBackoffSays: between rounds a client waits what its
// backoff says, on a fake clock: 4 rounds of Wait 100 ms doubling to 250
// ms wait about 100 + 200 + 250 ms, each within its jitter.
func TestClientWaitsAsItsBackoffSays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		c := &Client{URLs: []string{"http://a", "http://b"}, HTTP: &http.Client{Transport: roundTrip{&n}},
			Backoff: Backoff{Rounds: 4, Wait: 100 * time.Millisecond, Max: 250 * time.Millisecond}}
		start := time.Now()
		if _, err := c.Job(context.Background(), "j"); err == nil {
			t.Fatal("no error from a cluster that never answers")
		}
		waited := time.Since(start)
		if n.Load() != 8 {
			t.Fatalf("%d requests, want 4 rounds over 2 URLs", n.Load())
		}
		if lo, hi := 550*time.Millisecond*3/4, 550*time.Millisecond*5/4; waited < lo || waited > hi {
			t.Fatalf("waited %s in all, want 550 ms ± 25%%", waited)
		}
	})
}

// busyTrip answers its first busy requests 503 with Retry-After: 1 (a
// full submission queue), then 200 with an empty job.
type busyTrip struct {
	n    *atomic.Int32
	busy int32
}

func (r busyTrip) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.n.Add(1) <= r.busy {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
			Body: io.NopCloser(strings.NewReader("4 submissions are being planned; retry")), Header: http.Header{"Retry-After": {"1"}}, Request: req}, nil
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Body: io.NopCloser(strings.NewReader(`{"reason":"j"}`)), Header: http.Header{}, Request: req}, nil
}

// TestClientRetriesBusyWithinItsDeadline: a node busy for 10 rounds
// (503 with Retry-After: 1) is asked again a second later each time,
// past Backoff.Rounds, while the context's deadline leaves time; without
// a deadline the rounds are counted as any other failure's.
func TestClientRetriesBusyWithinItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		c := &Client{URLs: []string{"http://a"}, HTTP: &http.Client{Transport: busyTrip{&n, 10}},
			Backoff: Backoff{Rounds: 3, Wait: 10 * time.Millisecond}}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		j, err := c.Job(ctx, "j")
		if err != nil || j.Reason != "j" {
			t.Fatalf("job %+v, %v after %d requests", j, err, n.Load())
		}
		if waited := time.Since(start); n.Load() != 11 || waited < 10*time.Second || waited > 11*time.Second {
			t.Fatalf("%d requests in %s, want 11 in about 10 s (Retry-After: 1, 10 times)", n.Load(), waited)
		}

		n.Store(0)
		if _, err := c.Job(context.Background(), "j"); err == nil || n.Load() != 3 {
			t.Fatalf("without a deadline: %v after %d requests, want an error after 3 rounds", err, n.Load())
		}

		// A deadline shorter than the wait ends the retries at the deadline.
		n.Store(0)
		ctx, cancel = context.WithTimeout(context.Background(), 2500*time.Millisecond)
		defer cancel()
		start = time.Now()
		if _, err := c.Job(ctx, "j"); err == nil || time.Since(start) > 3*time.Second {
			t.Fatalf("short deadline: %v after %s", err, time.Since(start))
		}
	})
}
