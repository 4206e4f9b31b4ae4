package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportONNX imports a PyTorch-exported ONNX file, plans and verifies
// it, and checks that a failed import writes nothing.
func TestImportONNX(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join("..", "..", "importer", "onnx", "testdata", "tinycnn.onnx")
	irFile := filepath.Join(dir, "cnn.json")
	mustRun(t, "", "import", "onnx", model, "--batch", "4", "--out", irFile)
	plan := filepath.Join(dir, "plan.cbor")
	if err := os.WriteFile(plan, []byte(mustRun(t, "", "plan", irFile, "-o", "cbor")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, "", "verify", irFile, plan); !strings.HasPrefix(out, "ok: plan ") {
		t.Fatalf("verify: %s", out)
	}

	bad := filepath.Join(dir, "bad.json")
	status, _, stderr := runCLI(t, "", "import", "onnx", model, "--out", bad)
	if status != 1 || !strings.Contains(stderr, "INVALID_IR_SHAPES") || !strings.Contains(stderr, "--batch N or --dim batch=N") {
		t.Fatalf("unbound batch: exit %d, %s", status, stderr)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Fatalf("a failed import left %s behind", bad)
	}
	status, _, stderr = runCLI(t, "", "import", "onnx", irFile, "--batch", "1")
	if status != 1 || !strings.Contains(stderr, "INVALID_ENCODING") || !strings.Contains(stderr, "not an ONNX model") {
		t.Fatalf("a JSON file as ONNX: exit %d, %s", status, stderr)
	}
	if status, _, _ := runCLI(t, "", "import", "onnx", model, "--dim", "batch=0"); status != 2 {
		t.Fatalf("--dim batch=0: exit %d, want 2", status)
	}
}
