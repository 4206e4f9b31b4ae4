package coord

import (
	"testing"

	"github.com/hashicorp/raft"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
)

// TestSnapshotRoundTrip: the CBOR snapshot restores an equal state.
func TestSnapshotRoundTrip(t *testing.T) {
	s := &api.State{}
	s.Apply(&api.Command{Kind: api.CmdSubmit, Job: "a", Spec: &api.JobSpec{Name: "a", Model: []byte{1, 2}}, New: &api.Epoch{StartStep: 1, Expected: []ir.Hash{{1}, {1, 1}, {1, 2}}}})
	s.Apply(&api.Command{Kind: api.CmdOutcome, Job: "a", Epoch: 0, Outcome: &api.Outcome{Agreed: true}})
	f := &fsm{state: s}
	f.publish("", 0)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := snap.(*snapshot).encode()
	if err != nil {
		t.Fatal(err)
	}
	// Commands applied after the snapshot was taken do not change it.
	s.Apply(&api.Command{Kind: api.CmdProgress, Job: "a", Step: 7})
	if again, _ := snap.(*snapshot).encode(); string(again) != string(b) {
		t.Fatal("a command applied after Snapshot changed the snapshot")
	}
	var back api.State
	if err := ir.UnmarshalCBOR(b, &back); err != nil {
		t.Fatal(err)
	}
	b2, _ := ir.CanonicalCBOR(&back)
	if string(b) != string(b2) {
		t.Fatal("snapshot does not round-trip byte for byte")
	}
	if back.Jobs["a"].Current().Outcome == nil || len(back.Jobs["a"].Current().Expected) != 3 {
		t.Fatalf("restored %+v", back.Jobs["a"])
	}
}

// TestViewsAreCopyOnWrite: a command replaces the view with one that
// copies its own job and shares the others, and leaves earlier views as
// they were.
func TestViewsAreCopyOnWrite(t *testing.T) {
	f := &fsm{state: &api.State{Jobs: map[string]*api.Job{}}}
	f.publish("", 0)
	apply := func(i uint64, c *api.Command) {
		data, err := ir.CanonicalCBOR(c)
		if err != nil {
			t.Fatal(err)
		}
		if r := f.Apply(&raft.Log{Index: i, Data: data}).(api.Result); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	ep := func() *api.Epoch { return &api.Epoch{StartStep: 1, Expected: []ir.Hash{{1}}} }
	apply(1, &api.Command{Kind: api.CmdSubmit, Job: "a", Spec: &api.JobSpec{Name: "a"}, New: ep()})
	apply(2, &api.Command{Kind: api.CmdSubmit, Job: "b", Spec: &api.JobSpec{Name: "b"}, New: ep()})
	before := f.view.Load()
	apply(3, &api.Command{Kind: api.CmdOutcome, Job: "a", Outcome: &api.Outcome{Agreed: true}})
	after := f.view.Load()
	if after.index != 3 || before.index != 2 {
		t.Fatalf("indexes %d, %d", before.index, after.index)
	}
	if before.state.Jobs["a"].Current().Outcome != nil || after.state.Jobs["a"].Current().Outcome == nil {
		t.Fatal("the outcome is not in the new view only")
	}
	if before.state.Jobs["b"] != after.state.Jobs["b"] {
		t.Fatal("a job the command did not touch was copied")
	}
	apply(4, &api.Command{Kind: api.CmdDelete, Job: "b"})
	if f.view.Load().state.Jobs["b"] != nil || after.state.Jobs["b"] == nil {
		t.Fatal("a delete is not in the new view only")
	}
}
