package api

import (
	"testing"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/shard"
)

func epoch(e uint64, world int, seed byte) *Epoch {
	ep := &Epoch{Epoch: e, StartStep: 1, GlobalPlanHash: ir.Hash{seed}}
	for r := range world {
		ep.Expected = append(ep.Expected, ir.Hash{seed, byte(r)})
	}
	return ep
}

// TestCommandsAreIdempotent: every command applied twice leaves the state
// as applying it once; conflicting commands are refused.
func TestCommandsAreIdempotent(t *testing.T) {
	s := &State{}
	spec := &JobSpec{Name: "j", Steps: 3}
	steps := []struct {
		c       Command
		changed bool
		err     bool
	}{
		{Command{Kind: CmdSubmit, Job: "j", Spec: spec, New: epoch(0, 2, 1), IRHash: ir.Hash{9}}, true, false},
		{Command{Kind: CmdSubmit, Job: "j", Spec: spec, New: epoch(0, 2, 1), IRHash: ir.Hash{9}}, false, false},
		{Command{Kind: CmdSubmit, Job: "j", Spec: spec, New: epoch(0, 2, 2), IRHash: ir.Hash{9}}, false, true},
		{Command{Kind: CmdProgress, Job: "j", Step: 1}, true, false},
		{Command{Kind: CmdOutcome, Job: "j", Epoch: 0, Outcome: &Outcome{Agreed: true}}, true, false},
		{Command{Kind: CmdOutcome, Job: "j", Epoch: 0, Outcome: &Outcome{Agreed: false, Reason: "late"}}, false, false},
		{Command{Kind: CmdProgress, Job: "j", Step: 2}, true, false},
		{Command{Kind: CmdProgress, Job: "j", Step: 2}, false, false},
		{Command{Kind: CmdProgress, Job: "j", Step: 1}, false, false},
		{Command{Kind: CmdEpoch, Job: "j", New: epoch(2, 2, 3)}, false, true},
		{Command{Kind: CmdEpoch, Job: "j", New: epoch(1, 2, 3)}, true, false},
		{Command{Kind: CmdEpoch, Job: "j", New: epoch(1, 2, 3)}, false, false},
		{Command{Kind: CmdEpoch, Job: "j", New: epoch(1, 2, 4)}, false, true},
		{Command{Kind: CmdOutcome, Job: "j", Epoch: 1, Outcome: &Outcome{Mismatches: []Mismatch{{Rank: 1}}}}, true, false},
		{Command{Kind: CmdFail, Job: "j", Reason: "again"}, false, false},
		{Command{Kind: CmdOutcome, Job: "nope", Epoch: 0, Outcome: &Outcome{}}, false, true},
		{Command{Kind: "bogus", Job: "j"}, false, true},
	}
	for i, st := range steps {
		r := s.Apply(&st.c)
		if r.Changed != st.changed || (r.Err != nil) != st.err {
			t.Fatalf("step %d (%s): changed %v err %v, want changed %v err %v", i, st.c.Kind, r.Changed, r.Err, st.changed, st.err)
		}
	}
	j := s.Jobs["j"]
	if j.Status != StatusFailed || j.LastStep != 2 || len(j.Epochs) != 2 || !j.Epochs[0].Outcome.Agreed {
		t.Fatalf("final job: %+v", j)
	}
}

