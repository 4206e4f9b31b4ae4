package planner

import (
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner/pack"
	"pgregory.net/rapid"
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

// TestPropertyFitRegions: a valid packing refitted to regions is a valid
// packing (lifetimes, conflicts, alignments) in which no buffer crosses
// a region boundary, and its reported peak is its offsets' peak.
func TestPropertyFitRegions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 80).Draw(t, "n")
		p := &pack.Problem{Buffers: make([]pack.Buffer, n)}
		biggest := uint64(0)
		for i := range p.Buffers {
			s := rapid.Int64Range(0, 40).Draw(t, "start")
			p.Buffers[i] = pack.Buffer{
				Start: s,
				End:   s + rapid.Int64Range(1, 20).Draw(t, "len"),
				Size:  rapid.Uint64Range(1, 5000).Draw(t, "size"),
				Align: uint64(1) << rapid.IntRange(0, 8).Draw(t, "align"),
			}
			biggest = max(biggest, p.Buffers[i].Size)
		}
		for range rapid.IntRange(0, 3).Draw(t, "conflicts") {
			a, b := rapid.IntRange(0, n-1).Draw(t, "a"), rapid.IntRange(0, n-1).Draw(t, "b")
			if a != b {
				p.Conflicts = append(p.Conflicts, [2]int32{int32(a), int32(b)})
			}
		}
		res, err := pack.Pack(p, pack.Options{Effort: pack.Fast})
		if err != nil {
			t.Fatal(err)
		}
		region := biggest + rapid.Uint64Range(0, 3*biggest).Draw(t, "slack")
		offs, peak, ok := fitRegions(p, res.Offsets, region)
		if !ok {
			// Only a buffer whose alignment leaves no room in any
			// region may fail.
			return
		}
		got, err := pack.Check(p, offs)
		if err != nil {
			t.Fatalf("refitted placement is invalid: %v", err)
		}
		if got != peak {
			t.Fatalf("fitRegions reports peak %d, its offsets peak at %d", peak, got)
		}
		for i, b := range p.Buffers {
			if straddles(offs[i], b.Size, region) {
				t.Fatalf("buffer %d [%d, %d) crosses a multiple of %d", i, offs[i], offs[i]+b.Size, region)
			}
		}
	})
}

// TestRegionsCostLittle: GPT-2 small planned for llvmpipe's 640 MiB
// slots (the packing refitted to the regions) reserves within 1 % of the
// plan without regions; the slot layout, what a crossing packing fell
// back to before, reserved 25 % more.
func TestRegionsCostLittle(t *testing.T) {
	m, err := models.GPT2(models.GPT2Config{Layers: 12, Hidden: 768, Heads: 12, Seq: 1024, Context: 1024, Batch: 1, Vocab: 50257, DType: ir.F32, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	total := func(region uint64, st Strategy) uint64 {
		opts := DefaultOptions(g)
		opts.Strategy = st
		opts.Arenas = ArenaConfig{}
		for _, a := range ir.Arenas {
			opts.Arenas[a] = ArenaSpec{AlignmentBytes: 256, RegionBytes: ByteSize(region)}
		}
		p, err := PlanMemory(g, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(g, p); err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, a := range p.Arenas {
			n += a.ReservedBytes
		}
		return n
	}
	const slot = 640 << 20
	free, fitted, slots := total(0, Packed), total(slot, Packed), total(slot, Slots)
	t.Logf("GPT-2 small: %d bytes without regions, %d in 640 MiB regions (slots: %d)", free, fitted, slots)
	if float64(fitted) > 1.01*float64(free) {
		t.Errorf("640 MiB regions cost %.1f %%", 100*(float64(fitted)/float64(free)-1))
	}
}
