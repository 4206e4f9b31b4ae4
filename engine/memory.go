package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// OpApplyPlan is the spec operator that maps a plan onto device memory.
const OpApplyPlan = "UML_OS.TMMU.ApplyPlan_v1"

// Memory is a plan applied to a device: each arena is cut at region
// boundaries into chunks, and each chunk lives in a block of a device
// region.
type Memory struct {
	be      Backend
	regionB uint64
	arenas  map[string][]chunk
	release []func() error
	// Bytes is the device memory allocated for the plan's arenas.
	Bytes uint64
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

// ApplyPlan allocates p's arenas on be (ApplyPlan_v1). An arena larger
// than one region is split at multiples of the region size; locate
// refuses a tensor that straddles such a boundary.
func ApplyPlan(be Backend, p *planner.Plan) (*Memory, error) {
	R := be.Limits().RegionBytes()
	if R < 4 {
		return nil, failure.New(failure.DeviceError, OpApplyPlan, fmt.Sprintf("the device's buffers are too small (%d bytes)", R))
	}
	m := &Memory{be: be, regionB: R, arenas: map[string][]chunk{}}
	for _, a := range p.Arenas {
		size := (a.ReservedBytes + 3) &^ 3
		for start := uint64(0); start < size; start += R {
			n := min(R, size-start)
			id, err := be.NewRegion(n)
			if err != nil {
				m.Release()
				return nil, failure.New(failure.DeviceError, OpApplyPlan,
					fmt.Sprintf("arena %s: %d bytes at %d: %v", a.Name, n, start, err), "arena", a.Name)
			}
			m.release = append(m.release, func() error { return be.FreeRegion(id) })
			m.arenas[a.Name] = append(m.arenas[a.Name], chunk{start: start, size: n, region: id})
			m.Bytes += n
		}
	}
	return m, nil
}

// Release frees the device memory.
func (m *Memory) Release() error {
	var errs []error
	for _, f := range m.release {
		errs = append(errs, f())
	}
	m.release = nil
	return errors.Join(errs...)
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