// TestBoundaryLiesPastTheHorizon: a new epoch's boundary is raised past
// every step ranks may already run under the epoch before (committed
// progress plus the window), and that epoch's horizon stops before it.
func TestBoundaryLiesPastTheHorizon(t *testing.T) {
	s := &State{}
	spec := &JobSpec{Name: "j", Window: 3}
	s.Apply(&Command{Kind: CmdSubmit, Job: "j", Spec: spec, New: epoch(0, 2, 1)})
	if r := s.Apply(&Command{Kind: CmdEpoch, Job: "j", New: epoch(1, 2, 2)}); r.Err == nil {
		t.Fatal("an epoch was committed before the one before it was agreed")
	}
	s.Apply(&Command{Kind: CmdOutcome, Job: "j", Epoch: 0, Outcome: &Outcome{Agreed: true}})
	s.Apply(&Command{Kind: CmdProgress, Job: "j", Step: 10})
	j := s.Jobs["j"]
	if h := j.Horizon(0); h != 13 {
		t.Fatalf("horizon %d, want 13", h)
	}
	next := epoch(1, 2, 2)
	next.StartStep = 5 // chosen from an older view of the progress
	if r := s.Apply(&Command{Kind: CmdEpoch, Job: "j", New: next}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if b := j.Epochs[1].StartStep; b != 14 {
		t.Fatalf("boundary %d, want 14", b)
	}
	s.Apply(&Command{Kind: CmdProgress, Job: "j", Step: 12})
	if h := j.Horizon(0); h != 13 {
		t.Fatalf("old epoch's horizon %d after more progress, want 13 (the boundary less one)", h)
	}
	if e := j.EpochFor(13).Epoch; e != 0 {
		t.Fatalf("step 13 runs under epoch %d", e)
	}
	if e := j.EpochFor(14).Epoch; e != 1 {
		t.Fatalf("step 14 runs under epoch %d", e)
	}
}

func manifest(step, epoch uint64, world int) *Checkpoint {
	k := &Checkpoint{Step: step, Epoch: epoch, World: uint64(world)}
	for r := range world {
		k.Shards = append(k.Shards, CheckpointShard{Rank: uint64(r), Digest: ir.Hash{byte(step), byte(r)}})
	}
	return k
}

// TestCheckpointsAndRollbacks: checkpoints commit once, in the epoch that
// ran their step, at most Keep of them; a rollback sets the progress
// back, drops the checkpoints of the abandoned timeline (and, with Drop,
// a corrupt one, atomically), and makes progress from before it stale;
// the job is done only once the checkpoint of its last step is
// committed; pause, cancel and delete are idempotent.
func TestCheckpointsAndRollbacks(t *testing.T) {
	s := &State{}
	spec := &JobSpec{Name: "j", Steps: 30, CheckpointKeep: 2, ShardSpec: shard.Spec{WorldSize: 2}}
	drop := uint64(20)
	steps := []struct {
		c       Command
		changed bool
		err     bool
	}{
		{Command{Kind: CmdSubmit, Job: "j", Spec: spec, New: epoch(0, 2, 1)}, true, false},
		{Command{Kind: CmdOutcome, Job: "j", Epoch: 0, Outcome: &Outcome{Agreed: true}}, true, false},
		{Command{Kind: CmdCheckpoint, Job: "j", Checkpoint: manifest(10, 0, 2)}, true, false},
		{Command{Kind: CmdCheckpoint, Job: "j", Checkpoint: manifest(10, 0, 2)}, false, false},
		{Command{Kind: CmdCheckpoint, Job: "j", Checkpoint: manifest(10, 0, 3)}, false, true}, // not the world
		{Command{Kind: CmdCheckpoint, Job: "j", Checkpoint: manifest(15, 1, 2)}, false, true}, // epoch 1 does not run step 15
		{Command{Kind: CmdCheckpoint, Job: "j", Checkpoint: manifest(20, 0, 2)}, true, false},
		{Command{Kind: CmdCheckpoint, Job: "j", Checkpoint: manifest(25, 0, 2)}, true, false}, // drops 10: keep 2
		{Command{Kind: CmdProgress, Job: "j", Step: 27}, true, false},
		// A corrupt 25: rollback to 20, dropping 25, atomically.
		{Command{Kind: CmdEpoch, Job: "j", New: &Epoch{Epoch: 1, Restore: &Restore{Step: 20, Rollback: true}, GlobalPlanHash: ir.Hash{1}}, Drop: &drop}, false, true}, // cannot drop the one restored
		{Command{Kind: CmdEpoch, Job: "j", New: &Epoch{Epoch: 1, Restore: &Restore{Step: 10, Rollback: true}, GlobalPlanHash: ir.Hash{1}}}, false, true},              // 10 is no longer kept
		{Command{Kind: CmdEpoch, Job: "j", New: &Epoch{Epoch: 1, Restore: &Restore{Step: 20, Rollback: true}, GlobalPlanHash: ir.Hash{1}}, Drop: ptr(uint64(25))}, true, false},
		{Command{Kind: CmdProgress, Job: "j", Step: 28, Epoch: 0}, false, false}, // an abandoned timeline's
		{Command{Kind: CmdOutcome, Job: "j", Epoch: 1, Outcome: &Outcome{Agreed: true}}, true, false},
		{Command{Kind: CmdProgress, Job: "j", Step: 30, Epoch: 1}, true, false},
		{Command{Kind: CmdPause, Job: "j", Reason: "full"}, true, false},
		{Command{Kind: CmdPause, Job: "j", Reason: "full"}, false, false},
		{Command{Kind: CmdCheckpoint, Job: "j", Checkpoint: manifest(30, 1, 2)}, true, false}, // resumes, and the job is done
		{Command{Kind: CmdCancel, Job: "j", Reason: "late"}, false, false},
		{Command{Kind: CmdDelete, Job: "j", At: 7}, true, false},
		{Command{Kind: CmdCancel, Job: "j"}, false, true},
	}
	var done *Job
	for i, st := range steps {
		r := s.Apply(&st.c)
		if r.Changed != st.changed || (r.Err != nil) != st.err {
			t.Fatalf("step %d (%s): changed %v err %v, want changed %v err %v", i, st.c.Kind, r.Changed, r.Err, st.changed, st.err)
		}
		if j := s.Jobs["j"]; j != nil {
			switch i {
			case 11:
				if j.LastStep != 20 || len(j.Checkpoints) != 1 || j.Checkpoints[0].Step != 20 || len(j.Dropped) != 1 || j.Dropped[0].Step != 25 || j.Epochs[1].StartStep != 21 || j.Timeline() != 1 {
					t.Fatalf("after the rollback: %+v", j)
				}
			case 14:
				if j.Status != StatusRunning {
					t.Fatalf("done before the checkpoint of its last step: %s", j.Status)
				}
			case 17:
				done = j
			}
		}
	}
	if done == nil || done.Status != StatusDone || done.Paused != "" {
		t.Fatalf("after the last checkpoint: %+v", done)
	}
	if _, ok := s.Deleted["j"]; !ok || s.Jobs["j"] != nil {
		t.Fatalf("deleted: %+v", s)
	}
	// A boundary restore (a world that grows) starts past the horizon.
	s2 := &State{}
	s2.Apply(&Command{Kind: CmdSubmit, Job: "g", Spec: &JobSpec{Name: "g", ShardSpec: shard.Spec{WorldSize: 2}}, New: epoch(0, 2, 1)})
	s2.Apply(&Command{Kind: CmdOutcome, Job: "g", Epoch: 0, Outcome: &Outcome{Agreed: true}})
	s2.Apply(&Command{Kind: CmdProgress, Job: "g", Step: 7})
	if r := s2.Apply(&Command{Kind: CmdEpoch, Job: "g", New: &Epoch{Epoch: 1, StartStep: 3, Restore: &Restore{}, GlobalPlanHash: ir.Hash{2}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if e := s2.Jobs["g"].Epochs[1]; e.StartStep != 10 || e.Restore.Step != 9 {
		t.Fatalf("boundary restore: start %d restore %+v", e.StartStep, e.Restore)
	}
}

func ptr[T any](v T) *T { return &v }

// TestRowsBefore: the rows a job's stream consumed before a step count
// each step once, at the world size of the epoch that ran it last (a
// rollback's epoch runs steps again; the steps it undid do not count).
func TestRowsBefore(t *testing.T) {
	world := func(n uint64) *shard.Spec { return &shard.Spec{WorldSize: n} }
	j := &Job{Spec: JobSpec{ShardSpec: *world(4)}, Epochs: []Epoch{
		{Epoch: 0, StartStep: 1},
		{Epoch: 1, StartStep: 11, ShardSpec: world(3)}, // epoch 0 ran to 12, then lost a rank: back to step 10
		{Epoch: 2, StartStep: 22, ShardSpec: world(4)},
		{Epoch: 3, StartStep: 8, ShardSpec: world(2)}, // back to step 7
	}}
	for _, c := range []struct{ i, s, batch, want uint64 }{
		{0, 1, 1, 0},
		{0, 11, 1, 40},
		{0, 13, 2, 96},
		{1, 11, 1, 40},
		{1, 15, 1, 40 + 4*3},
		{2, 22, 1, 40 + 11*3},
		{2, 25, 2, 2 * (40 + 11*3 + 3*4)},
		{3, 8, 1, 28},
		{3, 10, 1, 28 + 2*2},
	} {
		if got := j.RowsBefore(c.i, c.s, c.batch); got != c.want {
			t.Errorf("epoch %d, step %d, batch %d: %d rows, want %d", c.i, c.s, c.batch, got, c.want)
		}
	}
}
