package main

import (
	"bufio"
	"encoding/json"
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
	} {
		if status, _, _ := runCLI(t, "", args...); status != exitUsage {
			t.Errorf("tmmu %s: exit %d, want %d", strings.Join(args, " "), status, exitUsage)
		}
	}
	for _, args := range [][]string{{"--help"}, {"help", "plan"}, {"plan", "--help"}, {"gen", "--help"}, {"gen", "llama", "--help"}} {
		if status, _, _ := runCLI(t, "", args...); status != 0 {
			t.Errorf("tmmu %s: exit %d, want 0", strings.Join(args, " "), status)
		}
	}
}
