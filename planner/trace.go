package planner

import (
	"bufio"
	"encoding/json"
	"io"

	"github.com/tmmu/tmmu/ir"
)

// Trace records (spec §7). A trace is one allocation_header, one tensor
// record per tensor in id order, and one summary, written as JSON lines. It
// is a pure function of the plan, so equal plans give equal traces.
type (
	// TraceHeader opens a trace.
	TraceHeader struct {
		Record            string      `json:"record"` // "allocation_header"
		IRHash            ir.Hash     `json:"ir_hash"`
		Mode              Mode        `json:"mode"`
		Strategy          Strategy    `json:"strategy"`
		ReplayTokenPrefix string      `json:"replay_token_prefix"` // first 8 bytes, hex
		Rank              uint64      `json:"rank"`
		WorldSize         uint64      `json:"world_size"`
		Arenas            ArenaConfig `json:"arenas"`
	}
	// TraceTensor records one tensor's placement.
	TraceTensor struct {
		Record         string   `json:"record"` // "tensor"
		TensorID       string   `json:"tensor_id"`
		Arena          string   `json:"arena"`
		LogicalSlot    int32    `json:"logical_slot"`
		LogicalAddress uint64   `json:"logical_address"` // byte offset in the arena
		Size           uint64   `json:"size"`
		LiveRange      [2]int32 `json:"live_range"`
		Bytes          uint64   `json:"bytes"` // bytes of the slot backing the tensor
	}
	// TraceSummary closes a trace.
	TraceSummary struct {
		Record            string            `json:"record"` // "summary"
		PlanHash          ir.Hash           `json:"plan_hash"`
		PeakBytesPerArena map[string]uint64 `json:"peak_bytes_per_arena"`
		TotalLogicalSlots int               `json:"total_logical_slots"`
		ReuseRatio        float64           `json:"reuse_ratio"`
		FragmentationPct  float64           `json:"fragmentation_pct"`
	}
)

// WriteTrace writes the plan's trace as JSON lines.
func (p *Plan) WriteTrace(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(TraceHeader{
		Record: "allocation_header", IRHash: p.IRHash, Mode: p.Mode, Strategy: p.Strategy,
		ReplayTokenPrefix: p.ReplayToken.String()[:16], Rank: p.Rank, WorldSize: p.WorldSize, Arenas: p.ArenaConfig,
	}); err != nil {
		return err
	}
	slotBytes := map[string][]Slot{}
	peaks := map[string]uint64{}
	for _, a := range p.Arenas {
		slotBytes[a.Name] = a.Slots
		peaks[a.Name] = a.PeakBytes
	}
	for i := range p.Tensors {
		t := &p.Tensors[i]
		rec := TraceTensor{
			Record: "tensor", TensorID: t.ID, Arena: t.Arena, LogicalSlot: t.LogicalSlot,
			LogicalAddress: t.Offset, Size: t.Size, LiveRange: t.Lifetime,
		}
		if s := slotBytes[t.Arena]; t.LogicalSlot >= 0 && int(t.LogicalSlot) < len(s) {
			rec.Bytes = s[t.LogicalSlot].Size
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	if err := enc.Encode(TraceSummary{
		Record: "summary", PlanHash: p.PlanHash, PeakBytesPerArena: peaks,
		TotalLogicalSlots: p.Metrics.PeakLogicalSlots, ReuseRatio: p.Metrics.MemoryReuseRatio,
		FragmentationPct: 100 * p.Metrics.InternalFragmentationRatio,
	}); err != nil {
		return err
	}
	return bw.Flush()
}
