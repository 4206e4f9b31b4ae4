package transport

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestGroupExchange: three ranks, each on its own connection, exchange
// small and multi-part payloads under several keys (a fast rank's data
// arrives before a slow rank asks for it); a rank that comes late reads
// what the others stored; a missing rank times out.
func TestGroupExchange(t *testing.T) {
	s := startServer(t)
	const size = 3
	groups := make([]*Group, size)
	for r := range size {
		tr, _ := newTransport(t, s)
		g, err := tr.NewGroup("j", r, size, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		groups[r] = g
	}
	payload := func(key string, r int) []byte {
		n := 10
		if key == "big" {
			n = 2<<20 + 123 // more than the 1 MiB default payload
		}
		return bytes.Repeat([]byte{byte(r + 1), key[0]}, n)
	}
	keys := []string{"a", "big", "c"}
	var wg sync.WaitGroup
	errs := make(chan error, size*len(keys))
	for r, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range keys {
				all, err := g.Exchange(context.Background(), k, payload(k, r))
				if err != nil {
					errs <- err
					return
				}
				for q := range size {
					if !bytes.Equal(all[q], payload(k, q)) {
						errs <- fmt.Errorf("rank %d key %s: rank %d's data differs (%d bytes)", r, k, q, len(all[q]))
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// A rank that joins after the others sent their data (it restarted)
	// still reads it: contributions are stored.
	late := make(chan error, 2)
	for _, g := range groups[:2] {
		go func() {
			_, err := g.Exchange(context.Background(), "late", []byte{byte(g.Rank())})
			late <- err
		}()
	}
	time.Sleep(300 * time.Millisecond)
	tr3, _ := newTransport(t, s)
	g3, err := tr3.NewGroup("j", 2, size, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer g3.Close()
	all, err := g3.Exchange(context.Background(), "late", []byte{2})
	if err != nil || len(all) != 3 || all[0][0] != 0 || all[1][0] != 1 || all[2][0] != 2 {
		t.Fatalf("the late rank: %v %v", all, err)
	}
	for range 2 {
		if err := <-late; err != nil {
			t.Fatal(err)
		}
	}
	tr, _ := newTransport(t, s)
	lone, err := tr.NewGroup("k", 0, 2, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Close()
	if _, err := lone.Exchange(context.Background(), "x", []byte{1}); err == nil {
		t.Fatal("an exchange with a missing rank returned")
	}
}

// TestGroupCountsTheRosterHolder: a contribution stored for rank 1 under
// another identity than the roster's holder (written first, as a forger
// racing the real rank would) is not what rank 0 gets.
func TestGroupCountsTheRosterHolder(t *testing.T) {
	s := startServer(t)
	ctx := testCtx(t)
	roster := []string{"w0", "w1"}
	var groups []*Group
	for r, id := range roster {
		tr, _ := newTransport(t, s, WithIdentity(id))
		tr.SetRoster("j", roster)
		g, err := tr.NewGroup("j", r, 2, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		groups = append(groups, g)
	}
	forger, _ := newTransport(t, s, WithIdentity("w9"))
	fg, err := forger.NewGroup("j", 1, 2, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer fg.Close()
	fg.Exchange(ctx, "grads", []byte("poison")) // times out: nobody counts w9
	done := make(chan []byte, 1)
	go func() {
		out, err := groups[1].Exchange(ctx, "grads", []byte("real"))
		if err != nil {
			t.Error(err)
		}
		done <- out[1]
	}()
	out, err := groups[0].Exchange(ctx, "grads", []byte("zero"))
	if err != nil {
		t.Fatal(err)
	}
	if string(out[1]) != "real" || string(<-done) != "real" {
		t.Fatalf("rank 1's contribution: %q, want the holder's", out[1])
	}
}

// TestGroupTellsItsRetries: with the collectives bucket gone (NATS came
// back with an empty store) a contribution cannot be stored: the hook
// hears of each failed try, with the bucket's error, until the context
// ends.
func TestGroupTellsItsRetries(t *testing.T) {
	s := startServer(t)
	tr, _ := newTransport(t, s)
	g, err := tr.NewGroup("j", 0, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := tr.JetStream().DeleteKeyValue(context.Background(), CollectiveBucket); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var tries []int
	var last error
	g.OnRetry(func(key string, n int, err error) {
		mu.Lock()
		tries, last = append(tries, n), err
		mu.Unlock()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := g.Exchange(ctx, "k", []byte("x")); err == nil {
		t.Fatal("an exchange with no bucket succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tries) < 3 || tries[0] != 1 || tries[1] != 2 || last == nil || uint64(len(tries)) != g.Retries() {
		t.Fatalf("hook heard tries %v (last error %v); the group counted %d retries", tries, last, g.Retries())
	}
	t.Logf("%d failed tries in 1.5 s, the last: %v", len(tries), last)
}
