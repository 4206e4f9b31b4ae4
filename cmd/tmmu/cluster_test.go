package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/coord"
	"github.com/tmmu/tmmu/localcluster"
)

// TestDemo runs tmmu demo small: the whole cluster in process, a job
// agreed and run to its last step.
func TestDemo(t *testing.T) {
	out := mustRun(t, "", "demo", "--workers", "3", "--steps", "2", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--batch", "1", "--vocab", "64")
	for _, want := range []string{"coordinators 3", "3 ranks, ZeRO-3", "epoch 0 agreed: true", "job demo: done at step 2 of 2", "executor arena"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	var doc struct {
		Job   coord.Job `json:"job"`
		Ranks []struct {
			Rank  uint64 `json:"rank"`
			Steps uint64 `json:"steps_run"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "demo", "--workers", "2", "--steps", "1", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--batch", "1", "--vocab", "64", "--plan-only", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Job.Status != coord.StatusDone || len(doc.Ranks) != 2 || doc.Ranks[1].Rank != 1 || doc.Ranks[1].Steps != 1 {
		t.Errorf("demo JSON: %+v", doc)
	}
}

// TestClusterCommands: job submit, job list and status against a local
// cluster, with the coordinators from a flag, the environment and a config
// file.
func TestClusterCommands(t *testing.T) {
	l, err := localcluster.Start(localcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	irFile, specFile := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "spec.json")
	mustRun(t, "", "gen", "gpt2", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "16", "--vocab", "128", "--train", "--dtype", "bf16", "--out", irFile)
	os.WriteFile(specFile, []byte(`{"world_size": 4, "data_parallel": {"zero_stage": 2}, "tensor_parallel": {"degree": 2}, "preset": "gpt2"}`), 0o644)
	urls := strings.Join(l.Coord.URLs(), ",")

	out := mustRun(t, "", "job", "submit", irFile, "--shard-spec", specFile, "--name", "gpt2", "--steps", "5", "--coordinators", urls)
	if !strings.Contains(out, "job gpt2 submitted: epoch 0, 4 ranks, status agreeing") {
		t.Errorf("submit:\n%s", out)
	}
	var jobs []coord.JobSummary
	if err := json.Unmarshal([]byte(mustRun(t, "", "job", "list", "--coordinators", urls, "-o", "json")), &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Name != "gpt2" || jobs[0].WorldSize != 4 || jobs[0].Steps != 5 {
		t.Errorf("job list: %+v", jobs)
	}

	t.Setenv("TMMU_COORDINATORS", l.Coord.URLs()[2])
	var st coord.Status
	if err := json.Unmarshal([]byte(mustRun(t, "", "status", "-o", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Leader == "" || len(st.Voters) != 3 || len(st.Jobs) != 1 || st.ID != "c2" {
		t.Errorf("status from TMMU_COORDINATORS: %+v", st)
	}
	os.Unsetenv("TMMU_COORDINATORS")
	conf := filepath.Join(dir, "tmmu.json")
	os.WriteFile(conf, []byte(`{"coordinators": ["`+l.Coord.URLs()[1]+`"]}`), 0o644)
	text := mustRun(t, "", "status", "--config", conf)
	if !strings.Contains(text, "answered by c1") || !strings.Contains(text, "gpt2") || !strings.Contains(text, "(leader)") {
		t.Errorf("status from the config file:\n%s", text)
	}
	// A bad submission names its problem.
	status, _, stderr := runCLI(t, "", "job", "submit", irFile, "--shard-spec", specFile, "--name", "bad name", "--coordinators", urls)
	if status != 1 || !strings.Contains(stderr, "job name") {
		t.Errorf("bad name: exit %d, %s", status, stderr)
	}
}
