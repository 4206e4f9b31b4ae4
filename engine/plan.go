package engine

import (
	"fmt"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// ExecutableArenas returns base with the device's limits made planner
// constraints for every arena: alignment at least
// MinStorageBufferOffsetAlignment, page_size at least that alignment (so
// the plan's reserved bytes are what the device holds, with no rounding
// left to ApplyPlan), and region_bytes the largest region one kernel
// slot binds, so no tensor straddles two device buffers.
func ExecutableArenas(l Limits, base planner.ArenaConfig) planner.ArenaConfig {
	out := planner.ArenaConfig{}
	for _, name := range ir.Arenas {
		s := base[name]
		align := max(uint64(s.AlignmentBytes), planner.DefaultAlignment, l.MinStorageBufferOffsetAlignment)
		s.AlignmentBytes = planner.ByteSize(align)
		s.PageSize = max(s.PageSize, planner.ByteSize(align))
		r := regionBytes(l)
		r -= r % align
		if s.RegionBytes == 0 || uint64(s.RegionBytes) > r {
			s.RegionBytes = planner.ByteSize(r)
		}
		out[name] = s
	}
	return out
}

// checkExecutable refuses a plan whose arenas the device cannot bind:
// alignment below MinStorageBufferOffsetAlignment, or an arena larger
// than one region planned without region_bytes.
func checkExecutable(p *planner.Plan, l Limits) error {
	for _, a := range p.Arenas {
		cfg := p.ArenaConfig[a.Name]
		if uint64(cfg.AlignmentBytes) < l.MinStorageBufferOffsetAlignment {
			return failure.New(failure.AlignmentViolation, OpApplyPlan,
				fmt.Sprintf("arena %s is aligned to %d bytes, below the device's minStorageBufferOffsetAlignment %d (plan with engine.ExecutableArenas)",
					a.Name, cfg.AlignmentBytes, l.MinStorageBufferOffsetAlignment), "arena", a.Name)
		}
		if r := regionBytes(l); a.ReservedBytes > r && (cfg.RegionBytes == 0 || uint64(cfg.RegionBytes) > r) {
			return failure.New(failure.ArenaTooSmall, OpApplyPlan,
				fmt.Sprintf("arena %s reserves %d bytes, more than one device buffer (%d), and was planned without region_bytes ≤ %d",
					a.Name, a.ReservedBytes, r, r), "arena", a.Name)
		}
	}
	return nil
}
