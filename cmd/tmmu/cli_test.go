package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustRun(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	status, stdout, stderr := runCLI(t, stdin, args...)
	if status != 0 {
		t.Fatalf("tmmu %s: exit %d\n%s", strings.Join(args, " "), status, stderr)
	}
	return stdout
}

// TestGenPlanVerify runs the quickstart: gen, plan (text, JSON, CBOR with a
// trace) and verify the CBOR checkpoint.
func TestGenPlanVerify(t *testing.T) {
	dir := t.TempDir()
	irFile := filepath.Join(dir, "gpt2.json")
	mustRun(t, "", "gen", "gpt2", "--layers", "2", "--seq", "64", "--train", "--out", irFile)
	again := mustRun(t, "", "gen", "gpt2", "--layers", "2", "--seq", "64", "--train")
	if first, _ := os.ReadFile(irFile); string(first) != again {
		t.Fatal("gen is not deterministic")
	}

	text := mustRun(t, "", "plan", irFile)
	for _, want := range []string{"mode=train_full", "strategy=packed", "plan_hash ", "ARENA", "activations", "gradients", "optimizer_state", "parameters", "total"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}

	var doc struct {
		PlanHash string `json:"plan_hash"`
		IRHash   string `json:"ir_hash"`
		Strategy string `json:"strategy"`
		Arenas   map[string]struct {
			PeakBytes       *uint64 `json:"peak_bytes"`
			LowerBoundBytes *uint64 `json:"lower_bound_bytes"`
			LogicalSlots    *int    `json:"logical_slots"`
			MaxLive         *int    `json:"max_live"`
		} `json:"arenas"`
		Tensors map[string]struct {
			Arena       string  `json:"arena"`
			Offset      *uint64 `json:"offset"`
			Size        uint64  `json:"size"`
			LogicalSlot *int    `json:"logical_slot"`
			Lifetime    [2]int  `json:"lifetime"`
		} `json:"tensors"`
		Metrics map[string]any `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "plan", irFile, "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.PlanHash) != 64 || len(doc.IRHash) != 64 || doc.Strategy != "packed" || len(doc.Tensors) == 0 || doc.Metrics["allocation_time_ns"] == nil {
		t.Fatalf("JSON plan lacks fields: hash %q ir %q strategy %q tensors %d", doc.PlanHash, doc.IRHash, doc.Strategy, len(doc.Tensors))
	}
	for name, a := range doc.Arenas {
		if a.PeakBytes == nil || a.LowerBoundBytes == nil || a.LogicalSlots == nil || a.MaxLive == nil {
			t.Errorf("arena %s lacks a metric", name)
		}
	}
	wte := doc.Tensors["wte"]
	if wte.Arena != "parameters" || wte.Offset == nil || wte.LogicalSlot == nil || wte.Size != 50257*768*4 || wte.Lifetime[0] != 0 {
		t.Errorf("wte: %+v", wte)
	}

	planFile := filepath.Join(dir, "plan.cbor")
	traceFile := filepath.Join(dir, "trace.jsonl")
	cb := mustRun(t, "", "plan", irFile, "-o", "cbor", "--trace", traceFile)
	if err := os.WriteFile(planFile, []byte(cb), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, "", "verify", irFile, planFile); !strings.HasPrefix(out, "ok: plan "+doc.PlanHash[:12]) {
		t.Fatalf("verify: %s", out)
	}
	f, err := os.Open(traceFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var records []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct{ Record string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		records = append(records, r.Record)
	}
	if len(records) != len(doc.Tensors)+2 || records[0] != "allocation_header" || records[1] != "tensor" || records[len(records)-1] != "summary" {
		t.Fatalf("trace has %d records (%s … %s), want header, %d tensors, summary", len(records), records[0], records[len(records)-1], len(doc.Tensors))
	}

	// A replay token changes the plan hash, not the layout.
	var other struct {
		PlanHash string                     `json:"plan_hash"`
		Tensors  map[string]json.RawMessage `json:"tensors"`
	}
	token := strings.Repeat("ab", 32)
	if err := json.Unmarshal([]byte(mustRun(t, "", "plan", irFile, "-o", "json", "--replay-token", token)), &other); err != nil {
		t.Fatal(err)
	}
	if other.PlanHash == doc.PlanHash {
		t.Error("replay token does not enter the plan hash")
	}
	var base struct {
		Tensors map[string]json.RawMessage `json:"tensors"`
	}
	json.Unmarshal([]byte(mustRun(t, "", "plan", irFile, "-o", "json")), &base)
	for id, raw := range base.Tensors {
		if string(other.Tensors[id]) != string(raw) {
			t.Fatalf("replay token moved %s: %s vs %s", id, raw, other.Tensors[id])
		}
	}

	// Standard input works, and --mode changes what is planned.
	ir, _ := os.ReadFile(irFile)
	if out := mustRun(t, string(ir), "plan", "-", "--mode", "inference"); !strings.Contains(out, "mode=inference") || strings.Contains(out, "gradients") {
		t.Errorf("inference plan of a training graph:\n%s", out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{}, {"frobnicate"}, {"plan"}, {"plan", "a", "b"}, {"plan", "x.json", "-o", "yaml"},
		{"verify", "one"}, {"gen"}, {"gen", "resnet"}, {"gen", "gpt2", "--heads", "7"}, {"gen", "gpt2", "--bogus"},
		{"demo", "--steps", "0"}, {"train", "examples/gpt2-tiny-train.json", "--lr", "NaN"}, {"train", "x.json", "--lr", "-0.1"},
		{"import"}, {"import", "tflite"}, {"import", "onnx"}, {"import", "onnx", "m.onnx", "--dim", "seq=0"}, {"import", "torch"},
		{"import", "torch", "resnet18", "--optimizer", "lion"},
	} {
		if status, _, _ := runCLI(t, "", args...); status != exitUsage {
			t.Errorf("tmmu %s: exit %d, want %d", strings.Join(args, " "), status, exitUsage)
		}
	}
	for _, args := range [][]string{{"--help"}, {"help", "plan"}, {"plan", "--help"}, {"gen", "--help"}, {"gen", "llama", "--help"},
		{"import", "--help"}, {"import", "onnx", "--help"}, {"import", "torch", "--help"}} {
		if status, _, _ := runCLI(t, "", args...); status != 0 {
			t.Errorf("tmmu %s: exit %d, want 0", strings.Join(args, " "), status)
		}
	}
}

// TestPlanDSA plans a DSA instance: JSON carries offsets per id with size
// and lifetime [lower, upper) and the arena's peak and lower bound; CSV
// appends the offset column; the two agree.
func TestPlanDSA(t *testing.T) {
	in := filepath.Join("testdata", "bad", "dsa-two.csv")
	status, out, errOut := runCLI(t, "", "plan", in, "-o", "json")
	if status != 0 {
		t.Fatalf("exit %d: %s", status, errOut)
	}
	var doc struct {
		Format  string `json:"format"`
		Buffers int    `json:"buffers"`
		Arenas  map[string]struct {
			Peak uint64 `json:"peak_bytes"`
			LB   uint64 `json:"lower_bound_bytes"`
		} `json:"arenas"`
		Tensors map[string]struct {
			Offset   uint64   `json:"offset"`
			Size     uint64   `json:"size"`
			Lifetime [2]int64 `json:"lifetime"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	a := doc.Arenas["activations"]
	if doc.Format != "tmmu_dsa_plan_v1" || doc.Buffers != 2 || a.Peak != 32 || a.LB != 32 || len(doc.Tensors) != 2 {
		t.Fatalf("%+v", doc)
	}
	if b := doc.Tensors["b"]; b.Size != 16 || b.Lifetime != [2]int64{2, 6} || b.Offset == doc.Tensors["a"].Offset {
		t.Fatalf("b: %+v, a: %+v", b, doc.Tensors["a"])
	}
	status, out, _ = runCLI(t, "", "plan", in, "-o", "csv", "--strategy", "greedy-size")
	want := fmt.Sprintf("id,lower,upper,size,offset\na,0,4,16,%d\nb,2,6,16,%d\n", doc.Tensors["a"].Offset, doc.Tensors["b"].Offset)
	if status != 0 || out != want {
		t.Fatalf("csv: exit %d\n%s\nwant\n%s", status, out, want)
	}
}

// TestBenchAndViz runs bench on a directory and draws a graph, a plan and
// a DSA instance.
func TestBenchAndViz(t *testing.T) {
	dir := t.TempDir()
	data, _ := os.ReadFile(filepath.Join("testdata", "bad", "dsa-two.csv"))
	os.WriteFile(filepath.Join(dir, "two.csv"), data, 0o644)
	status, out, errOut := runCLI(t, "", "bench", "--suite", dir, "--strategies", "slots,packed,packed:exact")
	if status != 0 || !strings.Contains(out, "two") || !strings.Contains(out, "packed:exact") || !strings.Contains(out, "3/3") && !strings.Contains(out, "1/1") {
		t.Fatalf("bench: exit %d\n%s%s", status, out, errOut)
	}
	status, out, _ = runCLI(t, "", "bench", "--suite", dir, "-o", "json")
	if status != 0 || !strings.Contains(out, `"verified": true`) {
		t.Fatalf("bench json: exit %d\n%s", status, out)
	}
	chain := filepath.Join("testdata", "bad", "chain.json")
	_, plan, _ := runCLI(t, "", "plan", chain, "-o", "json")
	planFile := filepath.Join(dir, "plan.json")
	os.WriteFile(planFile, []byte(plan), 0o644)
	for _, c := range [][]string{
		{chain, "--out", filepath.Join(dir, "g.svg")},
		{planFile, "--out", filepath.Join(dir, "p.html")},
		{filepath.Join(dir, "two.csv"), "--out", filepath.Join(dir, "d.svg"), "--strategy", "slots"},
	} {
		if status, out, errOut := runCLI(t, "", append([]string{"viz"}, c...)...); status != 0 || !strings.HasPrefix(out, "wrote "+c[2]+": plan ") {
			t.Fatalf("viz %v: exit %d: %s%s", c, status, out, errOut)
		}
		got, err := os.ReadFile(c[2])
		if err != nil || !strings.Contains(string(got), "<svg") {
			t.Fatalf("viz %v wrote %d bytes: %v", c, len(got), err)
		}
	}
	if status, out, _ := runCLI(t, "", "viz", chain, "--out", filepath.Join(dir, "j.svg"), "-o", "json"); status != 0 || !strings.Contains(out, `"file": "`) || !strings.Contains(out, `"plan_hash": "`) {
		t.Fatalf("viz -o json: exit %d: %s", status, out)
	}
	if status, _, _ := runCLI(t, "", "viz", chain, "--out", filepath.Join(dir, "x.png")); status != exitUsage {
		t.Fatalf("viz to .png: exit %d, want %d", status, exitUsage)
	}
}

// TestBenchHeldOut: --sizes and --seeds bench family instances the suite
// does not hold, each family at every size and seed, every plan verified.
func TestBenchHeldOut(t *testing.T) {
	status, out, errOut := runCLI(t, "", "bench", "--suite", "families:transformer, coarse", "--sizes", "2,30", "--seeds", "7-8", "--strategies", "greedy-size,packed", "-o", "json")
	if status != 0 {
		t.Fatalf("bench held out: exit %d\n%s%s", status, out, errOut)
	}
	var got struct {
		Results []struct {
			Instance string `json:"instance"`
			Runs     []struct {
				Verified bool `json:"verified"`
			} `json:"runs"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got.Results {
		names = append(names, r.Instance)
		if len(r.Runs) != 2 || !r.Runs[0].Verified || !r.Runs[1].Verified {
			t.Errorf("%s: %d runs, or a plan that did not verify", r.Instance, len(r.Runs))
		}
	}
	want := "coarse-2-s7 coarse-2-s8 coarse-30-s7 coarse-30-s8 transformer-llama-2L-s7 transformer-gpt2-2L-s8 transformer-llama-30L-s7 transformer-gpt2-30L-s8"
	if strings.Join(names, " ") != want {
		t.Fatalf("instances %v, want %s", names, want)
	}
}

// TestShardCLI: shard validate, plan --shard-spec for one rank and for all
// ranks, and shard view.
func TestShardCLI(t *testing.T) {
	dir := t.TempDir()
	irFile, specFile := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "spec.json")
	mustRun(t, "", "gen", "gpt2", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "16", "--vocab", "101", "--train", "--dtype", "bf16", "--out", irFile)
	spec := `{"world_size": 8, "data_parallel": {"zero_stage": 2}, "tensor_parallel": {"degree": 2}, "preset": "gpt2", "padding": "ceil", "pipeline": {"stages": [[0, 2], [2, 4]]}}`
	if err := os.WriteFile(specFile, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	text := mustRun(t, "", "shard", "validate", specFile, "--ir", irFile)
	var resolved struct {
		Hash string `json:"shard_spec_hash"`
		Spec struct {
			DataParallel struct{ Degree int } `json:"data_parallel"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "shard", "validate", specFile, "-o", "json")), &resolved); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "shard_spec_hash "+resolved.Hash) || resolved.Spec.DataParallel.Degree != 2 {
		t.Errorf("validate: hash %s, data degree %d; text:\n%s", resolved.Hash, resolved.Spec.DataParallel.Degree, text)
	}

	table := mustRun(t, "", "plan", irFile, "--shard-spec", specFile, "--all-ranks")
	if !strings.Contains(table, "8 ranks, 2 distinct views") || !strings.Contains(table, "shard_spec_hash  "+resolved.Hash) {
		t.Errorf("all-ranks table:\n%s", table)
	}
	var all struct {
		GlobalPlan struct {
			Hash  string `json:"global_plan_hash"`
			Ranks []struct {
				Rank     int    `json:"rank"`
				PlanHash string `json:"plan_hash"`
			} `json:"ranks"`
		} `json:"global_plan"`
		Ranks []struct {
			PlanHash   string         `json:"plan_hash"`
			ModelState map[string]int `json:"model_state"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "plan", irFile, "--shard-spec", specFile, "--all-ranks", "-o", "json")), &all); err != nil {
		t.Fatal(err)
	}
	if len(all.Ranks) != 8 || len(all.GlobalPlan.Ranks) != 8 || !strings.Contains(table, "global_plan_hash "+all.GlobalPlan.Hash) {
		t.Fatalf("all-ranks JSON: %d ranks, global %+v", len(all.Ranks), all.GlobalPlan)
	}
	var one struct {
		Rank uint64 `json:"rank"`
		Plan struct {
			PlanHash      string `json:"plan_hash"`
			ShardSpecHash string `json:"shard_spec_hash"`
			Rank          int    `json:"rank"`
			WorldSize     int    `json:"world_size"`
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "plan", irFile, "--shard-spec", specFile, "--rank", "5", "-o", "json")), &one); err != nil {
		t.Fatal(err)
	}
	if one.Plan.PlanHash != all.Ranks[5].PlanHash || one.Plan.Rank != 5 || one.Plan.WorldSize != 8 || one.Plan.ShardSpecHash != resolved.Hash {
		t.Errorf("rank 5 alone: %+v; in the table: %s", one, all.Ranks[5].PlanHash)
	}
	if text := mustRun(t, "", "plan", irFile, "--shard-spec", specFile, "--rank", "5"); !strings.Contains(text, "rank 5 of 8  stage 1  data 0  tensor 1") {
		t.Errorf("rank 5 text:\n%s", text)
	}

	view := filepath.Join(dir, "view.json")
	mustRun(t, "", "shard", "view", irFile, "--shard-spec", specFile, "--rank", "5", "--out", view)
	if out := mustRun(t, "", "plan", view); !strings.Contains(out, "@stage1/2,tp2,dp2,zero2") {
		t.Errorf("the written view does not plan as stage 1's view:\n%s", out)
	}
	for _, args := range [][]string{
		{"plan", irFile, "--shard-spec", specFile},
		{"plan", irFile, "--rank", "1"},
		{"plan", irFile, "--shard-spec", specFile, "--all-ranks", "-o", "cbor"},
		{"shard"},
		{"shard", "frobnicate"},
	} {
		if status, _, _ := runCLI(t, "", args...); status != exitUsage {
			t.Errorf("tmmu %s: exit %d, want %d", strings.Join(args, " "), status, exitUsage)
		}
	}
}

func TestVersion(t *testing.T) {
	out := mustRun(t, "", "version")
	if !strings.HasPrefix(out, "tmmu ") || !strings.Contains(out, " go1.") {
		t.Fatalf("version: %q", out)
	}
	var v struct{ Version, Go string }
	if err := json.Unmarshal([]byte(mustRun(t, "", "version", "-o", "json")), &v); err != nil || v.Version == "" || !strings.HasPrefix(v.Go, "go1.") {
		t.Fatalf("version -o json: %+v, %v", v, err)
	}
}

// TestBind: a graph whose inputs and loss carry other names trains, with
// --bind naming them, exactly as the graph named as the generators name
// it (the same state hashes); without --bind the engine says how to name
// them; a binding to a tensor the graph lacks, or of an unknown role, is
// refused by name.
func TestBind(t *testing.T) {
	dir := t.TempDir()
	orig, renamed := filepath.Join(dir, "orig.json"), filepath.Join(dir, "renamed.json")
	mustRun(t, "", "gen", "gpt2", "--train", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--context", "8", "--batch", "2", "--vocab", "32", "--out", orig)
	m, err := loadModel(&env{}, orig)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]string{{"tokens", "input_ids"}, {"labels", "target"}, {"loss", "out"}} {
		if err := m.RenameTensor(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(m)
	os.WriteFile(renamed, b, 0o644)
	state := func(args ...string) string {
		t.Helper()
		var res trainResult
		js := mustRun(t, "", append([]string{"train", "--executor", "cpu", "--steps", "3", "-o", "json"}, args...)...)
		if err := json.Unmarshal([]byte(js), &res); err != nil {
			t.Fatal(err)
		}
		return res.Steps[len(res.Steps)-1].State
	}
	if a, b := state(orig), state(renamed, "--bind", "tokens=input_ids,labels=target,loss=out"); a == "" || a != b {
		t.Errorf("the bound graph ends in state %q, the original in %q", b, a)
	}
	for _, c := range []struct{ bind, want string }{
		{"", "--bind tokens=NAME"},
		{"tokens=nope", `the graph has no tensor "nope"`},
		{"tokens=input_ids,labels=input_ids", `the graph has no tensor "input_ids"`},
		{"weights=input_ids", "ROLE one of tokens, images, labels, loss"},
		{"tokens=target", `the graph already has a tensor "tokens"`},
	} {
		args := []string{"train", renamed, "--executor", "cpu", "--steps", "1"}
		if c.bind != "" {
			args = append(args, "--bind", c.bind)
		}
		if c.bind == "tokens=target" {
			args[1] = orig
		}
		status, _, stderr := runCLI(t, "", args...)
		if status == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("--bind %q: exit %d, %q; want %q", c.bind, status, stderr, c.want)
		}
	}
}
