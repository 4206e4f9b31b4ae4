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

// TestDemoImported runs an imported graph on the in-process cluster: the
// engine has no kernels for ONNX ops, so the workers agree on the plan
// and run it with the memory-traffic executor, and the demo says why.
func TestDemoImported(t *testing.T) {
	irFile := filepath.Join(t.TempDir(), "cnn.json")
	mustRun(t, "", "import", "onnx", filepath.Join("..", "..", "importer", "onnx", "testdata", "tinycnn.onnx"), "--batch", "2", "--out", irFile)
	status, stdout, stderr := runCLI(t, "", "demo", "--ir", irFile, "--workers", "2", "--steps", "2")
	if status != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", status, stdout, stderr)
	}
	for _, want := range []string{"epoch 0 agreed: true", "job demo: done at step 2 of 2", "executor arena: each step writes every output"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, `UNSUPPORTED_EXECUTION: node \"/conv1/Conv\": op \"Conv\" has no kernel`) {
		t.Errorf("the demo does not say why the engine refused:\n%s", stderr)
	}
}
