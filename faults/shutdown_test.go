package faults

import (
	"syscall"
	"testing"
	"time"
)

// stopBound is how long a coordinator may take to exit after SIGTERM,
// whatever its peers do (plus slack for a loaded machine).
const stopBound = 10 * time.Second

// TestCoordinatorStopsWhilePeersStop: a coordinator given SIGTERM while
// its peers are paused (SIGSTOP: they answer nothing, as peers that are
// stopping or starved) exits within stopBound, the leader and a follower
// alike.
func TestCoordinatorStopsWhilePeersStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	tc := startCluster(t)
	lead, others := tc.leader(t)
	for _, victim := range []*proc{lead, others[0]} {
		var paused []*proc
		for _, p := range tc.coords {
			if p != victim {
				if ok, _ := p.done(); !ok {
					p.cmd.Process.Signal(syscall.SIGSTOP)
					paused = append(paused, p)
				}
			}
		}
		start := time.Now()
		victim.cmd.Process.Signal(syscall.SIGTERM)
		victim.mu.Lock()
		victim.expected = true
		exited := victim.exited
		victim.mu.Unlock()
		select {
		case <-exited:
			t.Logf("%s exited %s after SIGTERM with its peers paused", victim.name, time.Since(start).Round(time.Millisecond))
		case <-time.After(stopBound + 5*time.Second):
			t.Errorf("%s still runs %s after SIGTERM with its peers paused:\n%s", victim.name, time.Since(start).Round(time.Second), tail(victim.log, 15))
			victim.kill()
		}
		for _, p := range paused {
			p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
}

// TestCoordinatorsStopTogether: all coordinators given SIGTERM at once
// (the cluster shutting down) each exit within stopBound.
func TestCoordinatorsStopTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	tc := startCluster(t)
	tc.leader(t)
	start := time.Now()
	var exits []chan struct{}
	for _, p := range tc.coords {
		p.mu.Lock()
		p.expected = true
		exits = append(exits, p.exited)
		p.mu.Unlock()
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, p := range tc.coords {
		select {
		case <-exits[i]:
			t.Logf("%s exited %s after SIGTERM", p.name, time.Since(start).Round(time.Millisecond))
		case <-time.After(stopBound + 5*time.Second - time.Since(start)):
			t.Errorf("%s still runs %s after SIGTERM:\n%s", p.name, time.Since(start).Round(time.Second), tail(p.log, 15))
			p.kill()
		}
	}
}
