package planner

import (
	"bytes"
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/ir/irtest"
)

// drawPlanInput draws a compiled random graph, a mode it has nodes for, and
// random arena alignments.
func drawPlanInput(t *rapid.T, o irtest.Options) (*ir.Model, *ir.Graph, Options) {
	m := irtest.Model(t, o)
	g, err := ir.Compile(m)
	if err != nil {
		t.Fatalf("irtest drew a model that does not compile: %v", err)
	}
	var modes []Mode
	for _, md := range Modes {
		for i := range g.Nodes {
			if md.selects(g.Nodes[i].Phase) {
				modes = append(modes, md)
				break
			}
		}
	}
	opts := DefaultOptions(g)
	opts.Mode = rapid.SampledFrom(modes).Draw(t, "mode")
	opts.Strategy = rapid.SampledFrom(Strategies).Draw(t, "strategy")
	opts.Arenas = ArenaConfig{}
	for _, a := range ir.Arenas {
		if rapid.Bool().Draw(t, "custom."+a) {
			opts.Arenas[a] = ArenaSpec{
				AlignmentBytes: ByteSize(1) << rapid.IntRange(0, 9).Draw(t, "align"),
				PageSize:       ByteSize(1) << rapid.IntRange(0, 14).Draw(t, "page"),
			}
		}
	}
	opts.ReplayToken[0] = byte(rapid.IntRange(0, 255).Draw(t, "token"))
	return m, g, opts
}

// TestPropertyPlansVerify: every plan of every strategy on every random
// graph, in every mode the graph has nodes for, passes the independent
// verifier; the slots strategy uses at least max_live slots per arena
// (exactly max_live is checked below), and packed never peaks above slots
// or greedy-size in any arena, nor below the lower bound.
func TestPropertyPlansVerify(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, g, opts := drawPlanInput(t, irtest.Options{})
		for _, mode := range Modes {
			opts.Mode = mode
			peaks := map[Strategy]map[string]uint64{}
			for _, st := range Strategies {
				opts.Strategy = st
				p, err := PlanMemory(g, opts)
				if errors.Is(err, failure.InvalidOptions) {
					break // the graph has no node this mode runs
				}
				if err != nil {
					t.Fatalf("mode %s, strategy %s: PlanMemory: %v", mode, st, err)
				}
				if err := Verify(g, p); err != nil {
					t.Fatalf("mode %s, strategy %s: Verify: %v", mode, st, err)
				}
				peaks[st] = map[string]uint64{}
				for _, a := range p.Arenas {
					peaks[st][a.Name] = a.PeakBytes
					if a.PeakBytes < a.LowerBoundBytes {
						t.Fatalf("mode %s, strategy %s, arena %s: peak %d below the lower bound %d", mode, st, a.Name, a.PeakBytes, a.LowerBoundBytes)
					}
					if st == Slots && a.LogicalSlots < a.MaxLive {
						t.Fatalf("mode %s, arena %s: %d slots < max live %d", mode, a.Name, a.LogicalSlots, a.MaxLive)
					}
				}
			}
			for arena, peak := range peaks[Packed] {
				if peak > peaks[Slots][arena] || peak > peaks[GreedySize][arena] {
					t.Fatalf("mode %s, arena %s: packed peaks at %d, slots at %d, greedy-size at %d",
						mode, arena, peak, peaks[Slots][arena], peaks[GreedySize][arena])
				}
			}
		}
	})
}

