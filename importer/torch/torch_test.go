package torch_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/importer/torch"
	"github.com/tmmu/tmmu/internal/plantest"
	"github.com/tmmu/tmmu/ir"
)

// needTorch skips the test when no Python with torch is found, unless
// TMMU_REQUIRE_TORCH is set (CI installs Debian's python3-torch and sets
// it), where it fails instead.
func needTorch(t *testing.T) {
	t.Helper()
	py, err := torch.Python(torch.Options{})
	if err == nil {
		err = exec.Command(py, "-c", "import torch").Run()
	}
	if err != nil {
		if os.Getenv("TMMU_REQUIRE_TORCH") != "" {
			t.Fatalf("TMMU_REQUIRE_TORCH is set but Python with torch is missing: %v", err)
		}
		t.Skipf("no Python with torch (apt-get install python3-torch): %v", err)
	}
}

func importTiny(t *testing.T, train bool) (*ir.Model, *torch.Report) {
	t.Helper()
	m, rep, err := torch.Import(context.Background(), torch.Options{Model: "testdata/tiny.py:tiny", Train: train})
	if err != nil {
		t.Fatal(err)
	}
	plantest.Verified(t, m)
	return m, rep
}

func roles(m *ir.Model) map[ir.Role]int {
	r := map[ir.Role]int{}
	for _, t := range m.Tensors {
		r[t.Role]++
	}
	return r
}

func TestInference(t *testing.T) {
	needTorch(t)
	m, rep := importTiny(t, false)
	r := roles(m)
	// conv weight, bn weight, bias, running mean and var, 2 linear
	// weights, 2 biases (num_batches_tracked is not read in eval mode).
	if r[ir.Parameter] != 9 || r[ir.Input] != 1 || r[ir.Output] != 1 || r[ir.Gradient] != 0 || r[ir.OptimizerState] != 0 {
		t.Fatalf("roles %v", r)
	}
	if rep.PyTorchPeakBytes <= rep.PyTorchPersistentBytes || rep.PyTorchPersistentBytes == 0 {
		t.Fatalf("report %+v", rep)
	}
}

func TestTrain(t *testing.T) {
	needTorch(t)
	m, rep := importTiny(t, true)
	r := roles(m)
	// AdamW keeps exp_avg and exp_avg_sq for each of the 7 parameters.
	if r[ir.OptimizerState] != 14 || r[ir.Gradient] == 0 || r[ir.Output] != 1 || r[ir.Input] != 2 {
		t.Fatalf("roles %v", r)
	}
	var inPlace, saved int
	for _, tt := range m.Tensors {
		if tt.InPlaceWrite {
			inPlace++
		}
		if tt.SavedForBackward {
			saved++
		}
	}
	// Every parameter and optimizer state is updated in place, and the
	// batch norm's running statistics and step count too.
	if inPlace != 7+14+3 || saved == 0 || rep.SavedForBackward != saved {
		t.Fatalf("%d in place, %d saved for backward; report %+v", inPlace, saved, rep)
	}
	phases := map[ir.Phase]int{}
	for _, n := range m.Nodes {
		phases[n.Phase]++
	}
	if phases[ir.Forward] == 0 || phases[ir.Backward] == 0 || phases[ir.Optimizer] == 0 {
		t.Fatalf("phases %v", phases)
	}
}

func TestBadInput(t *testing.T) {
	_, _, err := torch.Import(context.Background(), torch.Options{Model: "resnet18", Python: "/nonexistent/python3"})
	if !errors.Is(err, failure.InvalidOptions) || !strings.Contains(err.Error(), `python "/nonexistent/python3" (--python): no such file`) {
		t.Fatalf("missing python: %v", err)
	}
	t.Setenv("TMMU_PYTHON", "/nonexistent/python3")
	_, _, err = torch.Import(context.Background(), torch.Options{Model: "resnet18"})
	if !errors.Is(err, failure.InvalidOptions) || !strings.Contains(err.Error(), "(TMMU_PYTHON): no such file") {
		t.Fatalf("missing TMMU_PYTHON: %v", err)
	}
	t.Setenv("TMMU_PYTHON", "")
	needTorch(t)
	for _, c := range []struct{ model, want string }{
		{"no_such_model", "unknown model 'no_such_model'"},
		{"testdata/tiny.py:nothing", "defines no 'nothing'"},
	} {
		_, _, err := torch.Import(context.Background(), torch.Options{Model: c.model, NoPeak: true})
		if !errors.Is(err, failure.InvalidIRGraph) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want INVALID_IR_GRAPH containing %q", c.model, err, c.want)
		}
	}
}
