package alloc

// Limits are the device limits the allocator must respect. The field names
// are WebGPU's (GPUSupportedLimits), so a WebGPU device can fill them in
// directly.
type Limits struct {
	// MaxBufferSize is the largest buffer the device will create.
	MaxBufferSize uint64
	// MaxStorageBufferBindingSize is the largest range one storage buffer
	// binding may cover. A region is bound as a whole, so it caps the
	// region size as well.
	MaxStorageBufferBindingSize uint64
	// MinStorageBufferOffsetAlignment is the alignment every binding offset
	// must have: a power of two. Block offsets are aligned to at least
	// this.
	MinStorageBufferOffsetAlignment uint64
}

// MaxRegionSize is the largest region the limits permit:
// min(MaxBufferSize, MaxStorageBufferBindingSize).
func (l Limits) MaxRegionSize() uint64 {
	return min(l.MaxBufferSize, l.MaxStorageBufferBindingSize)
}

// Region is a handle to one contiguous piece of device memory (for WebGPU,
// one buffer). ID is chosen by the Device and must be unique among the
// regions the device has handed out and not yet taken back (Alloc fails on
// a duplicate); the allocator uses it verbatim in every Allocation carved
// from the region.
type Region struct {
	ID   uint64
	Size uint64
}

// Device is the memory the allocator carves up. The allocator calls it with
// its own lock held, so an implementation must not call back into the
// Allocator.
type Device interface {
	// Limits reports the device's limits. It is called once, by New.
	Limits() Limits
	// NewRegion reserves size bytes of device memory. An error means the
	// device refuses that size now (out of memory, over a quota): the
	// allocator then tries its next, smaller, fallback size. A region whose
	// Size is not the size asked for is handed back and counts as a
	// refusal.
	NewRegion(size uint64) (Region, error)
	// FreeRegion returns a region to the device. The allocator holds
	// regions for its whole life and calls this only from Close (and for a
	// region it cannot use, see NewRegion).
	FreeRegion(Region)
}
