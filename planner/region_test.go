package planner

import (
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// TestRegionBytes: with region_bytes set, no storage of any strategy
// crosses a region boundary, the verifier accepts the plan and refuses
// one moved across a boundary, the arena config hash changes, and a
// storage larger than a region is refused. Regions need not be powers of
// two (a WebGPU slot of 5 windows is 640 MiB on llvmpipe).
func TestRegionBytes(t *testing.T) {
	g := smallGPT2(t)
	for _, region := range []uint64{256 << 10, 5 * 48 << 10} {
		testRegionBytes(t, g, region)
	}
}

func testRegionBytes(t *testing.T, g *ir.Graph, region uint64) {
	for _, st := range []Strategy{Slots, Packed, GreedySize} {
		opts := DefaultOptions(g)
		opts.Strategy = st
		free, err := PlanMemory(g, opts)
		if err != nil {
			t.Fatal(err)
		}
		opts.Arenas = ArenaConfig{"activations": {AlignmentBytes: 256, RegionBytes: ByteSize(region)}, "gradients": {AlignmentBytes: 256, RegionBytes: ByteSize(region)}}
		p, err := PlanMemory(g, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(g, p); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		crossed := 0
		for _, tp := range free.Tensors {
			if tp.Arena == "activations" && straddles(tp.Offset, tp.Size, region) {
				crossed++
			}
		}
		for _, tp := range p.Tensors {
			if (tp.Arena == "activations" || tp.Arena == "gradients") && straddles(tp.Offset, tp.Size, region) {
				t.Fatalf("%s: %s [%d, %d) crosses a region boundary", st, tp.ID, tp.Offset, tp.Offset+tp.Size)
			}
		}
		act := func(p *Plan) uint64 {
			for _, a := range p.Arenas {
				if a.Name == "activations" {
					return a.ReservedBytes
				}
			}
			return 0
		}
		t.Logf("%s: activations %d bytes without regions (%d storages crossing a boundary), %d with %d-byte regions",
			st, act(free), crossed, act(p), region)
		if p.ArenaConfigHash == free.ArenaConfigHash {
			t.Errorf("%s: region_bytes does not change the arena config hash", st)
		}
		// Moved across a boundary, a placement is refused.
		q := *p
		q.Tensors = append([]TensorPlacement(nil), p.Tensors...)
		for i := range q.Tensors {
			if tp := &q.Tensors[i]; tp.ID == "logits" {
				tp.Offset = region - 256
			}
		}
		if code := failure.CodeOf(Verify(g, &q)); code != failure.AlignmentViolation && code != failure.AddressCollision {
			t.Errorf("%s: a tensor across a boundary verified (%s)", st, code)
		}
	}
	opts := DefaultOptions(g)
	opts.Arenas = ArenaConfig{"activations": {RegionBytes: 4096}}
	if _, err := PlanMemory(g, opts); failure.CodeOf(err) != failure.ArenaTooSmall {
		t.Errorf("storages above a 4 KiB region: %v, want ARENA_TOO_SMALL", err)
	}
	opts.Arenas = ArenaConfig{"activations": {AlignmentBytes: 256, RegionBytes: 1000}}
	if _, err := PlanMemory(g, opts); failure.CodeOf(err) != failure.AlignmentViolation {
		t.Errorf("region_bytes 1000 with alignment 256: %v, want ALIGNMENT_VIOLATION", err)
	}
}
