package coord

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/replan"
	"github.com/tmmu/tmmu/shard"
)

var jobName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// checkJobName refuses a job name that is not 1 to 64 of A-Z a-z 0-9 _ -.
func checkJobName(name string) error {
	if !jobName.MatchString(name) {
		return failure.New(failure.InvalidOptions, api.OpCoordinator, fmt.Sprintf("job name %q: use 1 to 64 of A-Z a-z 0-9 _ -", name))
	}
	return nil
}

// PrepareSubmit validates a submission and plans every rank of it: the
// command to replicate carries the expected plan hash of every rank (the
// coordinator computes them all; planning is pure).
func PrepareSubmit(req *api.SubmitRequest) (*api.Command, *shard.GlobalPlan, error) {
	if err := checkJobName(req.Name); err != nil {
		return nil, nil, err
	}
	var m *ir.Model
	var err error
	switch {
	case (req.IR == nil) == (req.Model == nil):
		return nil, nil, failure.New(failure.InvalidOptions, api.OpCoordinator, "a submission has either an ir or a model source")
	case req.Model != nil:
		if err := req.Model.Validate(); err != nil {
			return nil, nil, failure.New(failure.InvalidOptions, api.OpCoordinator, err.Error())
		}
		m, err = req.Model.Generate(req.Model.Envelope())
	default:
		m, err = ir.DecodeJSON(req.IR)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(m.Tensors) > MaxIRTensors || len(m.Nodes) > MaxIRTensors {
		return nil, nil, failure.New(failure.InvalidOptions, api.OpCoordinator,
			fmt.Sprintf("ir has %d tensors and %d nodes; a submission may have at most %d of each", len(m.Tensors), len(m.Nodes), MaxIRTensors), "field", "ir")
	}
	spec, err := shard.Decode(req.ShardSpec)
	if err != nil {
		return nil, nil, err
	}
	rs, err := spec.Resolve()
	if err != nil {
		return nil, nil, err
	}
	policy := req.ReplanPolicy
	if policy == "" {
		policy = replan.AtSafepoint
	}
	if policy != replan.AtSafepoint && policy != replan.Abort {
		return nil, nil, failure.New(failure.InvalidOptions, api.OpCoordinator, fmt.Sprintf("replan_policy %q: want %s or %s", policy, replan.AtSafepoint, replan.Abort))
	}
	if err := req.DataMode.Check(); err != nil {
		return nil, nil, failure.New(failure.InvalidOptions, api.OpCoordinator, "data_mode: "+strings.TrimPrefix(err.Error(), "data mode "))
	}
	js := &api.JobSpec{Name: req.Name, ShardSpec: *rs, ArenaConfig: req.ArenaConfig, Mode: req.Mode, Strategy: req.Strategy,
		ReplanPolicy: policy, Steps: req.Steps, Window: req.Window, Source: req.Model, Elastic: req.Elastic, DataMode: req.DataMode,
		CheckpointEvery: req.CheckpointEvery, CheckpointKeep: req.CheckpointKeep, Seed: req.Seed,
		Data: req.Data, Weights: req.Weights, Optimizer: req.Optimizer}
	if err := checkData(js, m); err != nil {
		return nil, nil, err
	}
	if js.CheckpointEvery == 0 {
		js.CheckpointEvery = api.DefaultCheckpointEvery
	}
	if js.CheckpointKeep == 0 {
		js.CheckpointKeep = api.DefaultCheckpointKeep
	}
	if js.Window == 0 {
		js.Window = api.DefaultWindow
	}
	if js.Strategy == "" {
		js.Strategy = planner.Packed
	}
	if err := checkBounds(js); err != nil {
		return nil, nil, err
	}
	if req.ReplayToken != "" {
		if js.ReplayToken, err = ir.ParseHash(req.ReplayToken); err != nil {
			return nil, nil, failure.New(failure.InvalidOptions, api.OpCoordinator, "replay_token: "+err.Error())
		}
	}
	if js.Model, err = m.EncodeCBOR(); err != nil {
		return nil, nil, err
	}
	gp, _, err := shard.PlanRanks(m, rs, lend(js.PlanOptions()))
	if err != nil {
		return nil, nil, err
	}
	e := &api.Epoch{Epoch: 0, StartStep: 1, Reason: "submitted", GlobalPlanHash: gp.Hash, IRHash: gp.IRHash}
	if req.Model != nil {
		e.Envelope = req.Model.Envelope()
	}
	for _, r := range gp.Ranks {
		e.Expected = append(e.Expected, r.PlanHash)
	}
	return &api.Command{Kind: api.CmdSubmit, Job: req.Name, Spec: js, New: e, IRHash: gp.IRHash, SSHash: gp.ShardSpecHash}, gp, nil
}

// PlanRank plans one rank of job j under epoch i, as its workers do.
func (n *Node) PlanRank(ctx context.Context, j *api.Job, i, rank uint64) (*shard.RankPlan, error) {
	ref, opts, _ := j.Inputs(i)
	m, err := n.decodeModel(ctx, ref)
	if err != nil {
		return nil, err
	}
	spec, _ := j.World(i)
	return shard.PlanRank(m, spec, rank, lend(opts))
}

// lend returns o with the coordinator's goroutines lent to the packer
// (planner.Options.Spawn): it plans every rank of a job at submit, at
// each replan and at each change of the world, and the plans are
// byte-identical with them or without.
func lend(o planner.Options) planner.Options {
	o.Spawn = planner.Goroutines
	return o
}

// Upper bounds of a job's numeric fields. A submission past one is
// refused (INVALID_OPTIONS naming the field) before anything is planned
// or committed.
const (
	// MaxWorldSize bounds the shard spec's world_size: the leader plans
	// every rank of a submission.
	MaxWorldSize = 4096
	// MaxSteps bounds steps (0: until the job is drained): step numbers
	// stay exact in JSON's doubles.
	MaxSteps = 1 << 53
	// MaxWindow bounds window, how many steps ranks may run beyond the
	// committed progress: a replan waits for at most that many steps.
	MaxWindow = 1024
	// MaxCheckpointEvery bounds checkpoint_every, in steps.
	MaxCheckpointEvery = 1 << 32
	// MaxCheckpointKeep bounds checkpoint_keep, the checkpoints kept.
	MaxCheckpointKeep = 1024
	// MaxIRTensors bounds the tensors and the nodes of a submitted IR
	// (Llama-2-70B's training graph has about 10,000 tensors): the
	// leader plans every rank of a submission, in time and memory
	// proportional to them.
	MaxIRTensors = 1 << 18
)

// checkBounds refuses a job whose numeric fields are past their bounds.
func checkBounds(js *api.JobSpec) error {
	for _, b := range []struct {
		field  string
		v, max uint64
	}{
		{"shard_spec.world_size", js.ShardSpec.WorldSize, MaxWorldSize},
		{"steps", js.Steps, MaxSteps},
		{"window", js.Window, MaxWindow},
		{"checkpoint_every", js.CheckpointEvery, MaxCheckpointEvery},
		{"checkpoint_keep", js.CheckpointKeep, MaxCheckpointKeep},
	} {
		if b.v > b.max {
			return failure.New(failure.InvalidOptions, api.OpCoordinator,
				fmt.Sprintf("%s %d is above its bound %d", b.field, b.v, b.max), "field", b.field)
		}
	}
	return nil
}
