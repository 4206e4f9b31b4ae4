package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/coord/coordtest"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/transport"
	"github.com/tmmu/tmmu/trust"
)

// The job must outlast the fault schedule on any machine: steps run on
// while etcd or coordinators are down (14 steps/s of this model on a
// loaded 2-core VM, over 20 on CI's, so a 5-second etcd outage alone
// lets some 100 steps commit), and the worker faults need steps left to
// run. With 100 steps the job ended on CI before the etcd fault.
const (
	world      = 4
	jobSteps   = 600
	ckptEvery  = 50
	faultEvery = 4 // committed steps between the recovery from one fault and the next fault
)

// testCluster is the running cluster's processes and addresses.
type testCluster struct {
	*cluster
	nats, etcd *proc
	coords     []*proc
	natsURL    string
	etcdURL    string
	urls       []string
	client     *api.Client
	secrets    string // tmmu secrets init's layout: everything speaks TLS with its own identity
}

// jobs are the jobs the test runs; each has world workers "<job>-<i>".
var jobs = []string{"reference", "faults"}

// writeSecrets writes the cluster's credentials as tmmu secrets init
// does (the coordinators c1..c3, a worker identity per job and rank, the
// NATS users), and a nats.conf with TLS that includes them.
func writeSecrets(t *testing.T, dir string) {
	var workers []string
	for _, j := range jobs {
		for i := range world {
			workers = append(workers, fmt.Sprintf("%s-%d", j, i))
		}
	}
	_, err := trust.Generate(dir, trust.Plan{Coordinators: []string{"c1", "c2", "c3"}, Workers: workers}, transport.NATSAuthorizationOf)
	if err != nil {
		t.Fatal(err)
	}
	l := trust.Layout{Dir: dir}
	conf := fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  ca_file: %q\n  verify: true\n}\ninclude %q\n",
		l.Cert(trust.RoleNATS, trust.RoleNATS), l.Key(trust.RoleNATS, trust.RoleNATS), l.CACert(), "nats/auth.conf")
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
}

// free returns a loopback address free a moment ago, and none twice
// (see coordtest.FreeAddr: below the kernel's ephemeral range, so that
// NATS, etcd and coordinators find theirs free when they restart).
func free(t *testing.T) string {
	a, err := coordtest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func startCluster(t *testing.T) *testCluster {
	tc := &testCluster{cluster: newCluster(t)}
	tc.secrets = filepath.Join(tc.dir, "secrets")
	writeSecrets(t, tc.secrets)
	natsAddr := free(t)
	tc.natsURL = "tls://" + natsAddr
	tc.nats = tc.add("nats", "nats", natsAddr[strings.LastIndex(natsAddr, ":")+1:], filepath.Join(tc.dir, "nats-store"), filepath.Join(tc.secrets, "nats.conf"))
	tc.start(tc.nats)
	tc.nats.waitLine(t, "nats: ready", 30*time.Second)
	tc.etcdURL = "https://" + free(t)
	tc.etcd = tc.add("etcd", "etcd", filepath.Join(tc.dir, "etcd-data"), tc.etcdURL, "http://"+free(t), tc.secrets)
	tc.start(tc.etcd)
	tc.etcd.waitLine(t, "etcd: ready", 60*time.Second)
	type addrs struct{ raft, http string }
	var as []addrs
	var peers []string
	for i := range 3 {
		a := addrs{free(t), free(t)}
		as = append(as, a)
		peers = append(peers, fmt.Sprintf("c%d=%s=%s", i+1, a.raft, a.http))
		tc.urls = append(tc.urls, "https://"+a.http)
	}
	for i, a := range as {
		p := tc.add(fmt.Sprintf("c%d", i+1), "coordinator", "--id", fmt.Sprintf("c%d", i+1), "--raft-addr", a.raft, "--http-addr", a.http,
			"--data-dir", filepath.Join(tc.dir, fmt.Sprintf("c%d", i+1)), "--nats", tc.natsURL, "--etcd", tc.etcdURL,
			"--peers", strings.Join(peers, ","), "--bootstrap", "--fast-failover", "--log-format", "json", "--secrets", tc.secrets)
		tc.coords = append(tc.coords, p)
		tc.start(p)
	}
	tc.client = api.NewClient(tc.urls...)
	l := trust.Layout{Dir: tc.secrets}
	rt, err := cli.CoordinatorTransport(trust.TLSFiles{CA: l.CACert()})
	if err != nil {
		t.Fatal(err)
	}
	tc.client.HTTP.Transport = rt
	if tc.client.Token, err = cli.ReadSecret(l.APIToken()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err := tc.client.Status(context.Background()); err == nil && st.Leader != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no raft leader within 60 s:\n%s", tail(tc.coords[0].log, 20))
		}
	}
	return tc
}

