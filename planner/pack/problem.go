package pack

import (
	"cmp"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// Buffer is one rectangle to place: live over the half-open time interval
// [Start, End) and Size bytes tall, at an offset that is a multiple of
// Align. Times are any integers; only their order matters, except to the
// heuristics that weigh lifetimes by length.
type Buffer struct {
	Start, End int64
	Size       uint64
	// Align is a power of two; 0 means 1.
	Align uint64
}

func (b *Buffer) align() uint64 { return max(b.Align, 1) }

// Problem is an instance of offline dynamic storage allocation.
type Problem struct {
	Buffers []Buffer
	// Conflicts lists extra pairs of buffers that must never share a byte,
	// whatever their lifetimes (must_not_alias). Buffers whose lifetimes
	// intersect never share a byte anyway.
	Conflicts [][2]int32
	// Capacity bounds the peak; 0 means unbounded.
	Capacity uint64
}

// Errors. Pack and GreedySize return them wrapped with the details.
var (
	// ErrInvalid reports a malformed problem: an empty lifetime, a zero
	// size, an alignment that is not a power of two, or a conflict naming a
	// buffer that does not exist.
	ErrInvalid = errors.New("pack: invalid problem")
	// ErrOverflow reports offset arithmetic that would pass 2^64.
	ErrOverflow = errors.New("pack: offsets overflow uint64")
	// ErrCapacity reports that no placement was found within the capacity.
	ErrCapacity = errors.New("pack: no placement found within the capacity")
)

// Validate reports the first malformed buffer or conflict.
func (p *Problem) Validate() error {
	for i := range p.Buffers {
		b := &p.Buffers[i]
		switch {
		case b.End <= b.Start:
			return fmt.Errorf("%w: buffer %d lives over [%d,%d), which is empty", ErrInvalid, i, b.Start, b.End)
		case b.Size == 0:
			return fmt.Errorf("%w: buffer %d has size 0", ErrInvalid, i)
		case b.Align != 0 && b.Align&(b.Align-1) != 0:
			return fmt.Errorf("%w: buffer %d: alignment %d is not a power of two", ErrInvalid, i, b.Align)
		}
	}
	for _, c := range p.Conflicts {
		if c[0] < 0 || c[1] < 0 || int(c[0]) >= len(p.Buffers) || int(c[1]) >= len(p.Buffers) || c[0] == c[1] {
			return fmt.Errorf("%w: conflict %v names no pair of buffers", ErrInvalid, c)
		}
	}
	return nil
}

// overlap reports whether two lifetimes intersect.
func overlap(a, b *Buffer) bool { return a.Start < b.End && b.Start < a.End }

// LowerBound returns the most bytes live at one position: no placement has
// a smaller peak. ok is false when the sum overflows uint64.
func LowerBound(bufs []Buffer) (lb uint64, ok bool) {
	type ev struct {
		at   int64
		in   bool
		size uint64
	}
	evs := make([]ev, 0, 2*len(bufs))
	for _, b := range bufs {
		evs = append(evs, ev{b.Start, true, b.Size}, ev{b.End, false, b.Size})
	}
	// At one position, departures (End is exclusive) come before arrivals.
	slices.SortFunc(evs, func(x, y ev) int {
		if c := cmp.Compare(x.at, y.at); c != 0 {
			return c
		}
		if x.in == y.in {
			return 0
		}
		if !x.in {
			return -1
		}
		return 1
	})
	var live uint64
	for _, e := range evs {
		if !e.in {
			live -= e.size
			continue
		}
		var c uint64
		live, c = bits.Add64(live, e.size, 0)
		if c != 0 {
			return 0, false
		}
		lb = max(lb, live)
	}
	return lb, true
}

// Check is the obviously right checker: it compares every pair of buffers
// and reports the first two that share a byte while both are live (or that
// a conflict forbids), an offset that breaks its alignment, or a buffer
// that ends past 2^64. It returns the peak (the highest end) of a valid
// placement. It is quadratic and meant for tests and small instances.
func Check(p *Problem, offsets []uint64) (peak uint64, err error) {
	if len(offsets) != len(p.Buffers) {
		return 0, fmt.Errorf("pack: %d offsets for %d buffers", len(offsets), len(p.Buffers))
	}
	ends := make([]uint64, len(offsets))
	for i, b := range p.Buffers {
		e, c := bits.Add64(offsets[i], b.Size, 0)
		if c != 0 {
			return 0, fmt.Errorf("%w: buffer %d at %d ends past 2^64", ErrOverflow, i, offsets[i])
		}
		if offsets[i]%b.align() != 0 {
			return 0, fmt.Errorf("pack: buffer %d at offset %d breaks its alignment %d", i, offsets[i], b.align())
		}
		ends[i] = e
		peak = max(peak, e)
	}
	shares := func(i, j int) bool { return offsets[i] < ends[j] && offsets[j] < ends[i] }
	for i := range p.Buffers {
		for j := i + 1; j < len(p.Buffers); j++ {
			if overlap(&p.Buffers[i], &p.Buffers[j]) && shares(i, j) {
				return 0, fmt.Errorf("pack: buffers %d [%d,%d) and %d [%d,%d) are both live at position %d",
					i, offsets[i], ends[i], j, offsets[j], ends[j], max(p.Buffers[i].Start, p.Buffers[j].Start))
			}
		}
	}
	for _, c := range p.Conflicts {
		if i, j := int(c[0]), int(c[1]); shares(i, j) {
			return 0, fmt.Errorf("pack: conflicting buffers %d [%d,%d) and %d [%d,%d) share bytes", i, offsets[i], ends[i], j, offsets[j], ends[j])
		}
	}
	return peak, nil
}
