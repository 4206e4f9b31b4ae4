package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/importer/torch"
	"github.com/tmmu/tmmu/safetensors"
)

// pythonWithTorch returns a Python that imports torch, or skips the test
// (fails it when TMMU_REQUIRE_TORCH is set: CI installs Debian's torch).
func pythonWithTorch(t *testing.T) string {
	t.Helper()
	py, err := torch.Python(torch.Options{})
	if err == nil {
		err = exec.Command(py, "-c", "import torch, numpy").Run()
	}
	if err != nil {
		if os.Getenv("TMMU_REQUIRE_TORCH") != "" {
			t.Fatalf("TMMU_REQUIRE_TORCH is set but Python with torch is missing: %v", err)
		}
		t.Skipf("no Python with torch (apt-get install python3-torch): %v", err)
	}
	return py
}

// executors are the backends a parity test runs: cpu, and webgpu where
// the machine has an adapter (required when TMMU_REQUIRE_WEBGPU=1).
func executors(t *testing.T) []string {
	out := []string{"cpu"}
	be, _, err := engine.Open("webgpu")
	switch {
	case err == nil:
		be.Close()
		out = append(out, "webgpu")
	case errors.Is(err, engine.ErrNoAdapter) && os.Getenv("TMMU_REQUIRE_WEBGPU") != "1":
		t.Logf("no WebGPU adapter: cpu only (%v)", err)
	default:
		t.Fatalf("webgpu: %v", err)
	}
	return out
}

