package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/localcluster"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/trust"
	"github.com/tmmu/tmmu/worker"
)

type slow struct{ runner.Executor }

func (s slow) Step(ctx context.Context, step uint64) (runner.StepStats, error) {
	time.Sleep(100 * time.Millisecond)
	return s.Executor.Step(ctx, step)
}

// running starts a cluster (secured unless insecure) with a 2-rank job
// that runs until the test ends, and waits for its first steps.
func running(t *testing.T, insecure bool) (*localcluster.Local, Target) {
	t.Helper()
	l, err := localcluster.Start(localcluster.Options{Dir: t.TempDir(), Insecure: insecure})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait(); l.Close() })
	m, err := models.GPT2(models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 8, Context: 8, Batch: 1, Vocab: 64, DType: ir.F32, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	irJSON, _ := json.Marshal(m)
	if _, err := l.Client().Submit(ctx, &api.SubmitRequest{Name: "train", IR: irJSON, Steps: 0, CheckpointEvery: 1000,
		ShardSpec: json.RawMessage(`{"world_size": 2, "data_parallel": {"zero_stage": 1}}`)}); err != nil {
		t.Fatal(err)
	}
	var metrics []string
	for i := range 2 {
		id := fmt.Sprint("w", i)
		nc, tr, err := l.WorkerTransport(id)
		if err != nil {
			t.Fatal(err)
		}
		rv, ec, err := l.Rendezvous(5)
		if err != nil {
			t.Fatal(err)
		}
		// The worker daemon's metric of the decisions it ignored.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "tmmu_worker_rejected_decisions_total %d\n", tr.Rejected())
		}))
		t.Cleanup(srv.Close)
		metrics = append(metrics, srv.URL)
		wg.Go(func() {
			defer nc.Close()
			defer ec.Close()
			worker.Run(ctx, worker.Config{Identity: id, Job: "train", Poll: 100 * time.Millisecond,
				Coordinator: l.ReadClient(), Transport: tr, Rendezvous: rv,
				Executor: func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
					x, err := runner.NewArenaExecutor(g, p, 0)
					return slow{x}, err
				}})
		})
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if j, err := l.Client().Job(ctx, "train"); err == nil && j.LastStep >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job did not run 3 steps")
		}
	}
	const intruder = "intruder" // one worker's credentials, not in the job
	natsOpts, err := l.NATSOptions(trust.RoleWorker, intruder)
	if err != nil {
		t.Fatal(err)
	}
	tg := Target{NATSURL: l.NATSURL, NATS: natsOpts, Identity: intruder, Etcd: []string{l.EtcdEndpoint},
		Coordinators: l.Coord.URLs(), HTTP: &http.Client{Timeout: 30 * time.Second}, APIToken: l.APIToken(), Job: "train", WorkerMetrics: metrics}
	for _, p := range l.Coord.Peers {
		tg.Raft = append(tg.Raft, p.RaftAddr)
	}
	if !insecure {
		if tg.RaftTLS, err = l.Secrets.TLS(trust.RoleWorker, intruder).Client(); err != nil {
			t.Fatal(err)
		}
		if tg.HTTP.Transport, err = cli.CoordinatorTransport(trust.TLSFiles{CA: l.CAFile()}); err != nil {
			t.Fatal(err)
		}
	}
	return l, tg
}

// TestSecuredClusterRefusesEveryAttack: against a cluster secured as a
// deployment is, with a job running, someone holding one worker's
// credentials (and an API token, for the input attacks) gets every
// attack refused, sees nothing forged committed, and the job goes on.
func TestSecuredClusterRefusesEveryAttack(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the attacks take about a minute")
	}
	l, tg := running(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before, err := l.Client().Job(ctx, "train")
	if err != nil {
		t.Fatal(err)
	}
	results, err := Run(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(Names()) {
		t.Fatalf("%d results for %d attacks", len(results), len(Names()))
	}
	for _, r := range results {
		if !r.Refused {
			t.Errorf("ACCEPTED %s: %s", r.Attack, r.Detail)
		} else {
			t.Logf("refused  %s: %s", r.Attack, r.Detail)
		}
	}
	after, err := l.Client().Job(ctx, "train")
	if err != nil {
		t.Fatal(err)
	}
	if after.LastStep <= before.LastStep || len(after.Epochs) != len(before.Epochs) || after.Status != api.StatusRunning {
		t.Errorf("the job: step %d → %d, epochs %d → %d, status %s", before.LastStep, after.LastStep, len(before.Epochs), len(after.Epochs), after.Status)
	}
}

// TestUnsecuredClusterFallsToTheAttacks: the same attacks against a
// cluster run --insecure get through: the probe can tell.
func TestUnsecuredClusterFallsToTheAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the attacks take about a minute")
	}
	_, tg := running(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := Run(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	accepted := map[string]bool{}
	for _, r := range results {
		t.Logf("refused=%v %s: %s", r.Refused, r.Attack, r.Detail)
		accepted[r.Attack] = !r.Refused
	}
	for _, want := range []string{"another identity's", "republishes", "publish an outcome", "unsigned grant", "raft votes", "etcd", "without a token", "datasets and weights store"} {
		found := false
		for name, acc := range accepted {
			found = found || strings.Contains(name, want) && acc
		}
		if !found {
			t.Errorf("the attack %q was refused by an insecure cluster: the probe cannot tell", want)
		}
	}
}
