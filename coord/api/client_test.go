package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
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
