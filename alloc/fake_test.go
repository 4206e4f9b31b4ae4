package alloc

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// fakeDevice is an in-memory Device. It hands out regions while its
// capacity lasts, refuses the sizes in refuse outright, and records every
// call.
type fakeDevice struct {
	mu       sync.Mutex
	limits   Limits
	capacity uint64 // bytes it will hand out in all; 0 means unlimited
	used     uint64
	refuse   map[uint64]bool
	// wrongSize makes NewRegion return regions one alignment unit short.
	wrongSize bool
	nextID    uint64
	live      map[uint64]Region
	asked     []uint64 // sizes asked for, in order
	freed     []Region
}

var errDeviceFull = errors.New("fake device: out of memory")

func newFakeDevice() *fakeDevice {
	return &fakeDevice{
		limits: Limits{
			MaxBufferSize:                   1 << 30,
			MaxStorageBufferBindingSize:     1 << 30,
			MinStorageBufferOffsetAlignment: 256,
		},
		refuse: map[uint64]bool{},
		nextID: 100, // IDs are not indices
		live:   map[uint64]Region{},
	}
}

func (d *fakeDevice) Limits() Limits { return d.limits }

func (d *fakeDevice) NewRegion(size uint64) (Region, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, size)
	if d.refuse[size] {
		return Region{}, fmt.Errorf("fake device: refusing %d bytes: %w", size, errDeviceFull)
	}
	if d.capacity != 0 && d.used+size > d.capacity {
		return Region{}, fmt.Errorf("fake device: %d bytes asked, %d of %d used: %w", size, d.used, d.capacity, errDeviceFull)
	}
	d.used += size
	d.nextID += 7
	r := Region{ID: d.nextID, Size: size}
	if d.wrongSize {
		r.Size -= d.limits.MinStorageBufferOffsetAlignment
	}
	d.live[r.ID] = r
	return r, nil
}

func (d *fakeDevice) FreeRegion(r Region) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.live[r.ID]; !ok {
		panic(fmt.Sprintf("fake device: free of unknown region %d", r.ID))
	}
	delete(d.live, r.ID)
	if d.wrongSize {
		r.Size += d.limits.MinStorageBufferOffsetAlignment
	}
	d.used -= r.Size
	d.freed = append(d.freed, r)
}

func (d *fakeDevice) askedSizes() []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.asked)
}
