package onnx_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/importer/onnx"
	"github.com/tmmu/tmmu/importer/torch"
)

// sampleModels are the torchvision classifiers TestTorchvisionExports
// exports by default: one of each family the shape inference has rules
// for. TMMU_SLOW=1 takes every model torchvision lists.
var sampleModels = []string{"resnet18", "densenet121", "mobilenet_v3_small", "shufflenet_v2_x0_5", "squeezenet1_0", "regnet_x_400mf", "mnasnet0_5"}

// TestTorchvisionExports exports torchvision classifiers with stock
// torch.onnx.export, in eval mode and in training mode (batch norms emit
// their running statistics), at opset 14, and imports each with no
// shape inference run beforehand, then plans and verifies it. A model
// PyTorch's exporter refuses is logged with its message, not failed.
func TestTorchvisionExports(t *testing.T) {
	py, err := torch.Python(torch.Options{})
	if err == nil {
		err = exec.Command(py, "-c", "import torch, torchvision").Run()
	}
	if err != nil {
		if os.Getenv("TMMU_REQUIRE_TORCH") != "" {
			t.Fatalf("TMMU_REQUIRE_TORCH is set but Python with torchvision is missing: %v", err)
		}
		t.Skipf("no Python with torch and torchvision: %v", err)
	}
	models := sampleModels
	if os.Getenv("TMMU_SLOW") != "" {
		out, err := exec.Command(py, "-c", `import torchvision.models as m
print(" ".join(n for n in dir(m) if n[0].islower() and not n.startswith("get_") and n != "list_models" and callable(getattr(m, n))))`).Output()
		if err != nil {
			t.Fatal(err)
		}
		models = strings.Fields(string(out))
	}
	dir := t.TempDir()
	var refused []string
	for _, name := range models {
		for _, mode := range []string{"eval", "train"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				file := filepath.Join(dir, name+"-"+mode+".onnx")
				cmd := exec.Command(py, "testdata/export_torchvision.py", name, mode, file)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Run(); err != nil {
					var ee *exec.ExitError
					if errors.As(err, &ee) && ee.ExitCode() == 3 {
						msg := strings.TrimSpace(stderr.String())
						refused = append(refused, name+" "+mode+": "+msg)
						t.Skipf("PyTorch's exporter refuses it: %s", msg)
					}
					t.Fatalf("export: %v\n%s", err, stderr.String())
				}
				defer os.Remove(file)
				data, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				m, st, err := onnx.Import(data, onnx.Options{Batch: 1})
				if err != nil {
					t.Fatal(err)
				}
				plan(t, m)
				t.Logf("%d nodes, %d shapes inferred", st.Nodes, st.Inferred)
			})
		}
	}
	if len(refused) > 0 {
		t.Logf("PyTorch's exporter refused %d of %d exports:\n%s", len(refused), 2*len(models), strings.Join(refused, "\n"))
	}
}
