package planner

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/internal/canon"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner/pack"
)

// Format tags a plan and is the first element of the plan-hash preimage.
const Format = "tmmu_plan_v1"

// Plan is a memory plan (spec §0.I tmmu_plan with its tensor_map and
// metrics). Everything in it except Metrics.AllocationTimeNs is a pure
// function of the graph and the options, so two planners given the same
// inputs produce byte-identical canonical CBOR.
type Plan struct {
	Format             string      `json:"format" cbor:"format"`
	PlanHash           ir.Hash     `json:"plan_hash" cbor:"plan_hash"`
	IRHash             ir.Hash     `json:"ir_hash" cbor:"ir_hash"`
	ExecutionOrderHash ir.Hash     `json:"execution_order_hash" cbor:"execution_order_hash"`
	ArenaConfigHash    ir.Hash     `json:"arena_config_hash" cbor:"arena_config_hash"`
	ShardSpecHash      ir.Hash     `json:"shard_spec_hash" cbor:"shard_spec_hash"`
	ReplayToken        ir.Hash     `json:"replay_token" cbor:"replay_token"`
	Name               string      `json:"name,omitempty" cbor:"name,omitempty"`
	Mode               Mode        `json:"mode" cbor:"mode"`
	Strategy           Strategy    `json:"strategy" cbor:"strategy"`
	Effort             pack.Effort `json:"effort,omitempty" cbor:"effort,omitempty"` // packed only
	Budget             int64       `json:"budget,omitempty" cbor:"budget,omitempty"` // packed only: the work budget, when not the effort's default
	Rank               uint64      `json:"rank" cbor:"rank"`
	WorldSize          uint64      `json:"world_size" cbor:"world_size"`
	Positions          int         `json:"positions" cbor:"positions"` // executed nodes
	ArenaConfig        ArenaConfig `json:"arena_config" cbor:"arena_config"`
	Arenas             Arenas      `json:"arenas" cbor:"arenas"`
	Tensors            TensorMap   `json:"tensors" cbor:"tensors"`
	Metrics            Metrics     `json:"metrics" cbor:"metrics"`
}

// Arenas lists the arenas that hold at least one tensor, by name. It
// encodes as a JSON object keyed by name and as a CBOR array.
type Arenas []ArenaPlan

// ArenaPlan is one arena's layout and metrics.
type ArenaPlan struct {
	Name     string    `json:"-" cbor:"name"`
	Role     ArenaRole `json:"role" cbor:"role"`
	Tensors  int       `json:"tensors" cbor:"tensors"`
	Storages int       `json:"storages" cbor:"storages"` // tensors with their own bytes
	// LogicalSlots is peak_logical_slots: slots used in this arena.
	LogicalSlots int `json:"logical_slots" cbor:"logical_slots"`
	// MaxLive is the most storages live at one position.
	MaxLive int `json:"max_live" cbor:"max_live"`
	// PeakBytes is the end of the highest placed byte
	// (peak_physical_bytes_per_arena); ReservedBytes rounds it to the page
	// size and is what capacity is checked against.
	PeakBytes     uint64 `json:"peak_bytes" cbor:"peak_bytes"`
	ReservedBytes uint64 `json:"reserved_bytes" cbor:"reserved_bytes"`
	// LowerBoundBytes is the most storage bytes live at one position: no
	// placement of this arena can use fewer.
	LowerBoundBytes uint64 `json:"lower_bound_bytes" cbor:"lower_bound_bytes"`
	// Packing says how the arena was packed (packed and greedy-size
	// strategies; never hashed).
	Packing *Packing `json:"packing,omitempty" cbor:"packing,omitempty"`
	Ratios
	Slots []Slot `json:"slots" cbor:"slots"`
}

