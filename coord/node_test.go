package coord

import (
	"testing"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
)

// TestSnapshotRoundTrip: the CBOR snapshot restores an equal state.
func TestSnapshotRoundTrip(t *testing.T) {
	s := &api.State{}
	s.Apply(&api.Command{Kind: api.CmdSubmit, Job: "a", Spec: &api.JobSpec{Name: "a", Model: []byte{1, 2}}, New: &api.Epoch{StartStep: 1, Expected: []ir.Hash{{1}, {1, 1}, {1, 2}}}})
	s.Apply(&api.Command{Kind: api.CmdOutcome, Job: "a", Epoch: 0, Outcome: &api.Outcome{Agreed: true}})
	f := &fsm{state: s}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b := []byte(snap.(snapshot))
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