// tokenFile writes n tokens below vocab that a model can learn: a
// first-order Markov chain in which each token has 4 likely successors.
func tokenFile(t *testing.T, path string, n, vocab int, seed uint64) {
	t.Helper()
	b := make([]byte, 2*n)
	x, tok := seed, 0
	for i := range n {
		x = x*6364136223846793005 + 1442695040888963407
		r := int(x >> 33)
		if r%8 == 0 {
			tok = r % vocab
		} else {
			tok = (tok*7 + 1 + r%4) % vocab
		}
		binary.LittleEndian.PutUint16(b[2*i:], uint16(tok))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readWeights(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	sf, err := safetensors.Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, i := range sf.Tensors {
		if i.DType == safetensors.I64 {
			b, err := sf.Read(i)
			if err != nil {
				t.Fatal(err)
			}
			for k := range i.Elements() {
				out[i.Name] = append(out[i.Name], float32(int64(binary.LittleEndian.Uint64(b[8*k:]))))
			}
			continue
		}
		v, err := sf.Float32s(i)
		if err != nil {
			t.Fatal(err)
		}
		out[i.Name] = v
	}
	return out
}

// TestParityGPT2WithPyTorch trains the generator's GPT-2 from weights
// PyTorch initialised (bench/parity/gpt2.py, Hugging Face names) on a
// token file in sequential order, with tmmu train and with PyTorch eager
// fp32 (bench/parity/train.py), and compares every step's loss, the
// validation loss and the exported weights.
func TestParityGPT2WithPyTorch(t *testing.T) {
	py := pythonWithTorch(t)
	dir := t.TempDir()
	script := filepath.Join("..", "..", "bench", "parity", "train.py")
	steps := "50"
	if testing.Short() {
		steps = "10"
	}
	irFile, w0 := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "init.safetensors")
	trainBin, valBin := filepath.Join(dir, "train.bin"), filepath.Join(dir, "val.bin")
	tokenFile(t, trainBin, 30000, 512, seedOr(1))
	tokenFile(t, valBin, 5000, 512, 2)
	mustRun(t, "", "gen", "gpt2", "--train", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--context", "32", "--batch", "4", "--vocab", "512", "--out", irFile)
	pyRun := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(py, append([]string{script, "--batch", "4", "--threads", "1"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("train.py: %v\n%s", err, ee.Stderr)
			}
			t.Fatal(err)
		}
		return out
	}
	pyRun("--init", w0)
	ref := filepath.Join(dir, "pytorch.safetensors")
	var want struct {
		Losses  []float64 `json:"losses"`
		ValLoss float64   `json:"val_loss"`
	}
	if err := json.Unmarshal(pyRun("--weights", w0, "--data", trainBin, "--val-data", valBin, "--val-batches", "4", "--steps", steps, "--export", ref), &want); err != nil {
		t.Fatal(err)
	}
	refW := readWeights(t, ref)
	for _, ex := range executors(t) {
		out := filepath.Join(dir, ex+".safetensors")
		var got trainResult
		js := mustRun(t, "", "train", irFile, "--executor", ex, "--steps", steps, "--weights", w0, "--data", trainBin, "--order", "sequential",
			"--val-data", valBin, "--val-batches", "4", "--export", out, "-o", "json")
		if err := json.Unmarshal([]byte(js), &got); err != nil {
			t.Fatal(err)
		}
		worstLoss := lossesMatch(t, ex, got, want.Losses, &want.ValLoss, 1e-4)
		last := got.Steps[len(got.Steps)-1]
		gotW := readWeights(t, out)
		worstW, worstK := compareWeights(t, gotW, refW, 1e-4, 1e-4)
		t.Logf("| gpt2 (generator, 2 layers, hidden 64, vocab 512, batch 4×32) | %s | %s steps | loss %.5f → %.5f | worst loss rel. diff %.2g | val %.5f vs %.5f | worst weight diff %.2g (attention key biases %.2g) |",
			ex, steps, got.Steps[0].Loss, last.Loss, worstLoss, *last.ValLoss, want.ValLoss, worstW, worstK)
		if got.Steps[len(got.Steps)-1].Loss >= got.Steps[0].Loss && !testing.Short() {
			t.Errorf("%s: the loss did not fall (%.4f → %.4f)", ex, got.Steps[0].Loss, last.Loss)
		}
	}
	if _, _, help := runCLI(t, "", "train", "--help"); !strings.Contains(help, "--weights") || !strings.Contains(help, "--val-data") {
		t.Errorf("tmmu train --help does not list --weights and --val-data:\n%s", help)
	}
}

// TestParityImportedGPT2WithPyTorch is the parity check on an
// imported model: a GPT-2 defined in a PyTorch file (bench/parity/gpt2.py,
// not the built-in generator) imported with tmmu import torch FILE:build
// --train, trained by tmmu from the initial weights the importer wrote
// beside the graph, on a token file in sequential order, against PyTorch
// eager fp32 training the same module: every step's loss, the
// validation loss and the exported weights, on each executor.
func TestParityImportedGPT2WithPyTorch(t *testing.T) {
	py := pythonWithTorch(t)
	dir := t.TempDir()
	steps := "50"
	if testing.Short() {
		steps = "8"
	}
	if d := os.Getenv("TMMU_TEST_KEEP"); d != "" {
		dir = d
	}
	irFile, w0 := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "gpt2.safetensors")
	trainBin, valBin := filepath.Join(dir, "train.bin"), filepath.Join(dir, "val.bin")
	tokenFile(t, trainBin, 30000, 512, seedOr(7))
	tokenFile(t, valBin, 5000, 512, 6)
	t.Setenv("TMMU_PYTHON", py)
	_, _, stderr := runCLI(t, "", "import", "torch", filepath.Join("..", "..", "bench", "parity", "gpt2.py")+":build", "--train", "--no-peak", "--out", irFile)
	if _, err := os.Stat(w0); err != nil {
		t.Fatalf("import torch wrote no weights beside the graph: %v\n%s", err, stderr)
	}
	ref := filepath.Join(dir, "pytorch.safetensors")
	cmd := exec.Command(py, filepath.Join("..", "..", "bench", "parity", "train.py"), "--batch", "4", "--threads", "1", "--weights", w0, "--data", trainBin,
		"--val-data", valBin, "--val-batches", "2", "--steps", steps, "--export", ref)
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("train.py: %v", err)
	}
	var want struct {
		Losses  []float64 `json:"losses"`
		ValLoss float64   `json:"val_loss"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	refW := readWeights(t, ref)
	for _, ex := range executors(t) {
		var got trainResult
		out := filepath.Join(dir, ex+".safetensors")
		js := mustRun(t, "", "train", irFile, "--executor", ex, "--steps", steps, "--weights", w0, "--data", trainBin, "--order", "sequential",
			"--val-data", valBin, "--val-batches", "2", "--export", out, "-o", "json")
		if err := json.Unmarshal([]byte(js), &got); err != nil {
			t.Fatal(err)
		}
		worst := lossesMatch(t, ex, got, want.Losses, &want.ValLoss, 1e-4)
		last := got.Steps[len(got.Steps)-1]
		worstW, worstK := compareWeights(t, readWeights(t, out), refW, 1e-4, 1e-4)
		t.Logf("| gpt2 (bench/parity/gpt2.py, imported) | %s | %s steps | loss %.5f → %.5f | worst loss rel. diff %.2g | val %.5f vs %.5f | worst weight diff %.2g (attention key biases %.2g) |",
			ex, steps, got.Steps[0].Loss, last.Loss, worst, *last.ValLoss, want.ValLoss, worstW, worstK)
	}
}

// seedOr is $TMMU_PARITY_SEED, or def: the parity tests' data can be
// drawn again to see how their differences vary.
func seedOr(def uint64) uint64 {
	if s, err := strconv.ParseUint(os.Getenv("TMMU_PARITY_SEED"), 10, 64); err == nil {
		return s
	}
	return def
}

// TestParityResNet18WithPyTorch trains torchvision's resnet18 (batch 8,
// 32×32 images from a .npy set, 10 classes), imported with tmmu import
// torch from PyTorch's own initialisation, with tmmu on the cpu and with
// PyTorch eager fp32, and compares every step's loss and the exported
// weights and batch norm statistics. AdamW at lr 1e-5: at 1e-3 and 1e-4
// this setting is chaotic (PyTorch on 1 thread and on 2 disagree by 79 %
// and 0.8 % within 20 steps; at 1e-5 by 6·10⁻⁷), so only there does a
// difference say something about tmmu. With -short: one step.
func TestParityResNet18WithPyTorch(t *testing.T) {
	py := pythonWithTorch(t)
	dir := t.TempDir()
	steps := "20"
	if testing.Short() {
		steps = "1"
	}
	irFile, w0 := filepath.Join(dir, "r18.json"), filepath.Join(dir, "r18.safetensors")
	images, labels := filepath.Join(dir, "images.npy"), filepath.Join(dir, "labels.npy")
	mk := exec.Command(py, "-c", `import sys, numpy as np
rng = np.random.default_rng(0)
y = rng.integers(0, 10, size=64)
x = rng.standard_normal((64, 3, 32, 32)).astype(np.float32) * 0.5
x[:, :, :8, :8] += (y[:, None, None, None] / 5.0)
np.save(sys.argv[1], x); np.save(sys.argv[2], y)`, images, labels)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("making the image set: %v\n%s", err, out)
	}
	t.Setenv("TMMU_PYTHON", py)
	if status, _, stderr := runCLI(t, "", "import", "torch", "resnet18", "--train", "--batch", "8", "--image-size", "32", "--no-peak", "--out", irFile); status != 0 {
		t.Fatalf("import: %s", stderr)
	}
	ref := filepath.Join(dir, "pytorch.safetensors")
	cmd := exec.Command(py, filepath.Join("..", "..", "bench", "parity", "train.py"), "--model", "resnet18", "--batch", "8", "--lr", "1e-5", "--threads", "1",
		"--weights", w0, "--images", images, "--labels", labels, "--steps", steps, "--export", ref)
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("train.py: %v", err)
	}
	var want struct {
		Losses []float64 `json:"losses"`
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	b := readWeights(t, ref)
	for _, ex := range executors(t) {
		var got trainResult
		out := filepath.Join(dir, ex+".safetensors")
		js := mustRun(t, "", "train", irFile, "--executor", ex, "--steps", steps, "--lr", "1e-5", "--weights", w0, "--data", images, "--labels", labels,
			"--order", "sequential", "--export", out, "-o", "json")
		if err := json.Unmarshal([]byte(js), &got); err != nil {
			t.Fatal(err)
		}
		worst := lossesMatch(t, ex, got, want.Losses, nil, 1e-3)
		a := readWeights(t, out)
		if len(a) != len(b) {
			t.Errorf("%s: %d tensors exported, PyTorch's state_dict has %d", ex, len(a), len(b))
		}
		worstW := 0.0
		for name, v := range b {
			for i := range v {
				worstW = max(worstW, math.Abs(float64(a[name][i]-v[i])))
			}
		}
		if worstW > 1e-3 {
			t.Errorf("%s: exported weights and statistics differ from PyTorch's by %.3g", ex, worstW)
		}
		t.Logf("| resnet18 (torchvision, imported, batch 8, 32×32, lr 1e-5) | %s | %s steps | loss %.5f → %.5f | worst loss rel. diff %.2g | worst weight diff %.2g |",
			ex, steps, got.Steps[0].Loss, got.Steps[len(got.Steps)-1].Loss, worst, worstW)
	}
}

// TestImportedGradientsMatchPyTorch checks the kernels of imported ops
// against PyTorch's autograd on small members of the model families
// (bench/parity/families.py: resnet18; mobilenet_v3_large's depthwise
// convolutions, hardswish and squeeze-excitation; a vision transformer
// with vit_b_16's code): the loss of one batch, and every parameter's
// gradient. The gradient is read off one AdamW step with ε = 1 and no
// weight decay, whose update is lr·g/(|g|+1), so g = u/(1−|u|) with
// u = Δw/lr; lr = 10⁴ makes Δw large beside the weight, so that fp32
// keeps every digit of small gradients.
func TestImportedGradientsMatchPyTorch(t *testing.T) {
	py := pythonWithTorch(t)
	t.Setenv("TMMU_PYTHON", py)
	dir := t.TempDir()
	if d := os.Getenv("TMMU_TEST_KEEP"); d != "" {
		dir = d
	}
	images, labels := filepath.Join(dir, "images.npy"), filepath.Join(dir, "labels.npy")
	mk := exec.Command(py, "-c", `import sys, numpy as np
rng = np.random.default_rng(1)
np.save(sys.argv[1], rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
np.save(sys.argv[2], rng.integers(0, 10, size=8))`, images, labels)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	families := filepath.Join("..", "..", "bench", "parity", "families.py")
	for _, name := range []string{"resnet", "mobilenet", "vit"} {
		t.Run(name, func(t *testing.T) {
			irFile, w0 := filepath.Join(dir, name+".json"), filepath.Join(dir, name+".safetensors")
			if status, _, stderr := runCLI(t, "", "import", "torch", families+":"+name, "--train", "--no-peak", "--out", irFile); status != 0 {
				t.Fatalf("import: %s", stderr)
			}
			const lr = 1e4
			grads := filepath.Join(dir, name+"-grads.safetensors")
			raw, err := exec.Command(py, filepath.Join("..", "..", "bench", "parity", "train.py"), "--model", families+":"+name, "--weights", w0,
				"--images", images, "--labels", labels, "--batch", "4", "--threads", "1", "--grads", grads).Output()
			if err != nil {
				t.Fatalf("train.py: %v", err)
			}
			var want struct {
				Loss float64 `json:"loss"`
			}
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			before, g := readWeights(t, w0), readWeights(t, grads)
			for _, ex := range executors(t) {
				out := filepath.Join(dir, name+"-"+ex+".safetensors")
				var got trainResult
				js := mustRun(t, "", "train", irFile, "--executor", ex, "--steps", "1", "--lr", fmt.Sprint(lr), "--eps", "1", "--weight-decay", "0",
					"--weights", w0, "--data", images, "--labels", labels, "--order", "sequential", "--export", out, "-o", "json")
				if err := json.Unmarshal([]byte(js), &got); err != nil {
					t.Fatal(err)
				}
				if d := math.Abs(float64(got.Steps[0].Loss)-want.Loss) / want.Loss; d > 1e-5 {
					t.Errorf("%s: loss %.7f, PyTorch %.7f", ex, got.Steps[0].Loss, want.Loss)
				}
				after := readWeights(t, out)
				worst, worstName := 0.0, ""
				for pname, gv := range g {
					var num, den float64
					for i, x := range gv {
						u := float64(before[pname][i]-after[pname][i]) / lr
						est := u / (1 - math.Abs(u))
						num += (est - float64(x)) * (est - float64(x))
						den += float64(x) * float64(x)
					}
					if den < 1e-12 {
						continue // no gradient to speak of
					}
					if r := math.Sqrt(num / den); r > worst {
						worst, worstName = r, pname
					}
				}
				if worst > 1e-3 {
					t.Errorf("%s: gradient of %s differs from PyTorch's by %.3g (relative, in norm)", ex, worstName, worst)
				}
				t.Logf("%s on %s: %d parameters, loss %.6f (PyTorch %.6f), worst gradient %s off by %.2g relative", name, ex, len(g), got.Steps[0].Loss, want.Loss, worstName, worst)
			}
		})
	}
}

// lossesMatch checks a tmmu train -o json run on executor ex against
// PyTorch's losses, step by step, and its last validation loss against
// PyTorch's (val, when not nil), each within tol relative; it returns the
// worst relative step-loss difference.
func lossesMatch(t *testing.T, ex string, got trainResult, want []float64, val *float64, tol float64) float64 {
	t.Helper()
	if len(got.Steps) != len(want) {
		t.Fatalf("%s: %d steps, PyTorch %d", ex, len(got.Steps), len(want))
	}
	worst := 0.0
	for i, s := range got.Steps {
		d := math.Abs(float64(s.Loss)-want[i]) / math.Abs(want[i])
		worst = max(worst, d)
		if d > tol {
			t.Errorf("%s step %d: loss %.7f, PyTorch %.7f (relative %.2g)", ex, i+1, s.Loss, want[i], d)
		}
	}
	if val != nil {
		last := got.Steps[len(got.Steps)-1]
		if last.ValLoss == nil || math.Abs(*last.ValLoss-*val) / *val > tol {
			t.Errorf("%s: validation loss %v, PyTorch %.7f", ex, last.ValLoss, *val)
		}
	}
	return worst
}
