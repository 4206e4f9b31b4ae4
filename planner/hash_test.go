package planner

import (
	"crypto/sha256"
	"testing"

	"pgregory.net/rapid"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/ir/irtest"
)

type slotKey struct {
	_     struct{} `cbor:",toarray"`
	Arena string
	Slot  int32
}

// libraryPlanHash builds the spec II.K preimage as Go values and lets
// fxamacker/cbor's core deterministic mode encode it (maps sorted by the
// library), independently of the streaming encoder.
func libraryPlanHash(t *rapid.T, p *Plan) ir.Hash {
	slotsOf := map[string][2]any{}
	for _, tp := range p.Tensors {
		slotsOf[tp.ID] = [2]any{tp.Arena, int64(tp.LogicalSlot)}
	}
	addrs := map[slotKey]uint64{}
	for _, a := range p.Arenas {
		for _, s := range a.Slots {
			addrs[slotKey{Arena: a.Name, Slot: s.Slot}] = s.Offset
		}
	}
	v := []any{Format, []any{
		p.IRHash[:], string(p.Mode), p.ArenaConfigHash[:], p.ExecutionOrderHash[:],
		p.Rank, p.WorldSize, p.ShardSpecHash[:],
		[]any{p.ReplayToken[:], slotsOf}, addrs,
	}}
	b, err := ir.CanonicalCBOR(v)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestPlanHashMatchesLibrary(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, g, opts := drawPlanInput(t, irtest.Options{})
		opts.Rank, opts.WorldSize = 3, 1<<40
		p, err := PlanMemory(g, opts)
		if err != nil {
			t.Fatal(err)
		}
		if want := libraryPlanHash(t, p); p.PlanHash != want || p.ComputeHash() != want {
			t.Fatalf("plan_hash %s, ComputeHash %s, library %s", p.PlanHash, p.ComputeHash(), want)
		}
	})
}
