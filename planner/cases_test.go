package planner

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/ir"
)

// handCase is a small graph whose slots and offsets were worked out by hand
// from the spec's rules (birth ascending, size descending, id ascending;
// lowest free slot; aligned prefix sums, 128-byte default alignment), not
// produced by the planner. Each tensor line is "id arena slot offset birth
// death"; each arena line is "arena slots peak_bytes max_live
// lower_bound_bytes".
type handCase struct {
	file    string
	mode    Mode
	arenas  ArenaConfig
	tensors []string
	arena   []string
}

var handCases = []handCase{
	{file: "chain-out-of-place", mode: Inference,
		// a and x are born together (same size, a < x); b reuses x's
		// slot, c reuses a's: a chain of out-of-place ops needs 2 slots.
		tensors: []string{"a activations 0 0 0 1", "b activations 1 1024 1 2", "c activations 0 0 2 2", "x activations 1 1024 0 0"},
		arena:   []string{"activations 2 2048 2 2048"}},
	{file: "chain-in-place", mode: Inference,
		// The spec's "linear chain -> 1 slot": every op overwrites a.
		tensors: []string{"a activations 0 0 0 3"},
		arena:   []string{"activations 1 1024 1 1024"}},
	{file: "residual", mode: Inference,
		// x stays live across the block for the add: 3 slots.
		tensors: []string{"W1 parameters 0 0 0 2", "h activations 2 2048 1 2", "t activations 0 0 0 1", "x activations 1 1024 0 2", "y activations 0 0 2 2"},
		arena:   []string{"activations 3 3072 3 3072", "parameters 1 1024 1 1024"}},
	{file: "size-descending", mode: Inference,
		// Same birth: b (1024) < c (512) < a (256) in slot order.
		tensors: []string{"a activations 2 1536 0 1", "b activations 0 0 0 1", "c activations 1 1024 0 1", "o activations 3 1792 1 1"},
		arena:   []string{"activations 4 1920 4 1920"}},
	{file: "id-tie-break", mode: Inference,
		tensors: []string{"a activations 0 0 0 1", "m activations 1 128 0 1", "out activations 3 384 1 1", "z activations 2 256 0 1"},
		arena:   []string{"activations 4 512 4 512"}},
	{file: "alignment-hint", mode: Inference,
		// y's 4096 hint aligns slot 1; z reuses x's slot 0.
		tensors: []string{"x activations 0 0 0 0", "y activations 1 4096 0 1", "z activations 0 0 1 1"},
		arena:   []string{"activations 2 4136 2 80"}},
	{file: "arena-config", mode: Inference,
		arenas: ArenaConfig{ir.ArenaActivations: {AlignmentBytes: 256, PageSize: 4096, CapacityBytes: 4096}},
		// y is sized at its envelope maximum (32 x 4 = 128 bytes), so it
		// sorts before x (40 bytes); x's slot aligns to 256.
		tensors: []string{"x activations 1 256 0 0", "y activations 0 0 0 0"},
		arena:   []string{"activations 2 296 2 168"}},
	{file: "views", mode: Inference,
		// q, k, v live inside qkv's slot; qkv's storage lives until v's
		// last use at position 2.
		tensors: []string{"k activations 0 128 1 1", "out activations 2 512 2 2", "q activations 0 0 1 1", "qkv activations 0 0 0 0",
			"s activations 1 384 1 2", "v activations 0 256 2 2", "x activations 1 384 0 0"},
		arena: []string{"activations 3 640 3 640"}},
	{file: "alias-group", mode: Inference,
		// a and b share one 256-byte storage live [0,2].
		tensors: []string{"a activations 0 0 0 1", "b activations 0 0 1 2", "out activations 1 256 2 2", "x activations 1 256 0 0"},
		arena:   []string{"activations 2 384 2 384"}},
	{file: "saved-for-backward", mode: Inference,
		// Inference ignores saved_for_backward: y reuses h's slot.
		tensors: []string{"h activations 0 0 0 1", "t activations 1 128 1 2", "x activations 1 128 0 0", "y activations 0 0 2 2"},
		arena:   []string{"activations 2 256 2 256"}},
	{file: "saved-for-backward", mode: Forward,
		// Forward keeps h to the end for the backward pass: 3 slots.
		tensors: []string{"h activations 0 0 0 2", "t activations 1 128 1 2", "x activations 1 128 0 0", "y activations 2 256 2 2"},
		arena:   []string{"activations 3 384 3 384"}},
	{file: "saved-for-backward", mode: TrainFull,
		tensors: []string{"dh gradients 0 0 3 3", "h activations 0 0 0 3", "t activations 1 128 1 2", "x activations 1 128 0 0", "y activations 2 256 2 3"},
		arena:   []string{"activations 3 384 3 384", "gradients 1 128 1 128"}},
	{file: "saved-for-backward", mode: Backward,
		// Only the backward node runs; h is carried in from position 0.
		tensors: []string{"dh gradients 0 0 0 0", "h activations 0 0 0 0"},
		arena:   []string{"activations 1 128 1 128", "gradients 1 128 1 128"}},
	{file: "train-step", mode: TrainFull,
		// W, m, v persist; loss (4 bytes) reuses x's slot; the in-place
		// AdamW update at position 4 is the last use of every state.
		tensors: []string{"W parameters 0 0 0 4", "dW gradients 1 128 3 4", "dl gradients 0 0 2 3", "loss activations 0 0 1 4",
			"m optimizer_state 0 0 0 4", "v optimizer_state 1 128 0 4", "x activations 0 0 0 0", "y activations 1 128 0 3"},
		arena: []string{"activations 2 256 2 256", "gradients 2 256 2 132", "optimizer_state 2 256 2 256", "parameters 1 128 1 128"}},
	{file: "train-step", mode: Backward,
		tensors: []string{"W parameters 0 0 0 2", "dW gradients 1 128 1 2", "dl gradients 0 0 0 1",
			"m optimizer_state 0 0 0 2", "v optimizer_state 1 128 0 2", "y activations 0 0 0 1"},
		arena: []string{"activations 1 128 1 128", "gradients 2 256 2 132", "optimizer_state 2 256 2 256", "parameters 1 128 1 128"}},
	{file: "must-not-alias", mode: Inference,
		// c may not reuse a's slot 0, so it opens slot 2.
		tensors: []string{"a activations 0 0 0 1", "b activations 1 1024 1 2", "c activations 2 2048 2 2", "x activations 1 1024 0 0"},
		arena:   []string{"activations 3 3072 2 2048"}},
	{file: "must-not-alias-by-mode", mode: Inference,
		// d (backward) is not planned in inference, so its must_not_alias
		// binds nothing: c reuses a's slot as in the plain chain.
		tensors: []string{"a activations 0 0 0 1", "b activations 1 1024 1 2", "c activations 0 0 2 2", "x activations 1 1024 0 0"},
		arena:   []string{"activations 2 2048 2 2048"}},
	{file: "must-not-alias-by-mode", mode: TrainFull,
		// d shares c's storage and must not alias a: the storage skips
		// a's free slot 0 and opens slot 2.
		tensors: []string{"a activations 0 0 0 1", "b activations 1 1024 1 2", "c activations 2 2048 2 3", "d activations 2 2048 3 3", "x activations 1 1024 0 0"},
		arena:   []string{"activations 3 3072 2 2048"}},
	{file: "dead-output", mode: Inference,
		// z is never read: it dies where it is born and its slot is
		// reused at once.
		tensors: []string{"out activations 0 0 1 1", "x activations 1 256 0 0", "y activations 2 384 0 1", "z activations 0 0 0 0"},
		arena:   []string{"activations 3 512 3 512"}},
	{file: "persistent-arenas", mode: Inference,
		// Parameters get sequential offsets, largest first; the unused
		// constant is still placed.
		tensors: []string{"c constants 0 0 0 0", "out activations 0 0 0 0", "p1 parameters 1 512 0 0", "p2 parameters 0 0 0 0", "p3 parameters 2 768 0 0", "x activations 1 128 0 0"},
		arena:   []string{"activations 2 256 2 256", "constants 1 64 1 64", "parameters 3 896 3 896"}},
}

