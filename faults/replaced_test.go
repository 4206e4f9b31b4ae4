package faults

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPausedWorkerYieldsToItsReplacement: a worker paused (SIGSTOP) past
// its lease, replaced by a new process of its identity that takes the
// rank, and then resumed, stops with ErrReplaced instead of taking the
// rank back: no epoch and no rollback follow its resumption, and the job
// ends in the fault-free run's state.
func TestPausedWorkerYieldsToItsReplacement(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	const steps = 120
	tc := startCluster(t)
	defer func() {
		if t.Failed() {
			for _, p := range tc.procs {
				t.Logf("--- %s:\n%s", p.name, tail(p.log, 15))
			}
		}
	}()
	refJob := tc.finish(t, "reference", tc.runJobSteps(t, "reference", steps), 5*time.Minute)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr := tc.watch(ctx, "faults")
	ws := tc.runJobSteps(t, "faults", steps)
	tc.waitStep(t, pr, "before the pause", 10, 3*time.Minute)
	old := ws[1]
	old.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(5 * time.Second)                                   // past its 3 s lease
	repl := tc.add("faults-1-replacement", "worker", old.args...) // the same identity
	tc.start(repl)
	at := pr.job().LastStep
	tc.waitStep(t, pr, "after the replacement", at+10, 3*time.Minute)
	epochs := len(pr.job().Epochs)
	old.mu.Lock()
	old.expected = true // it is to exit, with an error
	exited := old.exited
	old.mu.Unlock()
	old.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the resumed worker still runs 30 s later:\n%s", tail(old.log, 10))
	}
	if _, err := old.done(); err == nil {
		t.Errorf("the resumed worker exited 0")
	}
	if log, _ := os.ReadFile(old.log); !strings.Contains(string(log), "another worker with this identity holds the rank now") {
		t.Errorf("the resumed worker's log does not say it was replaced:\n%s", tail(old.log, 10))
	}
	ws[1] = repl
	job := tc.finish(t, "faults", ws, 5*time.Minute)
	if len(job.Epochs) != epochs {
		for _, e := range job.Epochs[epochs:] {
			t.Errorf("epoch %d from step %d after the old worker resumed: %s", e.Epoch, e.StartStep, e.Reason)
		}
	}
	a, b := refJob.LastCheckpoint(), job.LastCheckpoint()
	for r := range world {
		if a.Shards[r].StateHash != b.Shards[r].StateHash {
			t.Errorf("rank %d ends in state %s, the fault-free run in %s", r, b.Shards[r].StateHash.Short(), a.Shards[r].StateHash.Short())
		}
	}
	t.Logf("replaced at step %d; %d epochs before the old worker resumed, %d at the end; final state %s on rank 0 as the fault-free run", at, epochs, len(job.Epochs), b.Shards[0].StateHash.Short())
}
