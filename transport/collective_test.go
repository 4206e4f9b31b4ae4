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
// arrives before a slow rank asks for it); a missing rank times out.
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