func loadCase(t *testing.T, name string) *ir.Graph {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "cases", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ir.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestHandCheckedCases(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "cases", "*.json"))
	covered := map[string]bool{}
	for _, c := range handCases {
		covered[c.file] = true
		t.Run(c.file+"/"+string(c.mode), func(t *testing.T) {
			g := loadCase(t, c.file)
			opts := DefaultOptions(g)
			opts.Mode, opts.Arenas, opts.Strategy = c.mode, c.arenas, Slots // computed by hand from the spec's rules
			p, err := PlanMemory(g, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := Verify(g, p); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			var got []string
			for _, tp := range p.Tensors {
				got = append(got, fmt.Sprintf("%s %s %d %d %d %d", tp.ID, tp.Arena, tp.LogicalSlot, tp.Offset, tp.Lifetime[0], tp.Lifetime[1]))
			}
			if !slices.Equal(got, c.tensors) {
				t.Errorf("tensors:\n got  %s\n want %s", strings.Join(got, "\n      "), strings.Join(c.tensors, "\n      "))
			}
			got = nil
			for _, a := range p.Arenas {
				got = append(got, fmt.Sprintf("%s %d %d %d %d", a.Name, a.LogicalSlots, a.PeakBytes, a.MaxLive, a.LowerBoundBytes))
			}
			if !slices.Equal(got, c.arena) {
				t.Errorf("arenas:\n got  %s\n want %s", strings.Join(got, "\n      "), strings.Join(c.arena, "\n      "))
			}
		})
	}
	for _, f := range files {
		if name := strings.TrimSuffix(filepath.Base(f), ".json"); !covered[name] {
			t.Errorf("testdata/cases/%s.json has no expectations", name)
		}
	}
}
