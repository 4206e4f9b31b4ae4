package engine

import (
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
// at the device's region size into chunks, is a block that the region
// allocator (package alloc) carved from a device region.
type Memory struct {
	alloc   *alloc.Allocator
	regionB uint64
	arenas  map[string][]chunk
	blocks  []alloc.Allocation
}

// chunk is bytes [start, start+size) of an arena, at offset in region.
type chunk struct {
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

// ApplyPlan places p's arenas on be. Regions are sized to hold the whole
// plan when the device allows (one region, filled first, best fit), so
// the device bytes reserved are the plan's arena bytes rounded to the
// alignment; larger plans take several regions of the device's maximum
// size, and an arena larger than one region is cut at multiples of the
// region size (the planner's region_bytes keeps every tensor inside one).
func ApplyPlan(be Backend, p *planner.Plan) (*Memory, error) {
	lim := be.Limits()
	R := regionBytes(lim)
	align := max(lim.MinStorageBufferOffsetAlignment, 4)
	if R < align {
		return nil, failure.New(failure.DeviceError, OpApplyPlan, fmt.Sprintf("the device's buffers are too small (%d bytes)", R))
	}
	var sizes []uint64
	var total uint64
	for _, a := range p.Arenas {
		for start := uint64(0); start < a.ReservedBytes; start += R {
			n := (min(R, a.ReservedBytes-start) + align - 1) / align * align
			sizes = append(sizes, n)
			total += n
		}
	}
	cfg := alloc.DefaultConfig()
	cfg.RegionSize = min(R, max(total, align))
	cfg.FallbackSizes = nil
	cfg.MaxRegions = len(sizes) + 1
	cfg.Alignment = align
	cfg.RegionStrategy, cfg.BlockStrategy = alloc.FillFirst, alloc.BestFit
	al, err := alloc.New(device{be}, cfg)
	if err != nil {
		return nil, failure.New(failure.DeviceError, OpApplyPlan, err.Error())
	}
	m := &Memory{alloc: al, regionB: R, arenas: map[string][]chunk{}}
	for _, a := range p.Arenas {
		for start := uint64(0); start < a.ReservedBytes; start += R {
			n := min(R, a.ReservedBytes-start)
			b, err := al.Alloc(n)
			if err != nil {
				m.Release()
				return nil, failure.New(failure.DeviceError, OpApplyPlan,
					fmt.Sprintf("arena %s: %d bytes at %d: %v", a.Name, n, start, err), "arena", a.Name)
			}
			m.blocks = append(m.blocks, b)
			m.arenas[a.Name] = append(m.arenas[a.Name], chunk{start: start, size: n, region: int(b.RegionID), offset: b.Offset})
		}
	}
	return m, nil
}

// Stats reports the device memory: bytes reserved from the device
// (regions) and bytes allocated to the plan's arenas (blocks).
func (m *Memory) Stats() alloc.Stats { return m.alloc.Stats() }

// Release frees the blocks and returns the regions to the device.
func (m *Memory) Release() error {
	var errs []error
	for _, b := range m.blocks {
		errs = append(errs, m.alloc.Free(b))
	}
	m.blocks = nil
	errs = append(errs, m.alloc.Close())
	if err := errors.Join(errs...); err != nil && !errors.Is(err, alloc.ErrClosed) {
		return err
	}
	return nil
}

// locate maps every tensor of g to its device location.
func (m *Memory) locate(g *ir.Graph, p *planner.Plan) ([]location, error) {
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