// leader returns the coordinator process that leads, and the others.
func (tc *testCluster) leader(t *testing.T) (*proc, []*proc) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		st, err := tc.client.Status(context.Background())
		if err != nil || st.Leader == "" {
			continue
		}
		var others []*proc
		var lead *proc
		for _, p := range tc.coords {
			if p.name == st.Leader {
				lead = p
			} else {
				others = append(others, p)
			}
		}
		if lead != nil {
			return lead, others
		}
	}
	t.Fatal("no leader")
	return nil, nil
}

func (tc *testCluster) worker(job, identity string) *proc {
	return tc.add(identity, "worker", "--identity", identity, "--job", job, "--coordinators", strings.Join(tc.urls, ","),
		"--nats", tc.natsURL, "--etcd", tc.etcdURL, "--executor", "cpu", "--lease-ttl", "3", "--poll", "200ms", "--log-format", "json", "--secrets", tc.secrets)
}

func submission(t *testing.T, name string) *api.SubmitRequest {
	m, err := models.GPT2(models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 16, Context: 16, Batch: 1, Vocab: 32, DType: ir.F32, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	irJSON, _ := json.Marshal(m)
	return &api.SubmitRequest{Name: name, IR: irJSON, Steps: jobSteps, CheckpointEvery: ckptEvery, Seed: 5,
		ShardSpec:   json.RawMessage(fmt.Sprintf(`{"world_size": %d, "data_parallel": {"zero_stage": 3}}`, world)),
		ArenaConfig: engine.ExecutableArenas(engine.PortableLimits, nil)}
}

// progress polls the job as the coordinators commit it.
type progress struct {
	mu      sync.Mutex
	samples []sample
	last    *api.Job
}

type sample struct {
	at   time.Time
	step uint64
}

func (tc *testCluster) watch(ctx context.Context, job string) *progress {
	pr := &progress{}
	go func() {
		for ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			j, err := tc.client.Job(cctx, job)
			cancel()
			if err == nil {
				pr.mu.Lock()
				pr.samples = append(pr.samples, sample{time.Now(), j.LastStep})
				pr.last = j
				pr.mu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return pr
}

func (pr *progress) job() *api.Job {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.last
}

// nextCommit returns when the committed step first rose after since.
func (pr *progress) nextCommit(since time.Time) (time.Time, uint64, bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for i := 1; i < len(pr.samples); i++ {
		s := pr.samples[i]
		if s.at.After(since) && s.step > pr.samples[i-1].step {
			return s.at, s.step, true
		}
	}
	return time.Time{}, 0, false
}

func (tc *testCluster) waitStep(t *testing.T, pr *progress, what string, step uint64, timeout time.Duration) {
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		j := pr.job()
		if j != nil && j.Final() {
			t.Fatalf("%s: the job is %s at step %d already (%s)", what, j.Status, j.LastStep, j.Reason)
		}
		if j != nil && j.LastStep >= step {
			return
		}
		if time.Now().After(deadline) {
			last := uint64(0)
			if j != nil {
				last = j.LastStep
			}
			t.Fatalf("%s: not at step %d within %s (at %d)", what, step, timeout, last)
		}
	}
}

// runJob submits job, starts its workers and returns them.
func (tc *testCluster) runJob(t *testing.T, name string) []*proc {
	return tc.runJobSteps(t, name, jobSteps)
}

// runJobSteps is runJob for a job of steps steps.
func (tc *testCluster) runJobSteps(t *testing.T, name string, steps uint64) []*proc {
	req := submission(t, name)
	req.Steps = steps
	if _, err := tc.client.Submit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var ws []*proc
	for i := range world {
		p := tc.worker(name, fmt.Sprintf("%s-%d", name, i))
		tc.start(p)
		ws = append(ws, p)
	}
	return ws
}

// finish waits until the job is done and every worker exited 0.
func (tc *testCluster) finish(t *testing.T, name string, ws []*proc, timeout time.Duration) *api.Job {
	var j *api.Job
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		jj, err := tc.client.Job(context.Background(), name)
		if err == nil && jj.Final() {
			j = jj
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not done within %s: %+v %v\n%s", name, timeout, jj, err, tail(ws[0].log, 30))
		}
	}
	if j.Status != api.StatusDone {
		t.Fatalf("job %s is %s: %s", name, j.Status, j.Reason)
	}
	for _, p := range ws {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			done, err := p.done()
			if done {
				if err != nil {
					t.Errorf("worker %s exited with %v:\n%s", p.name, err, tail(p.log, 10))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("worker %s did not exit after the job was done:\n%s", p.name, tail(p.log, 10))
			}
		}
	}
	return j
}

// checkpointLosses reads, from the workers' JSON logs, the loss each
// rank reported with each checkpoint it stored: (rank, step) → losses
// (one per time the step ran).
func checkpointLosses(ws []*proc) map[[2]uint64][]float64 {
	out := map[[2]uint64][]float64{}
	for _, p := range ws {
		lines(p.log, func(l string) {
			var e struct {
				Msg  string   `json:"msg"`
				Rank uint64   `json:"rank"`
				Step uint64   `json:"step"`
				Loss *float64 `json:"loss"`
			}
			if json.Unmarshal([]byte(l), &e) == nil && e.Msg == "checkpoint stored" && e.Loss != nil {
				k := [2]uint64{e.Rank, e.Step}
				out[k] = append(out[k], *e.Loss)
			}
		})
	}
	return out
}

type faultResult struct {
	name                     string
	fault, back, first, next time.Time // first: the first commit after the fault; next: after the recovery
	stepBefore, stepAt       uint64
}

// TestFaults: see the package documentation.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault test runs for minutes")
	}
	down := 90 * time.Second
	if v := os.Getenv("TMMU_FAULTS_WORKER_DOWN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		down = d
	}
	tc := startCluster(t)
	defer func() {
		if t.Failed() {
			for _, p := range tc.procs {
				t.Logf("--- %s:\n%s", p.name, tail(p.log, 15))
			}
		}
	}()

	// The same job without faults.
	t0 := time.Now()
	ref := tc.runJob(t, "reference")
	refJob := tc.finish(t, "reference", ref, 5*time.Minute)
	t.Logf("reference run: %d steps in %s, %d epochs, final checkpoint at step %d", jobSteps, time.Since(t0).Round(time.Millisecond), len(refJob.Epochs), refJob.LastCheckpoint().Step)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr := tc.watch(ctx, "faults")
	ws := tc.runJob(t, "faults")
	var results []faultResult
	at := uint64(6)
	inject := func(name string, f func() (back time.Time)) {
		tc.waitStep(t, pr, "before "+name, at, 3*time.Minute)
		r := faultResult{name: name, stepBefore: pr.job().LastStep, fault: time.Now()}
		r.back = f()
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if ts, step, ok := pr.nextCommit(r.back); ok {
				r.next, r.stepAt = ts, step
				r.first, _, _ = pr.nextCommit(r.fault)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no step committed within 3 minutes", name)
			}
		}
		results = append(results, r)
		t.Logf("%-58s step %3d before it; first commit %6.2f s after it; step %3d committed %5.2f s after recovery", name, r.stepBefore,
			r.first.Sub(r.fault).Seconds(), r.stepAt, r.next.Sub(r.back).Seconds())
		at = r.stepAt + faultEvery
	}
	inject("NATS killed, restarted after 5 s", func() time.Time {
		tc.nats.kill()
		time.Sleep(5 * time.Second)
		tc.start(tc.nats)
		return time.Now()
	})
	inject("etcd killed, restarted after 5 s", func() time.Time {
		tc.etcd.kill()
		time.Sleep(5 * time.Second)
		tc.start(tc.etcd)
		return time.Now()
	})
	inject("2 of 3 coordinators restarted", func() time.Time {
		_, others := tc.leader(t)
		for _, p := range others {
			p.stop()
		}
		for _, p := range others {
			tc.start(p)
		}
		return time.Now()
	})
	var dead *proc
	inject("the raft leader SIGKILLed", func() time.Time {
		dead, _ = tc.leader(t)
		dead.kill()
		return time.Now()
	})
	tc.start(dead) // back for the faults to come: three voters again
	inject(fmt.Sprintf("worker faults-1 SIGKILLed, restarted after %s", down), func() time.Time {
		ws[1].kill()
		time.Sleep(down)
		tc.start(ws[1])
		return time.Now()
	})
	inject("worker faults-2 SIGKILLed, replaced by a new process", func() time.Time {
		ws[2].kill()
		tc.start(ws[2]) // a new process with the same identity
		return time.Now()
	})
	job := tc.finish(t, "faults", ws, 5*time.Minute)
	cancel()

	// A worker exits on its own only once its job is done (the checkpoint
	// of the last step committed), and with status 0; nothing else exits.
	doneAt := map[string]time.Time{"reference": time.Unix(0, refJob.LastCheckpoint().CommittedAt), "faults": time.Unix(0, job.LastCheckpoint().CommittedAt)}
	tc.mu.Lock()
	var unexpected []string
	for _, x := range tc.exits {
		jobName, _, _ := strings.Cut(x.name, "-")
		if at, ok := doneAt[jobName]; !ok || x.err != nil || x.at.Before(at) {
			unexpected = append(unexpected, fmt.Sprintf("%s (run %d) at %s: %v", x.name, x.run, x.at.Format(time.TimeOnly), x.err))
		}
	}
	tc.mu.Unlock()
	if len(unexpected) > 0 {
		t.Errorf("processes exited that no fault killed, before their job was done or with an error: %v", unexpected)
	}
	// The model state: the final checkpoints are equal, rank by rank.
	a, b := refJob.LastCheckpoint(), job.LastCheckpoint()
	for r := range world {
		if a.Shards[r].Digest != b.Shards[r].Digest || a.Shards[r].StateHash != b.Shards[r].StateHash {
			t.Errorf("rank %d ends in state %s (object %s) with the faults and %s (object %s) without",
				r, b.Shards[r].StateHash.Short(), b.Shards[r].Digest.Short(), a.Shards[r].StateHash.Short(), a.Shards[r].Digest.Short())
		}
	}
	// The loss at every checkpoint, each time it ran, is the loss of the
	// run without faults: it never jumps back.
	refLoss, faultLoss := checkpointLosses(ref), checkpointLosses(ws)
	runs := 0
	for k, ls := range faultLoss {
		for _, l := range ls {
			runs++
			if want := refLoss[k]; len(want) == 0 || l != want[0] {
				t.Errorf("rank %d step %d: loss %v with the faults, %v without", k[0], k[1], l, want)
			}
		}
	}
	if len(faultLoss) < world*jobSteps/ckptEvery {
		t.Errorf("%d (rank, step) checkpoint losses logged, want at least %d", len(faultLoss), world*jobSteps/ckptEvery)
	}
	rollbacks := 0
	for _, e := range job.Epochs {
		if e.Restore != nil && e.Restore.Rollback {
			rollbacks++
		}
		t.Logf("epoch %d from step %d: %s", e.Epoch, e.StartStep, e.Reason)
	}
	t.Logf("the run with %d faults ends in the reference's final state on all %d ranks (rank 0 %s); %d checkpoint losses (%d with replays) equal the reference's; %d rollbacks; no process exited but the killed ones",
		len(results), world, b.Shards[0].StateHash.Short(), len(faultLoss), runs, rollbacks)
	fmt.Println("fault → next committed step (the first commit after the fault; the first after the fault is over):")
	for _, r := range results {
		fmt.Printf("  %-58s %6.2f s  %5.2f s\n", r.name, r.first.Sub(r.fault).Seconds(), r.next.Sub(r.back).Seconds())
	}
}