// Packing is what the packer reports for one arena.
type Packing struct {
	// Method names the placement kept, e.g. "best-fit by conflict",
	// "skyline dive", "search by total,width,area" or "slots" (the spec's
	// layout, when no packing was smaller).
	Method string `json:"method" cbor:"method"`
	// Optimal is true when no placement of the arena peaks lower: the
	// peak meets the lower bound or a complete search proved it.
	Optimal bool `json:"proven_optimal" cbor:"proven_optimal"`
	// Gap bounds how far the peak is above the optimum, as a fraction of
	// the packer's lower bound (0 when proven optimal): the bytes live at
	// once, raised by alignment padding and by what its complete searches
	// proved (see package pack, Result.LowerBound).
	Gap float64 `json:"gap" cbor:"gap"`
	// Work is the work spent and Budget the work allowed after the
	// mandatory greedy placements, in the packer's deterministic units.
	Work   int64 `json:"work" cbor:"work"`
	Budget int64 `json:"budget" cbor:"budget"`
}

// Ratios are derived from the integer metrics (never hashed).
type Ratios struct {
	// MemoryReuseRatio is 1 − slots/tensors (spec §6).
	MemoryReuseRatio float64 `json:"memory_reuse_ratio" cbor:"memory_reuse_ratio"`
	// InternalFragmentationRatio is 1 − lower_bound_bytes/peak_bytes: the
	// share of the arena that is not needed at its busiest position
	// (padding, slots larger than their tenants, and gaps).
	InternalFragmentationRatio float64 `json:"internal_fragmentation_ratio" cbor:"internal_fragmentation_ratio"`
}

func ratios(slots, tensors int, lowerBound, peak uint64) Ratios {
	var r Ratios
	if tensors > 0 {
		r.MemoryReuseRatio = 1 - float64(slots)/float64(tensors)
	}
	if peak > 0 {
		r.InternalFragmentationRatio = 1 - float64(lowerBound)/float64(peak)
	}
	return r
}

// Slot is one logical slot of an arena.
type Slot struct {
	_         struct{} `cbor:",toarray"`
	Slot      int32    `json:"slot"`
	Offset    uint64   `json:"offset"`
	Size      uint64   `json:"size"`
	Alignment uint64   `json:"alignment"`
}

// TensorMap lists placements sorted by tensor id. It encodes as a JSON
// object keyed by id and as a CBOR array.
type TensorMap []TensorPlacement

// TensorPlacement is one tensor_map entry. Offset is the tensor's logical
// address inside its arena; a view's is its storage's offset plus its byte
// offset.
type TensorPlacement struct {
	ID          string   `json:"-" cbor:"id"`
	Arena       string   `json:"arena" cbor:"arena"`
	LogicalSlot int32    `json:"logical_slot" cbor:"logical_slot"`
	Offset      uint64   `json:"offset" cbor:"offset"`
	Size        uint64   `json:"size" cbor:"size"`
	Lifetime    [2]int32 `json:"lifetime" cbor:"lifetime"` // [birth, death], inclusive positions
	Alignment   uint64   `json:"alignment" cbor:"alignment"`
	// Storage names the tensor that owns the bytes when this one is a view
	// or an alias group member; empty when the tensor owns its bytes.
	Storage string `json:"storage,omitempty" cbor:"storage,omitempty"`
}

// Metrics summarises a plan (spec §0.I and §7).
type Metrics struct {
	Tensors  int `json:"tensors" cbor:"tensors"`
	Storages int `json:"storages" cbor:"storages"`
	// PeakLogicalSlots, MaxLive, PeakBytes, ReservedBytes and
	// LowerBoundBytes are sums over arenas (arenas are separate address
	// spaces, so the sum of their lower bounds bounds the total).
	PeakLogicalSlots int    `json:"peak_logical_slots" cbor:"peak_logical_slots"`
	MaxLive          int    `json:"max_live" cbor:"max_live"`
	PeakBytes        uint64 `json:"peak_bytes" cbor:"peak_bytes"`
	ReservedBytes    uint64 `json:"reserved_bytes" cbor:"reserved_bytes"`
	LowerBoundBytes  uint64 `json:"lower_bound_bytes" cbor:"lower_bound_bytes"`
	Ratios
	// ActivationRetentionRatio is the share of activation-arena tensors
	// kept alive for a later phase: read by backward or optimizer nodes
	// (forward, train_full), or carried in from the forward pass
	// (backward). 0 in inference.
	ActivationRetentionRatio float64 `json:"activation_retention_ratio" cbor:"activation_retention_ratio"`
	// AllocationTimeNs is wall time spent planning, set by the caller that
	// measured it (the planner itself reads no clock). Not part of the
	// CBOR encoding, which is deterministic.
	AllocationTimeNs int64 `json:"allocation_time_ns" cbor:"-"`
}

