package shard

import (
	"slices"

	"github.com/tmmu/tmmu/internal/canon"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// GlobalFormat tags a global plan and is the first element of its hash
// preimage.
const GlobalFormat = "tmmu_global_plan_v1"

// RankPlan is one rank's plan with the facts the per-rank table shows.
type RankPlan struct {
	Rank  uint64 `json:"rank"`
	Coord Coord  `json:"coord"`
	// ViewHash is the ir_hash of the rank's view: ranks with equal view
	// hashes run the same IR and get the same layout.
	ViewHash   ir.Hash    `json:"view_ir_hash"`
	ModelState ModelState `json:"model_state"`
	// CollectivePeakBytes is the most bytes of collective tensors
	// (View.Collective) live at one position of the plan.
	CollectivePeakBytes uint64        `json:"collective_peak_bytes"`
	Plan                *planner.Plan `json:"plan"`
	// View is the rank's view the plan was made for (PlanRank only;
	// PlanRanks shares one view per stage and leaves it nil).
	View *View `json:"-"`
}

// GlobalPlan ties a job's rank plans together: the global IR, the shard
// spec and every rank's view and plan hash. Hash is
//
//	SHA-256(CBOR_CANONICAL(["tmmu_global_plan_v1",
//	    [ir_hash, shard_spec_hash, world_size,
//	     [[rank, view_ir_hash, tmmu_plan_hash], ...]]]))
//
// with ranks in ascending order and hashes as 32-byte byte strings.
type GlobalPlan struct {
	Format        string      `json:"format" cbor:"format"`
	Hash          ir.Hash     `json:"global_plan_hash" cbor:"global_plan_hash"`
	IRHash        ir.Hash     `json:"ir_hash" cbor:"ir_hash"`
	ShardSpecHash ir.Hash     `json:"shard_spec_hash" cbor:"shard_spec_hash"`
	WorldSize     uint64      `json:"world_size" cbor:"world_size"`
	Ranks         []RankEntry `json:"ranks" cbor:"ranks"`
}

// RankEntry is one rank's line of a GlobalPlan.
type RankEntry struct {
	_        struct{} `cbor:",toarray"`
	Rank     uint64   `json:"rank"`
	ViewHash ir.Hash  `json:"view_ir_hash"`
	PlanHash ir.Hash  `json:"plan_hash"`
}

// ComputeHash returns the global plan hash of g's fields.
func (g *GlobalPlan) ComputeHash() ir.Hash {
	w := canon.NewSHA256()
	w.Array(2)
	w.Text(GlobalFormat)
	w.Array(4)
	w.Bytes(g.IRHash[:])
	w.Bytes(g.ShardSpecHash[:])
	w.Uint(g.WorldSize)
	w.Array(len(g.Ranks))
	for _, r := range g.Ranks {
		w.Array(3)
		w.Uint(r.Rank)
		w.Bytes(r.ViewHash[:])
		w.Bytes(r.PlanHash[:])
	}
	return w.Sum()
}

// PlanRank plans one rank: its view of m under spec, planned with opts
// (mode, strategy, effort, arenas, replay token; an empty mode means the
// view's default) and with Rank, WorldSize and ShardSpecHash set from
// spec, so that its tmmu_plan_hash covers them (spec II.I, II.K).
func PlanRank(m *ir.Model, spec *Spec, rank uint64, opts planner.Options) (*RankPlan, error) {
	rs, err := spec.Resolve()
	if err != nil {
		return nil, err
	}
	v, err := RankView(m, rs, rank)
	if err != nil {
		return nil, err
	}
	return PlanView(v, rs, opts)
}

// PlanView plans a view that RankView made of spec, as PlanRank would
// (the same plan and hash): a rank whose graph and shard spec stay the
// same across a replan (a new strategy or arena config) keeps its view
// and only plans it again.
func PlanView(v *View, spec *Spec, opts planner.Options) (*RankPlan, error) {
	rs, err := spec.Resolve()
	if err != nil {
		return nil, err
	}
	rp, err := planView(v, rs, opts)
	if err != nil {
		return nil, err
	}
	rp.View = v
	return rp, nil
}

// PlanRanks plans every rank of the job and returns the global plan with
// the rank plans in rank order. Ranks of one pipeline stage share a view,
// so each stage is planned once and its plan restamped per rank
// (planner.Plan.WithRank).
func PlanRanks(m *ir.Model, spec *Spec, opts planner.Options) (*GlobalPlan, []*RankPlan, error) {
	rs, err := spec.Resolve()
	if err != nil {
		return nil, nil, err
	}
	irHash := m.IRHash()
	stages := make([]uint64, rs.Stages())
	for i := range stages {
		stages[i] = uint64(i)
	}
	views, err := stageViews(m, rs, stages)
	if err != nil {
		return nil, nil, err
	}
	byStage := make([]*RankPlan, len(views))
	for s, v := range views {
		v.Rank, v.Coord = rankOf(rs, Coord{Stage: uint64(s)}), Coord{Stage: uint64(s)}
		if byStage[s], err = planView(v, rs, opts); err != nil {
			return nil, nil, err
		}
	}
	gp := &GlobalPlan{Format: GlobalFormat, IRHash: irHash, ShardSpecHash: rs.Hash(), WorldSize: rs.WorldSize}
	plans := make([]*RankPlan, rs.WorldSize)
	for r := range rs.WorldSize {
		c, _ := rs.Coord(r)
		base := byStage[c.Stage]
		rp := *base
		rp.Rank, rp.Coord = r, c
		if rp.Plan, err = base.Plan.WithRank(r); err != nil {
			return nil, nil, err
		}
		plans[r] = &rp
		gp.Ranks = append(gp.Ranks, RankEntry{Rank: r, ViewHash: rp.ViewHash, PlanHash: rp.Plan.PlanHash})
	}
	gp.Hash = gp.ComputeHash()
	return gp, plans, nil
}

func rankOf(s *Spec, c Coord) uint64 {
	return (c.Stage*s.DataParallel.Degree+c.Data)*s.TensorParallel.Degree + c.Tensor
}

func planView(v *View, spec *Spec, opts planner.Options) (*RankPlan, error) {
	if opts.Mode == "" {
		opts.Mode = planner.DefaultMode(v.Graph)
	}
	opts.Rank, opts.WorldSize, opts.ShardSpecHash = v.Rank, spec.WorldSize, spec.Hash()
	p, err := planner.PlanMemory(v.Graph, opts)
	if err != nil {
		return nil, err
	}
	return &RankPlan{Rank: v.Rank, Coord: v.Coord, ViewHash: v.Graph.IRHash, ModelState: v.ModelState,
		CollectivePeakBytes: collectivePeak(p, v.Collective), Plan: p}, nil
}

// collectivePeak returns the most bytes of the named tensors' storage live
// at one position of p.
func collectivePeak(p *planner.Plan, ids []string) uint64 {
	type event struct {
		at    int32
		delta int64
	}
	var ev []event
	for _, id := range ids {
		i, ok := slices.BinarySearchFunc(p.Tensors, id, func(t planner.TensorPlacement, id string) int {
			switch {
			case t.ID < id:
				return -1
			case t.ID > id:
				return 1
			}
			return 0
		})
		if !ok || p.Tensors[i].Storage != "" {
			continue
		}
		t := &p.Tensors[i]
		ev = append(ev, event{t.Lifetime[0], int64(t.Size)}, event{t.Lifetime[1] + 1, -int64(t.Size)})
	}
	slices.SortFunc(ev, func(a, b event) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return int(min(max(a.delta-b.delta, -1), 1)) // frees first
	})
	var cur, peak int64
	for _, e := range ev {
		cur += e.delta
		peak = max(peak, cur)
	}
	return uint64(peak)
}
