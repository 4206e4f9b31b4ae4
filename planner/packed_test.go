package planner

import (
	"errors"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
)

// smallGPT2 is a 2-layer GPT-2 train_full graph (hidden 64, vocabulary
// 512).
func smallGPT2(t *testing.T) *ir.Graph {
	t.Helper()
	c := models.DefaultGPT2Config()
	c.Layers, c.Hidden, c.Heads, c.Seq, c.Context, c.Vocab, c.Train = 2, 64, 4, 32, 32, 512, true
	m, err := models.GPT2(c)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Compile(m)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestPackedCapacity: a capacity the packed layout meets but the slots
// layout does not plans with packed and fails with slots; a capacity below
// the lower bound fails with ARENA_TOO_SMALL saying no placement fits.
func TestPackedCapacity(t *testing.T) {
	g := smallGPT2(t)
	plan := func(st Strategy, capacity uint64) (*Plan, error) {
		opts := DefaultOptions(g)
		opts.Strategy = st
		if capacity > 0 {
			opts.Arenas = ArenaConfig{ir.ArenaGradients: {CapacityBytes: ByteSize(capacity)}}
		}
		return PlanMemory(g, opts)
	}
	free, err := plan(Packed, 0)
	if err != nil {
		t.Fatal(err)
	}
	grads := arenaOf(free, ir.ArenaGradients)
	slots, err := plan(Slots, 0)
	if err != nil {
		t.Fatal(err)
	}
	if slots.Metrics.PeakBytes <= free.Metrics.PeakBytes {
		t.Fatalf("slots peak %d is not above packed %d: the test needs a gap", slots.Metrics.PeakBytes, free.Metrics.PeakBytes)
	}
	p, err := plan(Packed, grads.PeakBytes)
	if err != nil {
		t.Fatalf("packed within its own peak: %v", err)
	}
	if err := Verify(g, p); err != nil {
		t.Fatal(err)
	}
	if _, err := plan(Slots, grads.PeakBytes); grads.PeakBytes < arenaOf(slots, ir.ArenaGradients).PeakBytes && !errors.Is(err, failure.ArenaTooSmall) {
		t.Fatalf("slots within packed's peak: %v, want ARENA_TOO_SMALL", err)
	}
	_, err = plan(Packed, grads.LowerBoundBytes-1)
	var fe *failure.Error
	if !errors.As(err, &fe) || fe.Code != failure.ArenaTooSmall || !strings.Contains(fe.Message, "no placement fits") {
		t.Fatalf("packed below the lower bound: %v, want ARENA_TOO_SMALL saying no placement fits", err)
	}
}

// TestPackedCapacityProven: a must_not_alias pair never live at once
// leaves the bytes live at once below what any placement needs; a
// capacity between the two fails with ARENA_TOO_SMALL saying the packer
// proved that no placement fits, with the bound it proved.
func TestPackedCapacityProven(t *testing.T) {
	g, err := ir.Load([]byte(`{"name":"proven","tensors":[
	 {"id":"x","shape":[256],"dtype":"fp32","role":"input"},
	 {"id":"a","shape":[256],"dtype":"fp32","role":"activation"},
	 {"id":"b","shape":[256],"dtype":"fp32","role":"activation"},
	 {"id":"c","shape":[256],"dtype":"fp32","role":"activation","must_not_alias":["a"]},
	 {"id":"y","shape":[256],"dtype":"fp32","role":"output"}],
	 "nodes":[{"id":"n1","op":"relu","inputs":["x"],"outputs":["a"]},
	  {"id":"n2","op":"relu","inputs":["a"],"outputs":["b"]},
	  {"id":"n3","op":"relu","inputs":["b"],"outputs":["c"]},
	  {"id":"n4","op":"relu","inputs":["c"],"outputs":["y"]}],
	 "execution_order":["n1","n2","n3","n4"]}`))
	if err != nil {
		t.Fatal(err)
	}
	free, err := PlanMemory(g, DefaultOptions(g))
	if err != nil {
		t.Fatal(err)
	}
	acts := arenaOf(free, ir.ArenaActivations)
	// a, b and c are 1 KiB each: two are live at once, all three need
	// their own bytes.
	if acts.LowerBoundBytes != 2048 || acts.PeakBytes != 3072 || acts.Packing == nil || !acts.Packing.Optimal {
		t.Fatalf("activations: lower bound %d, peak %d, packing %+v; want 2048, 3072, proven optimal", acts.LowerBoundBytes, acts.PeakBytes, acts.Packing)
	}
	opts := DefaultOptions(g)
	opts.Arenas = ArenaConfig{ir.ArenaActivations: {CapacityBytes: 2560}}
	_, err = PlanMemory(g, opts)
	var fe *failure.Error
	if !errors.As(err, &fe) || fe.Code != failure.ArenaTooSmall || !strings.Contains(fe.Message, "packer proved") {
		t.Fatalf("capacity 2560: %v, want ARENA_TOO_SMALL saying the packer proved no placement fits", err)
	}
}

// arenaOf returns p's arena of that name (the zero ArenaPlan if none).
func arenaOf(p *Plan, arena string) ArenaPlan {
	for _, a := range p.Arenas {
		if a.Name == arena {
			return a
		}
	}
	return ArenaPlan{}
}

// TestPackedSavingOnGeneratedGraphs: on GPT-2 and Llama-style graphs in
// train_full and inference, packed never uses more bytes than slots in
// any arena; the saving is logged.
func TestPackedSavingOnGeneratedGraphs(t *testing.T) {
	gpt := models.DefaultGPT2Config()
	gpt.Layers = 4
	llama := models.DefaultLlamaConfig()
	llama.Layers, llama.Hidden, llama.Heads, llama.KVHeads, llama.Intermediate, llama.Seq = 4, 1024, 16, 4, 2816, 512
	for _, train := range []bool{true, false} {
		gpt.Train, llama.Train = train, train
		gm, err := models.GPT2(gpt)
		if err != nil {
			t.Fatal(err)
		}
		lm, err := models.Llama(llama)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []*ir.Model{gm, lm} {
			g, err := ir.Compile(m)
			if err != nil {
				t.Fatal(err)
			}
			plans := map[Strategy]*Plan{}
			for _, st := range []Strategy{Slots, Packed} {
				opts := DefaultOptions(g)
				opts.Strategy = st
				if plans[st], err = PlanMemory(g, opts); err != nil {
					t.Fatal(err)
				}
				if err := Verify(g, plans[st]); err != nil {
					t.Fatal(err)
				}
			}
			for _, a := range plans[Packed].Arenas {
				if s := arenaOf(plans[Slots], a.Name).PeakBytes; a.PeakBytes > s {
					t.Errorf("%s, arena %s: packed %d bytes > slots %d", m.Name, a.Name, a.PeakBytes, s)
				}
			}
			ps, pp := plans[Slots].Metrics.PeakBytes, plans[Packed].Metrics.PeakBytes
			t.Logf("%s: slots %s, packed %s (lower bound %s), saving %s (%.1f%%)", m.Name, FormatBytes(ps), FormatBytes(pp),
				FormatBytes(plans[Packed].Metrics.LowerBoundBytes), FormatBytes(ps-pp), 100*float64(ps-pp)/float64(ps))
		}
	}
}