// PlanMemory computes a plan (UML_OS.TMMU.PlanMemory_v2): liveness, then
// the strategy's placement, then metrics and tmmu_plan_hash. It is pure:
// no clock, no goroutines, no global state.
func PlanMemory(g *ir.Graph, opts Options) (*Plan, error) {
	o, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	live, err := AnalyzeLiveness(g, o.Mode)
	if err != nil {
		return nil, err
	}
	if err := checkTimes(o.PositionTimes, live.Positions()); err != nil {
		return nil, err
	}
	var asg *SlotAssignment
	var layouts []ArenaLayout
	if o.Strategy == Slots {
		asg = AssignLogicalSlots(g, live, o.Arenas)
		layouts, err = MapToVirtualAddresses(asg, o.Arenas)
	} else {
		asg, layouts, err = packArenas(g, live, o)
	}
	if err != nil {
		return nil, err
	}
	p := &Plan{
		Format:             Format,
		IRHash:             g.IRHash,
		ExecutionOrderHash: g.OrderHash,
		ArenaConfigHash:    o.Arenas.Hash(),
		ShardSpecHash:      o.ShardSpecHash,
		ReplayToken:        o.ReplayToken,
		Name:               g.Name,
		Mode:               o.Mode,
		Strategy:           o.Strategy,
		Effort:             o.Effort,
		Budget:             o.Budget,
		Rank:               o.Rank,
		WorldSize:          o.WorldSize,
		Positions:          live.Positions(),
		ArenaConfig:        o.Arenas,
	}
	// Tensor map.
	p.Tensors = make(TensorMap, len(live.Tensors))
	tensorsIn := make([]int, len(ir.Arenas))
	for i, t := range live.Tensors {
		tt := &g.Tensors[t]
		r, ai := g.Root[t], g.Arena[t]
		slot := asg.Slot[r]
		off := layouts[ai].SlotOffset[slot]
		tensorsIn[ai]++
		align := asg.Arenas[ai].SlotAlign[slot]
		if r != t {
			align = min(align, offsetAlignment(g.RootOffset[t]))
		}
		tp := TensorPlacement{
			ID:          tt.ID,
			Arena:       ir.Arenas[ai],
			LogicalSlot: slot,
			Offset:      off + g.RootOffset[t], // within the storage, cannot overflow: checked against storage size
			Size:        g.Bytes[t],
			Lifetime:    [2]int32{live.Birth[t], live.Death[t]},
			Alignment:   align,
		}
		if r != t {
			tp.Storage = g.Tensors[r].ID
		}
		p.Tensors[i] = tp
	}
	// Arena metrics.
	sw := newSweeper(live.Positions())
	for ai := range asg.Arenas {
		as := &asg.Arenas[ai]
		if tensorsIn[ai] == 0 {
			continue
		}
		maxLive, lb, err := sw.sweep(live, g, as.Storages, as.Name)
		if err != nil {
			return nil, err
		}
		ap := ArenaPlan{
			Name:            as.Name,
			Role:            RoleOfArena(as.Name),
			Tensors:         tensorsIn[ai],
			Storages:        len(as.Storages),
			LogicalSlots:    len(as.SlotSize),
			MaxLive:         maxLive,
			PeakBytes:       layouts[ai].PeakBytes,
			ReservedBytes:   layouts[ai].ReservedBytes,
			LowerBoundBytes: lb,
			Packing:         layouts[ai].Packing,
			Slots:           make([]Slot, len(as.SlotSize)),
		}
		for k := range as.SlotSize {
			ap.Slots[k] = Slot{Slot: int32(k), Offset: layouts[ai].SlotOffset[k], Size: as.SlotSize[k], Alignment: as.SlotAlign[k]}
		}
		p.Arenas = append(p.Arenas, ap)
	}
	if err := p.summarize(live.Retained); err != nil {
		return nil, err
	}
	// Plan indices in canonical key order: live.Tensors is ascending, so
	// a tensor's plan index is its rank among the tensors in scope.
	planIdx := make([]int32, len(g.Tensors))
	for i, t := range live.Tensors {
		planIdx[t] = int32(i)
	}
	order := make([]int32, 0, len(live.Tensors))
	for _, t := range g.CanonOrder {
		if live.Birth[t] >= 0 {
			order = append(order, planIdx[t])
		}
	}
	p.PlanHash = p.hash(order)
	return p, nil
}

