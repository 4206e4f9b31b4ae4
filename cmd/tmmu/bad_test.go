package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/failure"
)

// runCLI runs tmmu in-process and returns the exit status and streams.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(&env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut}, args)
	return code, out.String(), errOut.String()
}

// TestBadInputs runs every committed bad input through the CLI with -o json
// and checks the failure code and that the message names the culprit. Every
// failure code is reached by at least one file.
func TestBadInputs(t *testing.T) {
	bad := func(f string) string { return filepath.Join("testdata", "bad", f) }
	tiny := filepath.Join("..", "..", "examples", "gpt2-tiny-train.json")
	micro := filepath.Join("testdata", "micro-train.json")
	cases := []struct {
		args    []string
		code    failure.Code
		mention string
	}{
		{[]string{"plan", bad("syntax-error.json")}, failure.InvalidEncoding, "json"},
		{[]string{"plan", bad("unknown-field.json")}, failure.InvalidEncoding, `"tensor"`},
		{[]string{"plan", bad("zero-dim.json")}, failure.InvalidIRShapes, `"x"`},
		{[]string{"plan", bad("unknown-dtype.json")}, failure.InvalidIRShapes, "fp12"},
		{[]string{"plan", bad("envelope-rank.json")}, failure.InvalidIRShapes, "shape_envelope"},
		{[]string{"plan", bad("view-out-of-base.json")}, failure.InvalidIRShapes, `"v"`},
		{[]string{"plan", bad("duplicate-tensor.json")}, failure.InvalidIRGraph, `"x"`},
		{[]string{"plan", bad("unknown-input.json")}, failure.InvalidIRGraph, `"y"`},
		{[]string{"plan", bad("two-producers.json")}, failure.InvalidIRGraph, `"a"`},
		{[]string{"plan", bad("parameter-defined.json")}, failure.InvalidIRGraph, `"w"`},
		{[]string{"plan", bad("constant-written.json")}, failure.InvalidIRGraph, "read-only"},
		{[]string{"plan", bad("output-never-written.json")}, failure.InvalidIRGraph, `"y"`},
		{[]string{"plan", bad("cycle.json")}, failure.LivenessCycle, "n0 -> n1 -> n2 -> n0"},
		{[]string{"plan", bad("read-before-write.json")}, failure.ReadBeforeWrite, `activation "a" is read by node "n1"`},
		{[]string{"plan", bad("gradient-without-producer.json")}, failure.ReadBeforeWrite, `gradient "g"`},
		{[]string{"plan", bad("in-place-unmarked.json")}, failure.InvalidAlias, "in_place_write"},
		{[]string{"plan", bad("in-place-saved.json")}, failure.InvalidAlias, "saved_for_backward"},
		{[]string{"plan", bad("alias-mixes-arenas.json")}, failure.InvalidAlias, "mixes arenas"},
		{[]string{"plan", bad("must-not-alias-shared.json")}, failure.InvalidAlias, "share storage"},
		{[]string{"plan", bad("order-unknown-node.json")}, failure.InvalidExecutionOrder, `"n9"`},
		{[]string{"plan", bad("order-missing-node.json")}, failure.InvalidExecutionOrder, `"n1"`},
		{[]string{"plan", bad("in-place-needs-order.json")}, failure.InvalidExecutionOrder, "execution_order is required"},
		{[]string{"plan", bad("size-overflow.json")}, failure.AllocationOverflow, "overflows uint64"},
		{[]string{"plan", bad("offset-overflow.json")}, failure.AllocationOverflow, "overflow"},
		{[]string{"plan", bad("alignment-not-pow2.json")}, failure.AlignmentViolation, "not a power of two"},
		{[]string{"plan", bad("view-misaligned.json")}, failure.AlignmentViolation, `"v"`},
		{[]string{"plan", bad("chain.json"), "--arena-config", bad("arena-align-100.arena.json")}, failure.AlignmentViolation, "alignment_bytes 100"},
		{[]string{"plan", bad("chain.json"), "--arena-config", bad("arena-1kib.arena.json")}, failure.ArenaTooSmall, "capacity is 1024 bytes"},
		{[]string{"plan", bad("chain.json"), "--arena-config", bad("arena-unknown.arena.json")}, failure.InvalidOptions, "scratchpad"},
		{[]string{"plan", bad("chain.json"), "--arena-config", bad("arena-bad-field.arena.json")}, failure.InvalidEncoding, "capacity"},
		{[]string{"plan", bad("chain.json"), "--mode", "training"}, failure.InvalidOptions, "training"},
		{[]string{"plan", bad("chain.json"), "--mode", "backward"}, failure.InvalidOptions, "executes no node"},
		{[]string{"plan", bad("chain.json"), "--strategy", "best"}, failure.InvalidOptions, "best"},
		{[]string{"plan", bad("chain.json"), "--replay-token", "abc"}, failure.InvalidOptions, "replay-token"},
		{[]string{"plan", bad("chain.json"), "--effort", "hard"}, failure.InvalidOptions, `effort "hard"`},
		{[]string{"plan", bad("dsa-empty-interval.csv")}, failure.InvalidEncoding, `line 3: buffer "b" lives over [4,4)`},
		{[]string{"plan", bad("dsa-empty.csv")}, failure.InvalidEncoding, "dsa-empty.csv is empty"},
		{[]string{"plan", bad("dsa-three-fields.csv")}, failure.InvalidEncoding, "line 3: wrong number of fields, want 4"},
		{[]string{"bench", "--suite", bad("bench-suite"), "--strategies", "greedy-size"}, failure.InvalidEncoding, `negative.csv line 3: size "-3"`},
		{[]string{"bench", "--suite", bad("no-such-suite"), "--strategies", "greedy-size"}, failure.IOError, "no-such-suite"},
		{[]string{"bench", "--strategies", "greedy-size,best"}, failure.InvalidOptions, `unknown method "best" (methods: slots, greedy-size, packed, packed:exact)`},
		{[]string{"bench", "--suite", "families:coarse", "--sizes", "0", "--strategies", "greedy-size"}, failure.InvalidOptions, "coarse takes 1 to 65536 buffers, not 0"},
		{[]string{"bench", "--suite", "families:transformer", "--sizes", "97", "--strategies", "greedy-size"}, failure.InvalidOptions, "transformer takes 1 to 96 layers, not 97"},
		{[]string{"bench", "--suite", "families:coarse", "--seeds", "9-3", "--strategies", "greedy-size"}, failure.InvalidOptions, `--seeds: range "9-3" runs backwards`},
		{[]string{"bench", "--suite", "families:coarse", "--sizes", "1k", "--strategies", "greedy-size"}, failure.InvalidOptions, `--sizes: "1k" is not a number`},
		{[]string{"bench", "--suite", "families:nope", "--seeds", "3", "--strategies", "greedy-size"}, failure.InvalidOptions, `unknown family "nope"`},
		{[]string{"bench", "--seeds", "3", "--strategies", "greedy-size"}, failure.InvalidOptions, "--sizes and --seeds take a families suite"},
		{[]string{"bench", "--suite", "families", "--sizes", "1-2", "--seeds", "0-99999", "--strategies", "greedy-size"}, failure.InvalidOptions, "more than 100000 selected (perfect adds 2 sizes × 100000 seeds to 0)"},
		{[]string{"bench", "--suite", "families:coarse", "--sizes", "18446744073709551615", "--strategies", "greedy-size"}, failure.InvalidOptions, "18446744073709551615 is larger than any family takes (at most 65536)"},
		{[]string{"bench", "--suite", "families:coarse", "--sizes", "", "--strategies", "greedy-size"}, failure.InvalidOptions, "--sizes: no numbers named"},
		{[]string{"plan", bad("dsa-two.csv"), "--format", "ir"}, failure.InvalidEncoding, `expected JSON (an object, starting with '{') or CBOR (a map); found text starting "id,lower,upper,size`},
		{[]string{"verify", bad("chain.json"), bad("collision.plan.json")}, failure.AddressCollision, `"b"`},
		{[]string{"verify", bad("chain.json"), bad("hash-mismatch.plan.json")}, failure.PlanMismatch, "plan_hash"},
		{[]string{"verify", bad("cycle.json"), bad("collision.plan.json")}, failure.LivenessCycle, "cycle"},
		{[]string{"shard", "validate", bad("shard-degrees.spec.json")}, failure.InvalidShardSpec, "degrees do not multiply to world_size"},
		{[]string{"plan", bad("chain.json"), "--shard-spec", bad("shard-degrees.spec.json"), "--all-ranks"}, failure.InvalidShardSpec, "data_parallel 2 × tensor_parallel 2"},
		{[]string{"shard", "validate", bad("shard-unknown-tensor.spec.json"), "--ir", bad("chain.json")}, failure.InvalidShardSpec, `override names tensor "wtf"`},
		{[]string{"train", bad("train-bf16.json"), "--executor", "cpu", "--steps", "1"}, failure.UnsupportedExecution, "bf16"},
		{[]string{"train", tiny, "--executor", "cpu", "--data-mode", "confidential", "--debug-fill", "emb.out", "--steps", "1"}, failure.ModeViolation, "confidential"},
		{[]string{"train", tiny, "--executor", "cpu", "--device-memory", "64KiB", "--steps", "1"}, failure.DeviceError, "out of memory"},
		{[]string{"shard", "validate", bad("shard-unknown-field.spec.json")}, failure.InvalidEncoding, `unknown field "zero_stage"`},
		{[]string{"train", micro, "--executor", "cpu", "--steps", "3", "--checkpoint-dir", copyDir(t, bad("ckpt-corrupt")), "--resume"}, failure.CheckpointCorrupt, "does not hash to its digest"},
		{[]string{"train", micro, "--executor", "cpu", "--steps", "3", "--checkpoint-dir", copyDir(t, bad("ckpt-mismatch")), "--resume"}, failure.RestoreMismatch, "the checkpoint says"},
		{[]string{"train", micro, "--executor", "cpu", "--steps", "2", "--checkpoint-dir", t.TempDir(), "--checkpoint-max-bytes", "4KiB"}, failure.CheckpointStoreFull, "no room"},
		{[]string{"train", micro, "--executor", "cpu", "--data", bad("tokens-past-vocab.bin")}, failure.InvalidDataset, "token id 9 at byte offset 14 is not below the model's vocabulary (8)"},
		{[]string{"train", micro, "--executor", "cpu", "--data", bad("tokens-short.bin")}, failure.InvalidDataset, "shorter than one sample of 4 tokens"},
		{[]string{"train", micro, "--executor", "cpu", "--data", bad("tokens-odd.bin")}, failure.InvalidDataset, "ends mid-token at offset 6"},
		{[]string{"train", micro, "--executor", "cpu", "--val-data", bad("tokens-past-vocab.bin")}, failure.InvalidDataset, "vocabulary (8)"},
		{[]string{"train", micro, "--executor", "cpu", "--data", bad("tokens-a.bin"), "--data-format", "npy"}, failure.InvalidDataset, "no .npy magic"},
		{[]string{"train", micro, "--executor", "cpu", "--steps", "3", "--data", bad("tokens-b.bin"), "--checkpoint-dir", copyDir(t, bad("ckpt-data-changed")), "--resume"}, failure.DatasetChanged, "tokens-b.bin"},
		{[]string{"train", micro, "--executor", "cpu", "--weights", bad("weights-mismatch.safetensors")}, failure.InvalidWeights,
			"1 missing: transformer.ln_f.bias [8]; 1 of another shape: transformer.wte.weight is [9 8], the graph's wte is [8 8]; 1 not parameters of the graph: transformer.h.0.mlp.c_fc.extra"},
		{[]string{"train", micro, "--executor", "cpu", "--weights", bad("tokens-a.bin")}, failure.InvalidEncoding, "not a safetensors file"},
		{[]string{"plan", bad("no-such-file.json")}, failure.IOError, "no such file"},
		{[]string{"plan", bad("chain.json"), "--arena-config", bad("no-such-arenas.json")}, failure.IOError, "no such file"},
	}
	reached := map[failure.Code]bool{}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			status, stdout, stderr := runCLI(t, "", append(c.args, "-o", "json")...)
			if status != 1 {
				t.Fatalf("exit %d, want 1; stderr %s", status, stderr)
			}
			var got struct {
				FailureCode     failure.Code      `json:"failure_code"`
				FailureOperator string            `json:"failure_operator"`
				Message         string            `json:"message"`
				Diagnostics     map[string]string `json:"diagnostics"`
			}
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("stdout is not a JSON failure: %v\n%s", err, stdout)
			}
			if got.FailureCode != c.code {
				t.Fatalf("failure_code %s, want %s: %s", got.FailureCode, c.code, got.Message)
			}
			if got.FailureOperator == "" {
				t.Errorf("no failure_operator: %+v", got)
			}
			if !strings.Contains(got.Message, c.mention) {
				t.Errorf("message %q does not mention %q", got.Message, c.mention)
			}
			reached[got.FailureCode] = true
		})
	}
	for _, code := range failure.Codes {
		if !reached[code] {
			t.Errorf("no committed bad input reaches %s", code)
		}
	}
	// Every bad file is used.
	files, _ := filepath.Glob(bad("*.json"))
	csvs, _ := filepath.Glob(bad("*.csv"))
	files = append(files, csvs...)
	for _, f := range files {
		used := slices.ContainsFunc(cases, func(c struct {
			args    []string
			code    failure.Code
			mention string
		}) bool {
			return slices.Contains(c.args, f)
		})
		if !used {
			t.Errorf("%s is not used by any case", f)
		}
	}
}

