package transport

import (
	"fmt"
	"testing"
	"time"
)

// TestProgressSurvivesWatchers: each rank's latest step is kept; a watch
// opened later (a new leader) replays it, then sees updates.
func TestProgressSurvivesWatchers(t *testing.T) {
	s := startServer(t)
	tr, _ := newTransport(t, s)
	ctx := testCtx(t)
	for rank := range uint64(4) {
		for step := uint64(1); step <= 3+rank; step++ {
			if err := tr.PutProgress(ctx, StepDone{Job: "j", Epoch: 0, Rank: rank, Step: step, Nanos: 1, Identity: fmt.Sprint("w", rank)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tr.PutProgress(ctx, StepDone{Job: "other", Rank: 0, Step: 99, Nanos: 1, Identity: "w0"}); err != nil {
		t.Fatal(err)
	}
	ch, err := tr.WatchProgress(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]uint64{}
	timeout := time.After(5 * time.Second)
	for len(got) < 4 || got[0] != 3 || got[3] != 6 {
		select {
		case d := <-ch:
			got[d.Rank] = d.Step
		case <-timeout:
			t.Fatalf("replayed progress %v", got)
		}
	}
	if err := tr.PutProgress(ctx, StepDone{Job: "j", Rank: 0, Step: 4, Nanos: 1, Identity: "w0"}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ch:
		if d.Rank != 0 || d.Step != 4 {
			t.Fatalf("update %+v", d)
		}
	case <-timeout:
		t.Fatal("no update")
	}
	if got[0] != 3 || got[1] != 4 || got[2] != 5 || got[3] != 6 {
		t.Fatalf("latest steps %v, want 3 4 5 6", got)
	}
}

// TestStepsAreStored: a watcher started late sees every rank's latest
// step report of its epoch, and later ones; other epochs stay out.
func TestStepsAreStored(t *testing.T) {
	s := startServer(t)
	tr, _ := newTransport(t, s)
	ctx := testCtx(t)
	h := hashOf("plan")
	for rank := range uint64(3) {
		for step := uint64(1); step <= 2+rank; step++ {
			if err := tr.PutStep(ctx, StepReport{Job: "j", Epoch: 1, Rank: rank, Step: step, PlanHash: h, Identity: fmt.Sprint("w", rank)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tr.PutStep(ctx, StepReport{Job: "j", Epoch: 2, Rank: 0, Step: 50, PlanHash: h, Identity: "w0"}); err != nil {
		t.Fatal(err)
	}
	ch, err := tr.WatchSteps(ctx, "j", 1)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]uint64{}
	timeout := time.After(5 * time.Second)
	for len(got) < 3 || got[2] != 4 {
		select {
		case r := <-ch:
			if r.Epoch != 1 {
				t.Fatalf("report of epoch %d", r.Epoch)
			}
			got[r.Rank] = r.Step
		case <-timeout:
			t.Fatalf("replayed %v", got)
		}
	}
	if got[0] != 2 || got[1] != 3 || got[2] != 4 {
		t.Fatalf("latest steps %v, want 2 3 4", got)
	}
}