// TestPropertySlotsEqualMaxLive checks the spec's optimality claim against a
// brute-force count of live storages at every position.
func TestPropertySlotsEqualMaxLive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, g, opts := drawPlanInput(t, irtest.Options{})
		opts.Strategy = Slots
		if g.NotAlias != nil {
			t.Skip("must_not_alias may need extra slots")
		}
		p, err := PlanMemory(g, opts)
		if err != nil {
			t.Fatalf("PlanMemory: %v", err)
		}
		l, _ := AnalyzeLiveness(g, opts.Mode)
		roots := map[int32]bool{}
		for _, tt := range l.Tensors {
			roots[g.Root[tt]] = true
		}
		for _, a := range p.Arenas {
			best := 0
			var bestBytes uint64
			for pos := int32(0); pos < int32(l.Positions()); pos++ {
				n, bytes := 0, uint64(0)
				for tt := range roots {
					if g.Tensors[tt].Role.Arena() == a.Name &&
						l.StorageBirth[tt] <= pos && pos <= l.StorageDeath[tt] {
						n++
						bytes += g.StorageBytes[tt]
					}
				}
				best, bestBytes = max(best, n), max(bestBytes, bytes)
			}
			if a.LogicalSlots != best || a.MaxLive != best || a.LowerBoundBytes != bestBytes {
				t.Fatalf("arena %s: slots %d, max_live %d, lower bound %d; brute force %d live, %d bytes",
					a.Name, a.LogicalSlots, a.MaxLive, a.LowerBoundBytes, best, bestBytes)
			}
		}
	})
}

// TestPropertyDeterministic: identical inputs give identical bytes, and
// listing tensors and nodes in another order keeps ir_hash and plan_hash.
func TestPropertyDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m, g, opts := drawPlanInput(t, irtest.Options{})
		p1, err := PlanMemory(g, opts)
		if err != nil {
			t.Fatalf("PlanMemory: %v", err)
		}
		g2, err := ir.Compile(m)
		if err != nil {
			t.Fatal(err)
		}
		p2, _ := PlanMemory(g2, opts)
		b1, _ := p1.EncodeCBOR()
		b2, _ := p2.EncodeCBOR()
		if !bytes.Equal(b1, b2) {
			t.Fatal("same inputs, different plan bytes")
		}
		shuffled := irtest.Shuffle(m, rapid.Uint64().Draw(t, "seed"))
		g3, err := ir.Compile(shuffled)
		if err != nil {
			t.Fatalf("shuffled model does not compile: %v", err)
		}
		if g3.IRHash != g.IRHash {
			t.Fatalf("ir_hash changed with listing order: %s vs %s", g.IRHash, g3.IRHash)
		}
		p3, err := PlanMemory(g3, opts)
		if err != nil {
			t.Fatal(err)
		}
		b3, _ := p3.EncodeCBOR()
		if p3.PlanHash != p1.PlanHash || !bytes.Equal(b1, b3) {
			t.Fatalf("plan changed with listing order: %s vs %s", p1.PlanHash, p3.PlanHash)
		}
		// Checkpoint/restore: the CBOR plan decodes to the same plan.
		q, err := DecodePlan(b1)
		if err != nil {
			t.Fatal(err)
		}
		bq, _ := q.EncodeCBOR()
		if !bytes.Equal(b1, bq) {
			t.Fatal("CBOR plan does not round-trip")
		}
		if err := Verify(g, q); err != nil {
			t.Fatalf("restored plan does not verify: %v", err)
		}
	})
}

// TestPropertyVerifierCatchesCollisions moves one storage onto another that
// is live at the same time and expects ADDRESS_COLLISION: the verifier can
// fail.
func TestPropertyVerifierCatchesCollisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, g, opts := drawPlanInput(t, irtest.Options{NoFeatures: true})
		p, err := PlanMemory(g, opts)
		if err != nil {
			t.Fatal(err)
		}
		// Find two tensors in one arena, live at a common position, at
		// different offsets.
		var a, b = -1, -1
		for i := range p.Tensors {
			for j := range p.Tensors {
				x, y := &p.Tensors[i], &p.Tensors[j]
				if i != j && x.Arena == y.Arena && x.Offset != y.Offset &&
					x.Lifetime[0] <= y.Lifetime[1] && y.Lifetime[0] <= x.Lifetime[1] {
					a, b = i, j
				}
			}
		}
		if a < 0 {
			t.Skip("no two tensors live together")
		}
		p.Tensors[a].Offset = p.Tensors[b].Offset
		p.Tensors[a].Alignment = p.Tensors[b].Alignment
		p.PlanHash = p.ComputeHash()
		err = Verify(g, p)
		if !errors.Is(err, failure.AddressCollision) && !errors.Is(err, failure.PlanMismatch) && !errors.Is(err, failure.AlignmentViolation) {
			t.Fatalf("moved %s onto %s: Verify = %v", p.Tensors[a].ID, p.Tensors[b].ID, err)
		}
	})
}
