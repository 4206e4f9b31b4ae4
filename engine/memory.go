package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/alloc"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// OpApplyPlan is the spec operator that maps a plan onto device memory.
const OpApplyPlan = "UML_OS.TMMU.ApplyPlan_v1"

// Memory is a plan applied to a device (ApplyPlan_v1): each arena, cut
// at the device's region size into chunks, is a block the region
// allocator (package alloc) placed in a device region.
type Memory struct {
	be      Backend
	alloc   *alloc.Allocator
	blocks  []alloc.Allocation
	regionB uint64
	arenas  map[string][]chunk
	regions []memRegion // the unshared reference's buffers (own)
	planned uint64
	// own, when set, is the unshared reference's placement: tensor i at
	// own[i] (every storage in a region of its own).
	own []location
}

// memRegion is a device region and its size.
type memRegion struct {
	id   int
	size uint64
}

// chunk is bytes [start, start+size) of an arena, at offset in region.
type chunk struct {
	arena       string
	start, size uint64
	region      int
	offset      uint64
}

// location is where a tensor's first byte lives.
type location struct {
	region int
	offset uint64
}

// device adapts a Backend to the allocator's Device.
type device struct{ be Backend }

func (d device) Limits() alloc.Limits { return d.be.Limits() }
func (d device) NewRegion(size uint64) (alloc.Region, error) {
	id, err := d.be.NewRegion(size)
	return alloc.Region{ID: uint64(id), Size: size}, err
}
func (d device) FreeRegion(r alloc.Region) { d.be.FreeRegion(int(r.ID)) }

// ApplyPlan places p's arenas on be. Each arena is cut at multiples of
// the device's region size R (the planner's region_bytes keeps every
// tensor inside one piece); the pieces are packed first-fit by
// decreasing size into bins of at most R bytes, and for each bin the
// region allocator reserves a region exactly as large as its pieces,
// which then fill it. So the device bytes are the plan's arena bytes,
// whatever the number of regions; a piece is rounded up only when an
// arena's reserved bytes are not a multiple of the device's offset
// alignment (ExecutableArenas plans them so).
func ApplyPlan(be Backend, p *planner.Plan) (*Memory, error) {
	lim := be.Limits()
	R := regionBytes(lim)
	align := max(lim.MinStorageBufferOffsetAlignment, 4)
	if R < align {
		return nil, failure.New(failure.DeviceError, OpApplyPlan, fmt.Sprintf("the device's buffers are too small (%d bytes)", R))
	}
	m := &Memory{be: be, regionB: R, arenas: map[string][]chunk{}}
	var pieces []chunk
	for _, a := range p.Arenas {
		m.planned += a.ReservedBytes
		for start := uint64(0); start < a.ReservedBytes; start += R {
			n := (min(R, a.ReservedBytes-start) + align - 1) / align * align
			pieces = append(pieces, chunk{arena: a.Name, start: start, size: n})
		}
	}
	// First fit decreasing; ties keep arena order (deterministic).
	slices.SortStableFunc(pieces, func(x, y chunk) int { return cmp.Compare(y.size, x.size) })
	var fill []uint64
	bins := make([][]int, 0)
	for i, c := range pieces {
		b := slices.IndexFunc(fill, func(used uint64) bool { return used+c.size <= R })
		if b < 0 {
			b = len(fill)
			fill, bins = append(fill, 0), append(bins, nil)
		}
		fill[b] += c.size
		bins[b] = append(bins[b], i)
	}
	cfg := alloc.DefaultConfig()
	cfg.RegionSize = min(R, max(slices.Max(append(fill, align)), align))
	cfg.FallbackSizes = nil
	cfg.MaxRegions = max(len(fill), 1)
	cfg.Alignment = align
	cfg.RegionStrategy, cfg.BlockStrategy = alloc.FillFirst, alloc.FirstFit
	al, err := alloc.New(device{be}, cfg)
	if err != nil {
		return nil, failure.New(failure.DeviceError, OpApplyPlan, err.Error())
	}
	m.alloc = al
	for b, size := range fill {
		// The bins before b are full, so b's pieces land in its region.
		if _, err := al.Reserve(size); err != nil {
			m.Release()
			return nil, failure.New(failure.DeviceError, OpApplyPlan,
				fmt.Sprintf("region %d of %d bytes for arena %s: %v", b+1, size, pieces[bins[b][0]].arena, err), "arena", pieces[bins[b][0]].arena)
		}
		for _, i := range bins[b] {
			c := pieces[i]
			blk, err := al.Alloc(c.size)
			if err != nil {
				m.Release()
				return nil, failure.New(failure.DeviceError, OpApplyPlan,
					fmt.Sprintf("arena %s: %d bytes at %d: %v", c.arena, c.size, c.start, err), "arena", c.arena)
			}
			m.blocks = append(m.blocks, blk)
			c.region, c.offset = int(blk.RegionID), blk.Offset
			m.arenas[c.arena] = append(m.arenas[c.arena], c)
		}
	}
	return m, nil
}