// summarize fills Metrics from the arenas.
func (p *Plan) summarize(retained int) error {
	m := Metrics{Tensors: len(p.Tensors)}
	activations := 0
	for i := range p.Arenas {
		a := &p.Arenas[i]
		a.Ratios = ratios(a.LogicalSlots, a.Tensors, a.LowerBoundBytes, a.PeakBytes)
		m.Storages += a.Storages
		m.PeakLogicalSlots += a.LogicalSlots
		m.MaxLive += a.MaxLive
		var c1, c2, c3 uint64
		m.PeakBytes, c1 = bits.Add64(m.PeakBytes, a.PeakBytes, 0)
		m.ReservedBytes, c2 = bits.Add64(m.ReservedBytes, a.ReservedBytes, 0)
		m.LowerBoundBytes, c3 = bits.Add64(m.LowerBoundBytes, a.LowerBoundBytes, 0)
		if c1|c2|c3 != 0 {
			return failure.New(failure.AllocationOverflow, OpPlan, "total bytes over all arenas overflow uint64")
		}
		if a.Name == ir.ArenaActivations {
			activations = a.Tensors
		}
	}
	m.Ratios = ratios(m.PeakLogicalSlots, m.Tensors, m.LowerBoundBytes, m.PeakBytes)
	if activations > 0 {
		m.ActivationRetentionRatio = float64(retained) / float64(activations)
	}
	p.Metrics = m
	return nil
}

// sweeper finds, per arena, the most storages and the most storage bytes
// live at one position, with difference arrays it reuses across arenas.
type sweeper struct {
	count    []int32
	add, sub []uint64
}

func newSweeper(positions int) *sweeper {
	return &sweeper{make([]int32, positions+1), make([]uint64, positions+1), make([]uint64, positions+1)}
}

func (s *sweeper) sweep(l *Liveness, g *ir.Graph, roots []int32, arena string) (maxLive int, lowerBound uint64, err error) {
	clear(s.count)
	clear(s.add)
	clear(s.sub)
	overflowed := func() error {
		return failure.New(failure.AllocationOverflow, OpPlan,
			fmt.Sprintf("arena %s: bytes live at one position overflow uint64", arena), "arena", arena)
	}
	for _, r := range roots {
		b, d, size := l.StorageBirth[r], l.StorageDeath[r], g.StorageBytes[r]
		s.count[b]++
		s.count[d+1]--
		var c1, c2 uint64
		s.add[b], c1 = bits.Add64(s.add[b], size, 0)
		s.sub[d+1], c2 = bits.Add64(s.sub[d+1], size, 0)
		if c1|c2 != 0 {
			return 0, 0, overflowed()
		}
	}
	live, bytes := int32(0), uint64(0)
	for p := range len(s.count) - 1 {
		live += s.count[p]
		var carry uint64
		bytes, carry = bits.Add64(bytes-s.sub[p], s.add[p], 0) // sub[p] was added at earlier births
		if carry != 0 {
			return 0, 0, overflowed()
		}
		maxLive = max(maxLive, int(live))
		lowerBound = max(lowerBound, bytes)
	}
	return maxLive, lowerBound, nil
}

