package coord_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/coordtest"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
)

func tinySubmit(t testing.TB, name string) *api.SubmitRequest {
	m, err := models.GPT2(models.GPT2Config{Layers: 2, Hidden: 32, Heads: 2, Seq: 8, Context: 8, Batch: 1, Vocab: 64, DType: ir.BF16, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	irJSON, _ := json.Marshal(m)
	return &api.SubmitRequest{Name: name, IR: irJSON, ShardSpec: json.RawMessage(`{"world_size": 4, "data_parallel": {"zero_stage": 3}}`), Steps: 3}
}

// startCluster starts 3 nodes for the test and returns the cluster and
// its leader's index.
func startCluster(t *testing.T) (*coordtest.Cluster, int) {
	t.Helper()
	c, err := coordtest.StartCluster(t.TempDir(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	li, err := c.Leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c, li
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRaftClusterSurvivesLeaderLossAndRestarts: a 3-node cluster over TCP
// with bolt stores commits a job submitted to a follower (redirected to the
// leader); the leader is shut down without a transfer and a new leader
// serves status with the job; the old leader, restarted from its files,
// restores the job.
func TestRaftClusterSurvivesLeaderLossAndRestarts(t *testing.T) {
	c, li := startCluster(t)
	follower := (li + 1) % 3
	cl := api.NewClient(c.URLs()[follower])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job, err := cl.Submit(ctx, tinySubmit(t, "gpt2-tiny"))
	if err != nil {
		t.Fatal(err)
	}
	if job.Status != api.StatusAgreeing || len(job.Current().Expected) != 4 {
		t.Fatalf("submitted job: %+v", job)
	}
	// Any node serves a rank's plan, equal to the committed expectation.
	rp, err := cl.RankPlan(ctx, "gpt2-tiny", 3)
	if err != nil {
		t.Fatal(err)
	}
	if rp.Plan.PlanHash != job.Current().Expected[3] || rp.Rank != 3 {
		t.Fatalf("rank 3's plan %s, expected %s", rp.Plan.PlanHash.Short(), job.Current().Expected[3].Short())
	}
	// A retry of the same submission is a no-op.
	if _, err := cl.Submit(ctx, tinySubmit(t, "gpt2-tiny")); err != nil {
		t.Fatalf("resubmitting: %v", err)
	}
	for i, n := range c.Nodes {
		waitFor(t, "replication", 5*time.Second, func() bool { s, _ := n.State(); return s.Jobs["gpt2-tiny"] != nil })
		_ = i
	}
	// Commit an outcome, then lose the leader (the node that committed
	// it: on a loaded machine leadership may have moved since the start).
	li, _, err = c.ApplyOnLeader(&api.Command{Kind: api.CmdOutcome, Job: "gpt2-tiny", Epoch: 0, Outcome: &api.Outcome{Agreed: true}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Stop(li); err != nil {
		t.Fatal(err)
	}
	nl, err := c.Leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, err := api.NewClient(c.URLs()[nl]).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: node %d → node %d serving status after %s", li, nl, time.Since(start))
	if len(st.Jobs) != 1 || st.Jobs[0].Status != api.StatusRunning || !st.Jobs[0].Agreed {
		t.Fatalf("status after failover: %+v", st)
	}
	// The new leader takes writes.
	if _, _, err := c.ApplyOnLeader(&api.Command{Kind: api.CmdProgress, Job: "gpt2-tiny", Step: 1}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The old leader comes back from its bolt files and catches up.
	if err := c.Start(li); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the restarted node to catch up", 10*time.Second, func() bool {
		s, _ := c.Nodes[li].State()
		j := s.Jobs["gpt2-tiny"]
		return j != nil && j.LastStep == 1 && j.Current().Outcome != nil
	})
}

// TestVotersJoinAndLeave: a node started without bootstrap joins as a
// voter through a follower's API (redirected to the leader), catches up
// on the jobs, and leaves again.
func TestVotersJoinAndLeave(t *testing.T) {
	c, li := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	follower := api.NewClient(c.URLs()[(li+1)%3])
	if _, err := follower.Submit(ctx, tinySubmit(t, "before-join")); err != nil {
		t.Fatal(err)
	}
	ni, err := c.Grow()
	if err != nil {
		t.Fatal(err)
	}
	st, err := follower.AddVoter(ctx, c.Peers[ni])
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Voters) != 4 {
		t.Fatalf("voters after the join: %+v", st.Voters)
	}
	waitFor(t, "the new voter to catch up", 10*time.Second, func() bool {
		s, _ := c.Nodes[ni].AppliedState()
		return s.Jobs["before-join"] != nil && s.Peers[c.Peers[ni].ID].HTTPAddr == c.Peers[ni].HTTPAddr
	})
	// The new voter knows the leader's HTTP address and redirects writes.
	if _, err := api.NewClient(c.URLs()[ni]).Submit(ctx, tinySubmit(t, "after-join")); err != nil {
		t.Fatal(err)
	}
	st, err = follower.RemoveVoter(ctx, c.Peers[ni].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Voters) != 3 {
		t.Fatalf("voters after the removal: %+v", st.Voters)
	}
	for _, v := range st.Voters {
		if v.ID == c.Peers[ni].ID {
			t.Fatalf("removed voter still listed: %+v", st.Voters)
		}
	}
}

// TestTransferOnShutdown: a leader that stops with TransferAndShutdown
// (SIGTERM) hands leadership over; the cluster keeps taking writes.
func TestTransferOnShutdown(t *testing.T) {
	c, li := startCluster(t)
	start := time.Now()
	if err := c.Nodes[li].TransferAndShutdown(); err != nil {
		t.Fatal(err)
	}
	c.Nodes[li] = nil // already shut down
	c.CloseHTTP(li)
	nl, err := c.Leader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leadership moved from node %d to node %d in %s", li, nl, time.Since(start))
	if _, _, err := c.ApplyOnLeader(&api.Command{Kind: api.CmdSubmit, Job: "after", Spec: &api.JobSpec{Name: "after"}, New: &api.Epoch{}}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
