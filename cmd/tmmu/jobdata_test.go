package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/data/datatest"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/localcluster"
	"github.com/tmmu/tmmu/safetensors"
	"github.com/tmmu/tmmu/weights"
	"github.com/tmmu/tmmu/worker"
)

// initWeights writes initial weights for g's parameters (DefaultInit
// scaled and shifted, so they are not what an executor starts from by
// itself) under their external names.
func initWeights(t *testing.T, g *ir.Graph, path string) {
	t.Helper()
	n := weights.NamingOf(g)
	var ts []safetensors.Tensor
	for _, id := range n.Params() {
		ti, _ := g.TensorIndex(id)
		shape := g.Tensors[ti].Shape
		num, _ := ir.Numel(shape)
		v := make([]float32, num)
		for i := range v {
			v[i] = 1.25*engine.DefaultInit(id, shape, uint64(i)) + 0.002
		}
		ts = append(ts, safetensors.F32Tensor(n.Names[id], shape, v))
	}
	var b bytes.Buffer
	if err := safetensors.Write(&b, ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestJobOnStoredDataExports is the cluster's data path as a user runs
// it: tmmu data put a token set and a validation set, tmmu job submit a
// GPT-2 on 4 ZeRO-3 ranks with initial weights from a local safetensors
// file and AdamW hyper-parameters, the workers train it, and tmmu job
// export writes its weights. The export equals tmmu train's on one device
// with the same global batch, weights and data (within 1e-5), and each
// step's loss, averaged over the ranks, equals the one-device loss. With
// PyTorch present, PyTorch loads the export strictly and computes the
// job's validation loss.
func TestJobOnStoredDataExports(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("TMMU_TEST_KEEP"); d != "" {
		dir = d
	}
	irFile, oneFile, w0 := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "gpt2-b8.json"), filepath.Join(dir, "w0.safetensors")
	gen := []string{"gen", "gpt2", "--train", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--context", "32", "--vocab", "512"}
	mustRun(t, "", append(gen, "--batch", "2", "--out", irFile)...)
	mustRun(t, "", append(gen, "--batch", "8", "--out", oneFile)...)
	m, _ := loadModel(&env{}, irFile)
	g, _ := ir.Compile(m)
	initWeights(t, g, w0)
	jobVersusOneDevice(t, dir, irFile, oneFile, w0, true)
}

// TestImportedJobVersusOneDevice runs the same check on a GPT-2 written
// in PyTorch and imported (bench/parity/gpt2.py, batch 2 a rank on 4
// ZeRO-3 ranks against batch 8 on one device), from the weights the
// importer wrote.
func TestImportedJobVersusOneDevice(t *testing.T) {
	py, err := pythonPath()
	if err != nil {
		if os.Getenv("TMMU_REQUIRE_TORCH") != "" {
			t.Fatal(err)
		}
		t.Skipf("no PyTorch: %v", err)
	}
	t.Setenv("TMMU_PYTHON", py)
	dir := t.TempDir()
	irFile, oneFile := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "gpt2-b8.json")
	script := filepath.Join("..", "..", "bench", "parity", "gpt2.py")
	for _, f := range []struct{ file, batch string }{{irFile, "2"}, {oneFile, "8"}} {
		if status, _, stderr := runCLI(t, "", "import", "torch", script+":build", "--train", "--no-peak", "--batch", f.batch, "--out", f.file); status != 0 {
			t.Fatalf("import: %s", stderr)
		}
	}
	jobVersusOneDevice(t, dir, irFile, oneFile, strings.TrimSuffix(irFile, ".json")+".safetensors", false)
}

// jobVersusOneDevice stores a token set and a validation set, submits
// irFile on 4 ZeRO-3 ranks from weights w0 with AdamW hyper-parameters,
// runs its workers, exports it, and compares with tmmu train of oneFile
// (the same model on the whole global batch) on one device: losses,
// validation, exported weights; with PyTorch present, PyTorch loads the
// export strictly and computes the job's validation loss (generator
// GPT-2: bench/parity/gpt2.py).
func jobVersusOneDevice(t *testing.T, dir, irFile, oneFile, w0 string, pytorchCheck bool) {
	l, err := localcluster.Start(localcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("TMMU_CA_FILE", l.CAFile())
	t.Setenv("TMMU_TOKEN", l.APIToken())
	urls := strings.Join(l.Coord.URLs(), ",")
	const world, steps = 4, 8
	spec := filepath.Join(dir, "spec.json")
	os.WriteFile(spec, []byte(fmt.Sprintf(`{"world_size": %d, "data_parallel": {"zero_stage": 3}}`, world)), 0o644)
	trainBin, valBin := filepath.Join(dir, "train.bin"), filepath.Join(dir, "val.bin")
	tokenFile(t, trainBin, 40000, 512, 3)
	tokenFile(t, valBin, 6000, 512, 4)

	out := mustRun(t, "", "data", "put", "toks", trainBin, "--coordinators", urls)
	if !strings.Contains(out, "stored toks: tokens, 1 files") || !strings.Contains(out, "tokens    40000 (largest id 511)") {
		t.Errorf("data put:\n%s", out)
	}
	mustRun(t, "", "data", "put", "toks-val", valBin, "--coordinators", urls)
	ls := mustRun(t, "", "data", "ls", "--coordinators", urls)
	if !strings.Contains(ls, "toks-val") || !strings.Contains(ls, "tokens") {
		t.Errorf("data ls:\n%s", ls)
	}
	hyper := []string{"--lr", "0.002", "--beta2", "0.99", "--weight-decay", "0.1"}
	sub := mustRun(t, "", append([]string{"job", "submit", irFile, "--shard-spec", spec, "--name", "lm", "--steps", fmt.Sprint(steps), "--coordinators", urls,
		"--data", "toks", "--val-data", "toks-val", "--val-batches", "2", "--order", "sequential", "--weights", w0, "--checkpoint-every", "4"}, hyper...)...)
	if !strings.Contains(sub, "job lm submitted") {
		t.Fatalf("submit:\n%s", sub)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	results := make([]worker.Result, world)
	var wg sync.WaitGroup
	for i := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := l.RunWorker(ctx, worker.Config{Identity: fmt.Sprint("lm", i), Job: "lm", ExecutorName: "cpu", Poll: 20 * time.Millisecond}, 5)
			if err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
			results[res.Rank] = res
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	export := filepath.Join(dir, "job.safetensors")
	eo := mustRun(t, "", "job", "export", "lm", "--out", export, "--coordinators", urls)
	if !strings.Contains(eo, fmt.Sprintf("checkpoint of step %d (%d shards", steps, world)) {
		t.Errorf("job export:\n%s", eo)
	}
	if status, _, stderr := runCLI(t, "", "job", "export", "lm", "--step", "3", "--out", export, "--coordinators", urls); status == 0 || !strings.Contains(stderr, "no committed checkpoint of step 3 (it has: 4, 8)") {
		t.Errorf("export of a step with no checkpoint: exit %d: %s", status, stderr)
	}

	// One device, the whole global batch.
	one := filepath.Join(dir, "one.safetensors")
	var res trainResult
	js := mustRun(t, "", append([]string{"train", oneFile, "--executor", "cpu", "--steps", fmt.Sprint(steps), "--weights", w0, "--data", trainBin, "--order", "sequential",
		"--val-data", valBin, "--val-batches", "2", "--export", one, "-o", "json"}, hyper...)...)
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatal(err)
	}
	worstLoss := 0.0
	for s := range steps {
		mean := 0.0
		for _, r := range results {
			mean += r.Losses[s] / world
		}
		d := math.Abs(mean-float64(res.Steps[s].Loss)) / float64(res.Steps[s].Loss)
		worstLoss = max(worstLoss, d)
		if d > 1e-5 {
			t.Errorf("step %d: the ranks' mean loss %.7f, one device %.7f", s+1, mean, res.Steps[s].Loss)
		}
	}
	jobVal := 0.0
	for _, r := range results {
		if len(r.Validations) != 1 || r.Validations[0].Step != steps {
			t.Fatalf("rank %d validations %v, want one after step %d", r.Rank, r.Validations, steps)
		}
		jobVal += r.Validations[0].Loss / world
	}
	if v := res.Steps[steps-1].ValLoss; v == nil || math.Abs(*v-jobVal)/jobVal > 1e-5 {
		t.Errorf("validation: job %.7f, one device %v", jobVal, v)
	}
	// The coordinators report what the ranks did: the optimizer, the
	// mean loss of the last step and the validation.
	var h jobHistory
	if err := json.Unmarshal([]byte(mustRun(t, "", "job", "history", "lm", "--coordinators", urls, "-o", "json")), &h); err != nil {
		t.Fatal(err)
	}
	lastMean := 0.0
	for _, r := range results {
		lastMean += r.Losses[steps-1] / world
	}
	if h.Optimizer.LR != "0.002" || h.Optimizer.Beta2 != "0.99" || h.Optimizer.WeightDecay != "0.1" || h.Optimizer.Beta1 != "0.9" {
		t.Errorf("history optimizer %+v", h.Optimizer)
	}
	if len(h.Validations) != 1 || h.Validations[0].Step != steps || math.Abs(h.Validations[0].Loss-jobVal) > 1e-9 {
		t.Errorf("history validations %+v, the ranks' mean %.7f", h.Validations, jobVal)
	}
	if h.Loss == nil || h.Loss.Step != steps || math.Abs(h.Loss.Loss-lastMean) > 1e-9 {
		t.Errorf("history loss %+v, the ranks' mean %.7f", h.Loss, lastMean)
	}
	if h.Data == nil || h.Data.Train.Name != "toks" || h.Data.Order != "sequential" {
		t.Errorf("history data %+v", h.Data)
	}
	st := mustRun(t, "", "status", "--coordinators", urls)
	if !strings.Contains(st, "VAL LOSS") || !strings.Contains(st, fmt.Sprintf("%.4f (step %d)", jobVal, steps)) {
		t.Errorf("status does not show the validation loss %.4f:\n%s", jobVal, st)
	}
	if h.Weights == nil || h.Weights.Name != "lm-weights" {
		t.Errorf("history weights %+v", h.Weights)
	}
	a, b := readWeights(t, export), readWeights(t, one)
	worstW, worstK := compareWeights(t, a, b, 1e-5, 2e-3*steps)
	for _, r := range results {
		ratio := float64(r.DataFetched) / float64(r.DataFed)
		t.Logf("rank %d fed %d bytes of tokens and fetched %d from the coordinators (%.3f×)", r.Rank, r.DataFed, r.DataFetched, ratio)
		if r.DataFed == 0 || ratio > 1.1 {
			t.Errorf("rank %d fetched %.3f× the bytes it fed", r.Rank, ratio)
		}
	}
	t.Logf("4 ZeRO-3 ranks vs one device, %d steps: worst loss difference %.2g relative, validation %.6f vs %.6f, worst exported weight difference %.2g (attention key biases: %.2g)",
		steps, worstLoss, jobVal, *res.Steps[steps-1].ValLoss, worstW, worstK)

	if !pytorchCheck {
		return
	}
	// PyTorch loads the export strictly and computes the validation loss.
	py, err := pythonPath()
	if err != nil {
		if os.Getenv("TMMU_REQUIRE_TORCH") != "" {
			t.Fatal(err)
		}
		t.Skipf("the PyTorch check: %v", err)
	}
	cmd := exec.Command(py, filepath.Join("..", "..", "bench", "parity", "train.py"), "--layers", "2", "--hidden", "64", "--heads", "4", "--vocab", "512",
		"--context", "32", "--seq", "32", "--batch", fmt.Sprint(2*world), "--weights", export, "--val-data", valBin, "--val-batches", "2", "--steps", "0")
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("PyTorch: %v", err)
	}
	var pt struct {
		ValLoss float64 `json:"val_loss"`
	}
	json.Unmarshal(raw, &pt)
	if math.Abs(pt.ValLoss-jobVal)/jobVal > 1e-5 {
		t.Errorf("PyTorch's validation loss of the export %.7f, the job's %.7f", pt.ValLoss, jobVal)
	}
	t.Logf("PyTorch load_state_dict(strict=True) of the job's export: validation loss %.6f, the job's %.6f", pt.ValLoss, jobVal)
}

// pythonPath is a Python with torch and numpy.
func pythonPath() (string, error) {
	py := "/usr/bin/python3"
	if p := os.Getenv("TMMU_PYTHON"); p != "" {
		py = p
	}
	return py, exec.Command(py, "-c", "import torch, numpy").Run()
}

// compareWeights compares two exports of a GPT-2: every weight within
// tol, but the attention key biases (elements [H, 2H) of c_attn.bias),
// within keyTol. Their gradient is zero in exact arithmetic (a bias on
// the keys adds the same q·b to a query's every score, which softmax
// ignores), so what they get is round-off, which AdamW scales up to
// steps of up to lr: another summation order (4 ranks' partial sums
// instead of one) moves them by up to lr a step.
func compareWeights(t *testing.T, a, b map[string][]float32, tol, keyTol float64) (worst, worstKey float64) {
	t.Helper()
	if len(a) != len(b) {
		t.Errorf("%d and %d tensors", len(a), len(b))
	}
	for name, v := range b {
		if len(a[name]) != len(v) {
			t.Fatalf("%s: %d values and %d", name, len(a[name]), len(v))
		}
		key := [2]int{}
		if strings.HasSuffix(name, ".attn.c_attn.bias") {
			key = [2]int{len(v) / 3, 2 * len(v) / 3}
		}
		for i := range v {
			d := math.Abs(float64(a[name][i] - v[i]))
			if i >= key[0] && i < key[1] {
				worstKey = max(worstKey, d)
			} else {
				worst = max(worst, d)
			}
		}
	}
	if worst > tol || worstKey > keyTol {
		t.Errorf("the weights differ by up to %.3g (tolerance %.3g), the attention key biases by %.3g (tolerance %.3g)", worst, tol, worstKey, keyTol)
	}
	return worst, worstKey
}

// TestJobSubmitRefusesBadData: tmmu job submit with a stored dataset that
// does not fit the graph (a token id past the vocabulary, fewer tokens
// than one sample, an image set for a token model), a dataset that does
// not exist, or weights that do not fit is refused before anything is
// committed, with the failure code and a message naming the culprit;
// the cluster then holds no job.
func TestJobSubmitRefusesBadData(t *testing.T) {
	startCLICluster(t)
	dir := t.TempDir()
	irFile, specFile := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "spec.json")
	mustRun(t, "", "gen", "gpt2", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--vocab", "64", "--train", "--out", irFile)
	os.WriteFile(specFile, []byte(`{"world_size": 2, "data_parallel": {"zero_stage": 3}}`), 0o644)
	tokens := func(name string, ids ...uint16) string {
		var b bytes.Buffer
		for _, id := range ids {
			b.WriteByte(byte(id))
			b.WriteByte(byte(id >> 8))
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, b.Bytes(), 0o644)
		return p
	}
	long := make([]uint16, 200)
	for i := range long {
		long[i] = uint16(i % 64)
	}
	past := append(append([]uint16{}, long...), 64)
	mustRun(t, "", "data", "put", "past", tokens("past.bin", past...))
	mustRun(t, "", "data", "put", "short", tokens("short.bin", 1, 2, 3))
	os.WriteFile(filepath.Join(dir, "img.npy"), datatest.NPY("<f4", []uint64{2, 3, 4, 4}, make([]byte, 2*3*4*4*4)), 0o644)
	os.WriteFile(filepath.Join(dir, "lbl.npy"), datatest.NPY("<i8", []uint64{2}, make([]byte, 16)), 0o644)
	mustRun(t, "", "data", "put", "images", filepath.Join(dir, "img.npy"), "--labels", filepath.Join(dir, "lbl.npy"))
	mustRun(t, "", "data", "put", "ok", tokens("ok.bin", long...))
	badW := filepath.Join(dir, "w.safetensors")
	var wb bytes.Buffer
	if err := safetensors.Write(&wb, []safetensors.Tensor{safetensors.F32Tensor("transformer.wte.weight", []uint64{32, 32}, make([]float32, 32*32))}, nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(badW, wb.Bytes(), 0o644)
	mustRun(t, "", "data", "put", "badw", badW)
	submit := []string{"job", "submit", irFile, "--shard-spec", specFile, "--name", "lm", "--steps", "3"}
	for _, c := range []struct {
		args        []string
		code, quote string
	}{
		{[]string{"--data", "past"}, "INVALID_DATASET", "holds token id 64, not below the model's vocabulary (64)"},
		{[]string{"--data", "short"}, "INVALID_DATASET", "holds 3 tokens: shorter than one sample of 8 tokens"},
		{[]string{"--data", "images"}, "INVALID_DATASET", "the graph takes tokens"},
		{[]string{"--data", "nope"}, "INVALID_DATASET", `no dataset named "nope"`},
		{[]string{"--data", "ok", "--val-data", "past"}, "INVALID_DATASET", "not below the model's vocabulary"},
		{[]string{"--data", "ok", "--weights", badW}, "INVALID_WEIGHTS", "transformer.wte.weight is [32 32], the graph's wte is [64 32]"},
		{[]string{"--data", "ok", "--weights", "badw"}, "INVALID_WEIGHTS", "transformer.wte.weight is [32 32], the graph's wte is [64 32]"},
	} {
		code, _, stderr := runCLI(t, "", append(submit, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.code) || !strings.Contains(stderr, c.quote) {
			t.Errorf("job submit %s: exit %d, %s\nwant %s: ...%s", strings.Join(c.args, " "), code, stderr, c.code, c.quote)
		}
		t.Logf("job submit ... %s\n  %s", strings.Join(c.args, " "), strings.TrimSpace(stderr))
	}
	if out := mustRun(t, "", "job", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("a refused submission left a job: %s", out)
	}
	if out := mustRun(t, "", "data", "ls"); strings.Contains(out, "lm-weights") {
		t.Fatalf("weights that do not fit were stored:\n%s", out)
	}
}
