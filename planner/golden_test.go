package planner

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/golden")

// golden renders a plan as stable text: hashes, arena metrics, then one
// line per tensor.
func golden(p *Plan) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "name %s\nmode %s\nstrategy %s\nir_hash %s\nexecution_order_hash %s\narena_config_hash %s\nplan_hash %s\n",
		p.Name, p.Mode, p.Strategy, p.IRHash, p.ExecutionOrderHash, p.ArenaConfigHash, p.PlanHash)
	fmt.Fprintf(&b, "positions %d tensors %d storages %d\n\n", p.Positions, p.Metrics.Tensors, p.Metrics.Storages)
	fmt.Fprintln(&b, "arena role tensors storages slots max_live peak_bytes lower_bound_bytes reserved_bytes")
	for _, a := range p.Arenas {
		fmt.Fprintf(&b, "%s %s %d %d %d %d %d %d %d\n", a.Name, a.Role, a.Tensors, a.Storages, a.LogicalSlots, a.MaxLive, a.PeakBytes, a.LowerBoundBytes, a.ReservedBytes)
	}
	fmt.Fprintln(&b, "\ntensor arena slot offset size birth death alignment [storage]")
	for _, t := range p.Tensors {
		fmt.Fprintf(&b, "%s %s %d %d %d %d %d %d", t.ID, t.Arena, t.LogicalSlot, t.Offset, t.Size, t.Lifetime[0], t.Lifetime[1], t.Alignment)
		if t.Storage != "" {
			fmt.Fprintf(&b, " %s", t.Storage)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".txt")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./planner -run Golden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w []byte
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if !bytes.Equal(g, w) {
				t.Fatalf("%s differs from the golden file at line %d:\n got  %s\n want %s\n(if the change is intended: go test ./planner -run Golden -update)", path, i+1, g, w)
			}
		}
	}
}

// TestGoldenSpecVectors plans the spec's test vectors (VII.B): a linear
// chain, residual blocks and GPT-2 small in train_full. The golden files pin
// every slot, offset and hash; the assertions below pin what the spec says
// about them independently of the files.
func TestGoldenSpecVectors(t *testing.T) {
	chain, err := models.Chain(models.DefaultChainConfig())
	if err != nil {
		t.Fatal(err)
	}
	residual, err := models.Residual(models.DefaultResidualConfig())
	if err != nil {
		t.Fatal(err)
	}
	gc := models.DefaultGPT2Config()
	gc.Train = true
	gpt2, err := models.GPT2(gc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name        string
		m           *ir.Model
		activations int // logical slots in the activations arena
	}{
		// Out-of-place matmuls: input and output of each op are live
		// together, so the chain needs exactly 2 slots.
		{"chain-inference", chain, 2},
		// x, x·W and gelu(x·W) are live at the add: 3 slots.
		{"residual-inference", residual, 3},
		{"gpt2-small-train_full", gpt2, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := ir.Compile(c.m)
			if err != nil {
				t.Fatal(err)
			}
			opts := DefaultOptions(g)
			opts.Strategy = Slots // the spec's vectors
			p, err := PlanMemory(g, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := Verify(g, p); err != nil {
				t.Fatal(err)
			}
			for _, a := range p.Arenas {
				if a.LogicalSlots != a.MaxLive {
					t.Errorf("arena %s: %d slots, max live %d", a.Name, a.LogicalSlots, a.MaxLive)
				}
				if a.Name == ir.ArenaActivations && c.activations >= 0 && a.LogicalSlots != c.activations {
					t.Errorf("activations: %d slots, want %d", a.LogicalSlots, c.activations)
				}
			}
			for _, tp := range p.Tensors {
				if tp.Storage == "" && tp.Offset%DefaultAlignment != 0 {
					t.Errorf("%s at offset %d is not %d-byte aligned", tp.ID, tp.Offset, DefaultAlignment)
				}
			}
			checkGolden(t, c.name, golden(p))
		})
	}
}