// ComputeHash returns tmmu_plan_hash (spec II.K) from the plan's own fields:
//
//	SHA-256(CBOR_CANONICAL(["tmmu_plan_v1", [ir_hash, mode, arena_config_hash,
//	    execution_order_hash, rank, world_size, shard_spec_hash,
//	    slot_assignment_table, logical_address_table]]))
//
// The tables are the outputs of the spec's operators, as canonical CBOR
// maps (keys in core deterministic order):
//
//	slot_assignment_table = [replay_token, {tensor_id: [arena, logical_slot], ...}]
//	logical_address_table = {[arena, logical_slot]: offset, ...}
//
// the first being AssignLogicalSlots' logical_slot_assignment with the
// replay token beside it (spec II.K), the second MapToVirtualAddresses'
// logical map. Together with the IR (sizes and view offsets) they fix every
// tensor's address. Hashes are 32-byte byte strings.
func (p *Plan) ComputeHash() ir.Hash {
	order := make([]int32, len(p.Tensors))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return canon.CompareKeys(p.Tensors[a].ID, p.Tensors[b].ID) })
	return p.hash(order)
}

// hash is ComputeHash with the tensors' canonical key order given.
func (p *Plan) hash(order []int32) ir.Hash {
	w := canon.NewSHA256()
	w.Array(2)
	w.Text(Format)
	w.Array(9)
	w.Bytes(p.IRHash[:])
	w.Text(string(p.Mode))
	w.Bytes(p.ArenaConfigHash[:])
	w.Bytes(p.ExecutionOrderHash[:])
	w.Uint(p.Rank)
	w.Uint(p.WorldSize)
	w.Bytes(p.ShardSpecHash[:])
	w.Array(2)
	w.Bytes(p.ReplayToken[:])
	w.Map(len(order))
	for _, i := range order {
		t := &p.Tensors[i]
		w.Text(t.ID)
		w.Array(2)
		w.Text(t.Arena)
		w.Int(int64(t.LogicalSlot))
	}
	slots := 0
	for i := range p.Arenas {
		slots += len(p.Arenas[i].Slots)
	}
	w.Map(slots)
	for _, name := range arenasCanonical {
		for i := range p.Arenas {
			if a := &p.Arenas[i]; a.Name == name {
				for _, s := range a.Slots {
					w.Array(2)
					w.Text(name)
					w.Int(int64(s.Slot))
					w.Uint(s.Offset)
				}
			}
		}
	}
	return w.Sum()
}

// arenasCanonical lists the arena names in canonical CBOR key order.
var arenasCanonical = func() []string {
	s := slices.Clone(ir.Arenas)
	slices.SortFunc(s, canon.CompareKeys)
	return s
}()

// offsetAlignment returns the largest power of two dividing off (1<<63 for
// 0).
func offsetAlignment(off uint64) uint64 {
	if off == 0 {
		return 1 << 63
	}
	return off & -off
}

// WithRank returns a copy of p for another rank of the same world whose
// rank-local graph and options are identical to p's (ranks of one pipeline
// stage, say): the layout does not depend on the rank, so only Rank and
// PlanHash change. The copy shares p's arenas and tensor map, which plans
// never modify. It fails when rank is not below the world size.
func (p *Plan) WithRank(rank uint64) (*Plan, error) {
	if rank >= p.WorldSize {
		return nil, failure.New(failure.InvalidOptions, OpPlan,
			fmt.Sprintf("rank %d is not below world size %d", rank, p.WorldSize), "rank", rank, "world_size", p.WorldSize)
	}
	c := *p
	c.Rank = rank
	c.PlanHash = c.ComputeHash()
	return &c, nil
}
