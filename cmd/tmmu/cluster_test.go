package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/localcluster"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/worker"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestDemo runs tmmu demo small: the whole cluster in process, a job
// agreed and trained to its last step on the cpu kernels; then with the
// arena executor on bf16, and plan-only as JSON.
func TestDemo(t *testing.T) {
	out := mustRun(t, "", "demo", "--workers", "3", "--steps", "2", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--batch", "1", "--vocab", "64", "--executor", "cpu")
	for _, want := range []string{"coordinators 3", "3 ranks, ZeRO-3", "epoch 0 agreed: true", "job demo: done at step 2 of 2", "executor cpu: each rank trains", "LAST LOSS"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	out = mustRun(t, "", "demo", "--workers", "2", "--steps", "1", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--batch", "1", "--vocab", "64", "--executor", "arena", "--dtype", "bf16")
	for _, want := range []string{"bf16", "job demo: done at step 1 of 1", "executor arena"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	var doc struct {
		Job   api.Job `json:"job"`
		Ranks []struct {
			Rank  uint64 `json:"rank"`
			Steps uint64 `json:"steps_run"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "demo", "--workers", "2", "--steps", "1", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--batch", "1", "--vocab", "64", "--executor", "plan-only", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Job.Status != api.StatusDone || len(doc.Ranks) != 2 || doc.Ranks[1].Rank != 1 || doc.Ranks[1].Steps != 1 {
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
	t.Setenv("TMMU_CA_FILE", l.CAFile())
	t.Setenv("TMMU_TOKEN", l.APIToken())
	dir := t.TempDir()
	irFile, specFile := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "spec.json")
	mustRun(t, "", "gen", "gpt2", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "16", "--vocab", "128", "--train", "--dtype", "bf16", "--out", irFile)
	os.WriteFile(specFile, []byte(`{"world_size": 4, "data_parallel": {"zero_stage": 2}, "tensor_parallel": {"degree": 2}, "preset": "gpt2"}`), 0o644)
	urls := strings.Join(l.Coord.URLs(), ",")

	out := mustRun(t, "", "job", "submit", irFile, "--shard-spec", specFile, "--name", "gpt2", "--steps", "5", "--coordinators", urls)
	if !strings.Contains(out, "job gpt2 submitted: epoch 0, 4 ranks, status agreeing") {
		t.Errorf("submit:\n%s", out)
	}
	var jobs []api.JobSummary
	if err := json.Unmarshal([]byte(mustRun(t, "", "job", "list", "--coordinators", urls, "-o", "json")), &jobs); err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Name != "gpt2" || jobs[0].WorldSize != 4 || jobs[0].Steps != 5 {
		t.Errorf("job list: %+v", jobs)
	}

	t.Setenv("TMMU_COORDINATORS", l.Coord.URLs()[2])
	var st api.Status
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
	// A model source with a dynamic sequence length.
	src := filepath.Join(dir, "source.json")
	os.WriteFile(src, []byte(`{"model": "gpt2", "config": {"layers": 1, "hidden": 32, "heads": 2, "seq": 8, "context": 8, "batch": 1, "vocab": 64, "dtype": "bf16", "train": true},
	  "dims": {"seq": {"min": 1, "max": 8, "buckets": [8, 16, 32]}}}`), 0o644)
	if out := mustRun(t, "", "job", "submit", "--source", src, "--shard-spec", specFile, "--name", "dyn", "--coordinators", urls); !strings.Contains(out, "job dyn submitted") {
		t.Errorf("submit --source:\n%s", out)
	}
	if h := mustRun(t, "", "job", "history", "dyn", "--coordinators", urls); !strings.Contains(h, "seq=[1,8]") {
		t.Errorf("history of dyn:\n%s", h)
	}
	// A bad submission names its problem.
	status, _, stderr := runCLI(t, "", "job", "submit", irFile, "--shard-spec", specFile, "--name", "bad name", "--coordinators", urls)
	if status != 1 || !strings.Contains(stderr, "job name") {
		t.Errorf("bad name: exit %d, %s", status, stderr)
	}
}

// TestReplanCommands: with an API token set, job submit and replan
// without it (or with the read token) are refused; with it (flag,
// TMMU_TOKEN or a file) they work; reads need a token too.
// tmmu replan on a running job, and tmmu job history with the old and new
// plan hashes.
func TestReplanCommands(t *testing.T) {
	l, err := localcluster.Start(localcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("TMMU_CA_FILE", l.CAFile())
	token, readToken := l.APIToken(), l.ReadToken()
	dir := t.TempDir()
	irFile, specFile := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "spec.json")
	mustRun(t, "", "gen", "gpt2", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--vocab", "64", "--train", "--dtype", "bf16", "--out", irFile)
	os.WriteFile(specFile, []byte(`{"world_size": 2, "data_parallel": {"zero_stage": 1}}`), 0o644)
	urls := strings.Join(l.Coord.URLs(), ",")
	status, _, stderr := runCLI(t, "", "job", "submit", irFile, "--shard-spec", specFile, "--name", "ops", "--steps", "0", "--coordinators", urls)
	if status != 1 || !strings.Contains(stderr, "401 Unauthorized") || !strings.Contains(stderr, "API token") {
		t.Fatalf("job submit without the token: exit %d, %s", status, stderr)
	}
	status, _, stderr = runCLI(t, "", "job", "submit", irFile, "--shard-spec", specFile, "--name", "ops", "--steps", "0", "--coordinators", urls, "--token", "wrong")
	if status != 1 || !strings.Contains(stderr, "401 Unauthorized") {
		t.Fatalf("job submit with a wrong token: exit %d, %s", status, stderr)
	}
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	mustRun(t, "", "job", "submit", irFile, "--shard-spec", specFile, "--name", "ops", "--steps", "0", "--coordinators", urls, "--token-file", tokenFile)
	// Reads need the read token (or the API token).
	if status, _, stderr := runCLI(t, "", "job", "list", "--coordinators", urls); status != 1 || !strings.Contains(stderr, "401 Unauthorized") {
		t.Fatalf("job list without a token: exit %d, %s", status, stderr)
	}
	t.Setenv("TMMU_TOKEN", readToken)
	mustRun(t, "", "job", "list", "--coordinators", urls)

	ctx, drain := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.RunWorker(ctx, worker.Config{Identity: fmt.Sprint("w", i), Job: "ops",
				Poll:     20 * time.Millisecond,
				Executor: func(*ir.Graph, *planner.Plan) (runner.Executor, error) { return pause{}, nil }}, 5); !errors.Is(err, worker.ErrCancelled) {
				t.Errorf("worker w%d: %v, want it cancelled", i, err)
			}
		}()
	}
	defer func() { drain(); wg.Wait() }()
	for {
		var jobs []api.JobSummary
		json.Unmarshal([]byte(mustRun(t, "", "job", "list", "--coordinators", urls, "-o", "json")), &jobs)
		if len(jobs) == 1 && jobs[0].Agreed && jobs[0].LastStep >= 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	status, _, stderr = runCLI(t, "", "replan", "--job", "ops", "--reason", "slots please", "--strategy", "slots", "--coordinators", urls)
	if status != 1 || !strings.Contains(stderr, "API token") {
		t.Errorf("replan without the token: exit %d, %s", status, stderr)
	}
	t.Setenv("TMMU_TOKEN", token)
	out := mustRun(t, "", "replan", "--job", "ops", "--reason", "slots please", "--strategy", "slots", "--id", "r1", "--coordinators", urls)
	if !strings.Contains(out, "epoch 1 committed; every rank switches at step") || !strings.Contains(out, "operator r1: slots please") {
		t.Errorf("replan:\n%s", out)
	}
	again := mustRun(t, "", "replan", "--job", "ops", "--reason", "slots please", "--strategy", "slots", "--id", "r1", "--coordinators", urls, "-o", "json")
	if !strings.Contains(again, `"ack": "duplicate"`) {
		t.Errorf("a retried request:\n%s", again)
	}
	// Wait until the ranks pass the boundary (checkpointed on the way).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(mustRun(t, "", "job", "history", "ops", "--coordinators", urls), "1 checkpoints kept") {
			break
		}
	}
	hist := mustRun(t, "", "job", "history", "ops", "--coordinators", urls)
	var hh struct {
		Epochs []struct {
			Epoch       uint64 `json:"epoch"`
			OldPlanHash string `json:"old_global_plan_hash"`
			NewPlanHash string `json:"new_global_plan_hash"`
			Strategy    string `json:"strategy"`
		} `json:"epochs"`
		Checkpoints []struct {
			Step uint64 `json:"step"`
		} `json:"checkpoints"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "job", "history", "ops", "--coordinators", urls, "-o", "json")), &hh); err != nil {
		t.Fatal(err)
	}
	h := hh.Epochs
	if len(h) != 2 || h[1].OldPlanHash != h[0].NewPlanHash || h[1].NewPlanHash == h[0].NewPlanHash || h[1].Strategy != "slots" {
		t.Errorf("history: %+v\n%s", h, hist)
	}
	// The operator's replan checkpointed the boundary.
	if len(hh.Checkpoints) == 0 || !strings.Contains(hist, "checkpoints kept") {
		t.Errorf("history checkpoints: %+v\n%s", hh.Checkpoints, hist)
	}
	// Cancel and delete need the token; a cancelled job stops its
	// workers; a deleted one is gone (410) for them.
	t.Setenv("TMMU_TOKEN", "")
	if status, _, stderr := runCLI(t, "", "job", "cancel", "ops", "--coordinators", urls); status != 1 || !strings.Contains(stderr, "API token") {
		t.Errorf("cancel without the token: %d %s", status, stderr)
	}
	t.Setenv("TMMU_TOKEN", token)
	if out := mustRun(t, "", "job", "cancel", "ops", "--reason", "enough", "--coordinators", urls); !strings.Contains(out, "job ops cancelled") {
		t.Errorf("cancel: %s", out)
	}
	wg.Wait()
	mustRun(t, "", "job", "delete", "ops", "--coordinators", urls)
	if status, _, stderr := runCLI(t, "", "job", "history", "ops", "--coordinators", urls); status != 1 || !strings.Contains(stderr, "deleted") {
		t.Errorf("history of a deleted job: %d %s", status, stderr)
	}
	// Its checkpoint objects go too.
	_, tp, err := l.Transport()
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.NewNATSStore(context.Background(), tp.JetStream(), checkpoint.NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		objs, err := store.List(context.Background(), checkpoint.JobPrefix("ops"))
		if err == nil && len(objs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted job's checkpoint objects are still stored: %v %v", objs, err)
		}
	}
	if !strings.Contains(hist, "job ops: 2 epochs") || !strings.Contains(hist, h[1].NewPlanHash[:12]) {
		t.Errorf("history text:\n%s", hist)
	}
}

// pause is an executor that only takes a little time.
type pause struct{}

func (pause) Name() string { return "pause" }

func (pause) Step(context.Context, uint64) (runner.StepStats, error) {
	time.Sleep(10 * time.Millisecond)
	return runner.StepStats{}, nil
}

// TestRankCommands: a malformed reservation in etcd shows in tmmu status
// (text and JSON) within seconds, tmmu rank release clears it, and tmmu
// job delete removes the job's reservations, so a job submitted again
// under the name with a smaller world inherits none.
func TestRankCommands(t *testing.T) {
	l := startCLICluster(t)
	ec, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	dir := t.TempDir()
	irFile, specFile := filepath.Join(dir, "gpt2.json"), filepath.Join(dir, "spec.json")
	mustRun(t, "", "gen", "gpt2", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "8", "--vocab", "64", "--train", "--out", irFile)
	os.WriteFile(specFile, []byte(`{"world_size": 2, "data_parallel": {"zero_stage": 1}}`), 0o644)
	mustRun(t, "", "job", "submit", irFile, "--shard-spec", specFile, "--name", "lm", "--steps", "5")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for k, v := range map[string]string{"/tmmu/jobs/lm/identities/zz": "x", "/tmmu/jobs/lm/identities/w1": "1"} {
		if _, err := ec.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	// What the operator sees, within 10 s.
	var st api.Status
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := json.Unmarshal([]byte(mustRun(t, "", "status", "-o", "json")), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Jobs) == 1 && len(st.Jobs[0].RankProblems) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rank problem in status after 10 s: %+v", st.Jobs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if p := st.Jobs[0].RankProblems[0]; !strings.Contains(p, `identity key "/tmmu/jobs/lm/identities/zz" holds "x"`) {
		t.Fatalf("problem %q", p)
	}
	if text := mustRun(t, "", "status"); !strings.Contains(text, `lm: etcd: identity key "/tmmu/jobs/lm/identities/zz" holds "x", not a rank number: skipped`) {
		t.Fatalf("status text:\n%s", text)
	}
	if out := mustRun(t, "", "rank", "release", "lm", "zz"); !strings.Contains(out, "released zz's rank reservation in job lm") {
		t.Fatalf("rank release: %s", out)
	}
	for deadline = time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st = api.Status{} // Unmarshal keeps fields the JSON leaves out
		if err := json.Unmarshal([]byte(mustRun(t, "", "status", "-o", "json")), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Jobs[0].RankProblems) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the released key still shows after 10 s: %q", st.Jobs[0].RankProblems)
		}
	}
	if code, _, stderr := runCLI(t, "", "rank", "release", "lm"); code != 2 || !strings.Contains(stderr, "rank release JOB IDENTITY") {
		t.Fatalf("rank release with one argument: exit %d, %s", code, stderr)
	}

	// Delete: the reservations go.
	mustRun(t, "", "job", "delete", "lm")
	for deadline = time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := ec.Get(ctx, "/tmmu/jobs/lm/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d etcd keys of the deleted job left after 10 s", resp.Count)
		}
	}
}

// startCLICluster starts an in-process cluster for the CLI (closed when
// the test ends): TMMU_CA_FILE, TMMU_TOKEN and TMMU_COORDINATORS point
// the commands at it.
func startCLICluster(t *testing.T) *localcluster.Local {
	t.Helper()
	l, err := localcluster.Start(localcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	t.Setenv("TMMU_CA_FILE", l.CAFile())
	t.Setenv("TMMU_TOKEN", l.APIToken())
	t.Setenv("TMMU_COORDINATORS", strings.Join(l.Coord.URLs(), ","))
	return l
}