// applyUnshared gives every storage of g a device region of its own, as
// an engine without a planner would (one buffer per tensor): the
// reference a plan is compared with, in bytes and in speed.
func applyUnshared(be Backend, g *ir.Graph) (*Memory, error) {
	m := &Memory{be: be, regionB: regionBytes(be.Limits()), arenas: map[string][]chunk{}, own: make([]location, len(g.Tensors))}
	region := map[int32]int{}
	for i := range g.Tensors {
		if g.Root[i] != int32(i) {
			continue
		}
		size := max((g.StorageBytes[i]+3)&^3, 4)
		id, err := be.NewRegion(size)
		if err != nil {
			m.Release()
			return nil, failure.New(failure.DeviceError, OpApplyPlan,
				fmt.Sprintf("unshared reference: a buffer of %d bytes for %q: %v", size, g.Tensors[i].ID, err), "tensor", g.Tensors[i].ID)
		}
		m.planned += g.StorageBytes[i]
		m.regions = append(m.regions, memRegion{id: id, size: size})
		region[int32(i)] = id
	}
	for i := range g.Tensors {
		m.own[i] = location{region: region[g.Root[i]], offset: g.RootOffset[i]}
	}
	return m, nil
}

// MemoryStats are the bytes of a plan applied to a device.
type MemoryStats struct {
	// Regions is the number of device regions (buffers).
	Regions int
	// PlannedBytes is the plan's reserved arena bytes (for the unshared
	// reference: the storages' bytes).
	PlannedBytes uint64
	// ReservedBytes is what the regions hold on the device.
	ReservedBytes uint64
	// AllocatedBytes is what the arenas' pieces occupy in them, rounded
	// to the device's offset alignment: PlannedBytes unless an arena's
	// reserved bytes are not a multiple of it.
	AllocatedBytes uint64
	// Unshared is set for the unshared reference: one buffer per
	// storage, each at least 4 bytes and a multiple of 4.
	Unshared bool
}

// String says what the plan reserves and what the device holds, and why
// they differ when they do.
func (st MemoryStats) String() string {
	regions := "1 region"
	if st.Regions != 1 {
		regions = fmt.Sprintf("%d regions", st.Regions)
	}
	what := "plan reserves"
	if st.Unshared {
		what = "unshared reference: the storages take"
	}
	s := fmt.Sprintf("%s %s; device holds %s in %s", what, planner.FormatBytes(st.PlannedBytes), planner.FormatBytes(st.ReservedBytes), regions)
	switch {
	case st.ReservedBytes == st.PlannedBytes && st.Unshared:
		return s + ", one buffer per storage"
	case st.ReservedBytes == st.PlannedBytes:
		return s + ", exactly the plan's bytes"
	case st.Unshared:
		return s + fmt.Sprintf(", %s more: one buffer per storage, each rounded up to a multiple of 4 bytes (at least 4)",
			planner.FormatBytes(st.ReservedBytes-st.PlannedBytes))
	case st.AllocatedBytes > st.PlannedBytes:
		return s + fmt.Sprintf(", %s more: arenas whose reserved bytes are not a multiple of the device's offset alignment are rounded up (plan with engine.ExecutableArenas to include it)",
			planner.FormatBytes(st.AllocatedBytes-st.PlannedBytes))
	}
	return s
}

// Stats reports the device memory the plan holds.
func (m *Memory) Stats() MemoryStats {
	st := MemoryStats{PlannedBytes: m.planned, Unshared: m.own != nil && m.alloc == nil}
	if m.alloc != nil {
		as := m.alloc.Stats()
		st.Regions, st.ReservedBytes, st.AllocatedBytes = as.Regions, as.ReservedBytes, as.AllocatedBytes
	}
	for _, r := range m.regions {
		st.Regions++
		st.ReservedBytes += r.size
		st.AllocatedBytes += r.size
	}
	return st
}

// Release frees the blocks and returns the regions to the device.
func (m *Memory) Release() error {
	var errs []error
	if m.alloc != nil {
		for _, b := range m.blocks {
			errs = append(errs, m.alloc.Free(b))
		}
		m.blocks = nil
		errs = append(errs, m.alloc.Close())
	}
	for _, r := range m.regions {
		errs = append(errs, m.be.FreeRegion(r.id))
	}
	m.regions = nil
	if err := errors.Join(errs...); err != nil && !errors.Is(err, alloc.ErrClosed) {
		return err
	}
	return nil
}

// locate maps every tensor of g to its device location.
func (m *Memory) locate(g *ir.Graph, p *planner.Plan) ([]location, error) {
	if m.own != nil {
		return m.own, nil
	}
	loc := make([]location, len(g.Tensors))
	for i := range g.Tensors {
		id := g.Tensors[i].ID
		k, ok := slices.BinarySearchFunc(p.Tensors, id, func(t planner.TensorPlacement, id string) int { return strings.Compare(t.ID, id) })
		if !ok {
			return nil, failure.New(failure.PlanMismatch, OpApplyPlan, fmt.Sprintf("tensor %q has no placement", id), "tensor", id)
		}
		t := &p.Tensors[k]
		if t.Offset%4 != 0 {
			return nil, failure.New(failure.AlignmentViolation, OpApplyPlan,
				fmt.Sprintf("tensor %q at offset %d is not 4-byte aligned", id, t.Offset), "tensor", id)
		}
		c, ok := m.chunkOf(t.Arena, t.Offset, max(t.Size, 1))
		if !ok {
			return nil, failure.New(failure.ArenaTooSmall, OpApplyPlan,
				fmt.Sprintf("tensor %q [%d, %d) of arena %s does not lie inside one device region of %d bytes (plan with the device's region size)",
					id, t.Offset, t.Offset+t.Size, t.Arena, m.regionB), "tensor", id, "arena", t.Arena)
		}
		loc[i] = location{region: c.region, offset: c.offset + t.Offset - c.start}
	}
	return loc, nil
}

func (m *Memory) chunkOf(arena string, off, size uint64) (chunk, bool) {
	for _, c := range m.arenas[arena] {
		if off >= c.start && off+size <= c.start+c.size {
			return c, true
		}
	}
	return chunk{}, false
}