// copyDir copies a committed checkpoint directory into a temporary one,
// so that a run that resumes from it writes nothing under testdata.
func copyDir(t *testing.T, src string) string {
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestBadInputText: without -o json a failure is one line on stderr
// starting with its code.
func TestBadInputText(t *testing.T) {
	status, stdout, stderr := runCLI(t, "", "plan", filepath.Join("testdata", "bad", "cycle.json"))
	if status != 1 || stdout != "" || !strings.HasPrefix(stderr, "tmmu: LIVENESS_CYCLE: ") {
		t.Fatalf("status %d stdout %q stderr %q", status, stdout, stderr)
	}
}

// TestBenchBadSuiteNamesTheFile: a malformed CSV in a bench suite fails
// with the CSV's path in the file diagnostic (not the directory's), and
// the text form prints the message once.
func TestBenchBadSuiteNamesTheFile(t *testing.T) {
	dir := filepath.Join("testdata", "bad", "bench-suite")
	status, stdout, stderr := runCLI(t, "", "bench", "--suite", dir, "--strategies", "greedy-size", "-o", "json")
	var got struct {
		Diagnostics map[string]string `json:"diagnostics"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); status != 1 || err != nil {
		t.Fatalf("exit %d (%v): %s %s", status, err, stdout, stderr)
	}
	if want := filepath.Join(dir, "negative.csv"); got.Diagnostics["file"] != want {
		t.Errorf("file diagnostic %q, want %q", got.Diagnostics["file"], want)
	}
	_, _, stderr = runCLI(t, "", "bench", "--suite", dir, "--strategies", "greedy-size")
	if n := strings.Count(stderr, `size "-3"`); n != 1 {
		t.Errorf("text error names the size %d times, want once: %s", n, stderr)
	}
}
