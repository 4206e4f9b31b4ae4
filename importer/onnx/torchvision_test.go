package onnx_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/importer/onnx"
	"github.com/tmmu/tmmu/importer/torch"
)

// sampleModels are the torchvision classifiers TestTorchvisionExports
// exports by default at opset 14: one of each family the shape inference
// has rules for. TMMU_SLOW=1 takes every model torchvision lists.
var sampleModels = []string{"resnet18", "densenet121", "mobilenet_v3_small", "shufflenet_v2_x0_5", "squeezenet1_0", "regnet_x_400mf", "mnasnet0_5"}

// edgeOpsets are the opsets, beside 14, whose op forms differ most from
// it (opset 13: Split's sizes and Squeeze's axes as inputs; 17:
// LayerNormalization as one op), and the models the default run
// exports at them.
var edgeOpsets, edgeModels = []int{13, 17}, []string{"resnet18", "mobilenet_v3_small"}

// TestTorchvisionExports exports torchvision classifiers with stock
// torch.onnx.export, in eval mode and in training mode (batch norms emit
// their running statistics), and imports each with no shape inference
// run beforehand, then plans and verifies it. A model PyTorch's exporter
// refuses is logged with its message, not failed. By default: the sample
// models at opset 14, and edgeModels at edgeOpsets; TMMU_SLOW=1: every
// model at the opsets TMMU_ONNX_OPSETS lists (default 14; PyTorch 1.13
// writes 13 to 17).
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
	type export struct {
		model string
		opset int
	}
	var exports []export
	for _, m := range sampleModels {
		exports = append(exports, export{m, 14})
	}
	for _, o := range edgeOpsets {
		for _, m := range edgeModels {
			exports = append(exports, export{m, o})
		}
	}
	if os.Getenv("TMMU_SLOW") != "" {
		out, err := exec.Command(py, "-c", `import torchvision.models as m
print(" ".join(n for n in dir(m) if n[0].islower() and not n.startswith("get_") and n != "list_models" and callable(getattr(m, n))))`).Output()
		if err != nil {
			t.Fatal(err)
		}
		opsets := strings.Fields(os.Getenv("TMMU_ONNX_OPSETS"))
		if len(opsets) == 0 {
			opsets = []string{"14"}
		}
		exports = nil
		for _, o := range opsets {
			n, err := strconv.Atoi(o)
			if err != nil || n < 13 || n > 17 {
				t.Fatalf("TMMU_ONNX_OPSETS: %q is not an opset from 13 to 17", o)
			}
			for _, m := range strings.Fields(string(out)) {
				exports = append(exports, export{m, n})
			}
		}
	}
	dir := t.TempDir()
	var refused []string
	tried := 0
	for _, e := range exports {
		for _, mode := range []string{"eval", "train"} {
			name := fmt.Sprintf("%s/%s/opset%d", e.model, mode, e.opset)
			t.Run(name, func(t *testing.T) {
				tried++
				file := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".onnx")
				cmd := exec.Command(py, "testdata/export_torchvision.py", e.model, mode, file, strconv.Itoa(e.opset))
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Run(); err != nil {
					var ee *exec.ExitError
					if errors.As(err, &ee) && ee.ExitCode() == 3 {
						msg := strings.TrimSpace(stderr.String())
						refused = append(refused, name+": "+msg)
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
				t.Logf("%d nodes, %d shapes inferred, %d nodes folded", st.Nodes, st.Inferred, st.Folded)
			})
		}
	}
	if len(refused) > 0 {
		t.Logf("PyTorch's exporter refused %d of %d exports:\n%s", len(refused), tried, strings.Join(refused, "\n"))
	}
}
