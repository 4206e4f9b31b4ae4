// Package alloc is tmmu's device memory allocator. It reserves a few large
// regions of device memory and hands out many small, aligned blocks carved
// from them, so that thousands of live tensors cost only a handful of
// device allocations. It is pure Go and knows nothing about GPUs: the
// memory sits behind the small Device interface, which a WebGPU backend
// implements with one storage buffer per region.
//
// # Why sub-allocate
//
// Asking the device for memory is slow, and the number of things a kernel
// can bind, or a firmware table can map, is small. An allocator that made
// one device allocation per tensor would pay for every tensor twice: in
// latency and in handles. This package instead treats each region as a
// private heap. A tensor's home is a (region, offset, size) triple; kernels
// bind the region's buffer at that offset. Work has to be split so that no
// tensor straddles a region boundary: the allocator refuses any request
// larger than a region rather than scatter it.
//
// # Model
//
// A Device reports its Limits (WebGPU names: MaxBufferSize,
// MaxStorageBufferBindingSize, MinStorageBufferOffsetAlignment), creates
// regions on request and takes them back. A Region is only an ID chosen by
// the device and a size; the device keeps whatever the ID stands for (a
// buffer, a physical address, a table slot).
//
// An Allocator owns the regions it acquired. Alloc returns an Allocation:
// the region's ID, the byte offset within it, the size (the request rounded
// up to the alignment) and an allocation ID unique for the allocator's
// life. Free takes the Allocation back. Stats reports the bytes reserved
// from the device (the sum of region sizes), the bytes allocated, the
// largest free block, the region count against the budget, and the same
// per region.
//
// # Regions
//
// Regions are acquired lazily, when an allocation needs one, never up
// front. Config.RegionSize is the preferred size; when the device refuses
// it, Config.FallbackSizes are tried in order, each smaller than the one
// before. Every new region starts over from the preferred size, so a
// momentary shortage does not shrink later regions. New clamps every size
// to min(MaxBufferSize, MaxStorageBufferBindingSize), rounded down to the
// alignment, since a region must be bindable whole; sizes that collapse
// onto the same value are tried once. A size smaller than the request in
// hand is skipped: such a region could not serve it.
//
// Regions are kept for the allocator's whole life and returned to the
// device only by Close. The pool of regions locks, for good, when either
//
//   - it holds Config.MaxRegions regions (the handle budget), or
//   - the device refused every configured size in one attempt.
//
// After that every allocation must fit in the regions already held. If an
// attempt skipped sizes too small for its request, a refusal of the larger
// ones does not lock the pool: a later, smaller request may still get a
// small region.
//
// # Blocks
//
// A region is tiled by blocks, each free or allocated, kept in offset
// order: the first starts at 0, each ends where the next begins, the last
// ends at the region's size. A new region is one free block. Alloc picks a
// free block at least as large as the request, allocates its first part
// and leaves the rest as a new free block right after it (a split). Free
// marks a block free and merges it with a free predecessor, a free
// successor, or both (coalescing), so two free blocks are never adjacent
// and free space is always as contiguous as the live blocks allow. Each
// region also keeps the sorted multiset of its free block sizes, which
// answers "can this region take n bytes?" from its last element without a
// scan.
//
// # Strategies
//
// Config.RegionStrategy orders the regions an allocation tries:
//
//   - LoadBalancing (the default) grows the pool on every allocation while
//     the pool is open, then tries regions by most free bytes first. A
//     fresh region is empty, so it usually takes the allocation; once the
//     pool is locked, allocations go to the emptiest region. This keeps
//     free space in large pieces at the price of spending the handle
//     budget (and reserving device memory) early.
//   - FillFirst tries regions by fewest free bytes first, among those with
//     a free block big enough, and grows the pool only when none has one.
//     Allocations pack into as few regions as possible: the choice when
//     handles are scarce.
//
// Ties go to the region acquired first. Config.BlockStrategy chooses the
// block within a region: FirstFit (the default) takes the lowest-offset
// free block that fits, which is quick and packs allocations toward the
// start of the region; BestFit takes the smallest free block that fits (the
// lowest-offset one among equals), which leaves the smallest remainders and
// saves large blocks for large requests.
//
// # Region locks
//
// LockRegion stops one region from taking new blocks, without touching the
// blocks it holds: they can still be freed, and they still coalesce.
// UnlockRegion reverses it. A backend can use this to drain a region, or to
// keep a region untouched while it is mapped or being copied. Locked
// regions are left out of the out-of-memory error's free space figures.
//
// # Alignment
//
// Every block offset is a multiple of the alignment, and every allocation
// size is the request rounded up to it. The alignment is Config.Alignment
// or the device's MinStorageBufferOffsetAlignment, whichever is larger
// (both are powers of two, so the larger is a multiple of the smaller).
// Offsets stay aligned because a region starts at offset 0, every split
// happens at an aligned size from an aligned start, and a merge keeps the
// lower start. A region's size need not be a multiple of the alignment; a
// tail shorter than one unit is simply never handed out whole.
//
// # Errors
//
// Alloc fails with
//
//   - ErrZeroSize for a request of zero bytes;
//   - ErrTooLarge for a request larger than MaxAllocation (the largest
//     region size rounded down to the alignment): split the work;
//   - an *OutOfMemoryError, which matches ErrOutOfMemory under errors.Is,
//     when nothing held can take the request and the pool cannot grow. It
//     carries the requested and aligned sizes, the regions held against
//     the budget, how many are locked, the largest free block, the free
//     bytes, whether the pool is locked and why, and the device's refusal,
//     which it unwraps to;
//   - ErrClosed after Close.
//
// Free fails with an error wrapping ErrNotAllocated, and changes nothing,
// for anything that is not a live allocation exactly as Alloc returned it:
// an unknown region, an offset with no live block, a size that does not
// match, or an allocation ID that does not match. The last case catches a
// stale copy of a freed allocation whose place has been handed out again,
// which offset and size alone could not tell from the new owner. No input
// makes Free panic.
//
// # Concurrency
//
// An Allocator is safe for concurrent use. One mutex guards all of its
// state, including the calls into the Device made while growing the pool
// and by Close; a Device must therefore not call back into the Allocator.
//
// # Debugging
//
// Set TMMU_ALLOC_DEBUG=1, or pass Config.Logger, to log with log/slog at
// LevelDebug: region acquisitions (size and fallback level) and refusals,
// the pool locking and why, every allocation and block split, every free
// and coalesce (which sides merged, and the merged block), out-of-memory
// failures with the figures of the error, region locks, and the regions
// freed by Close. A Logger given in Config takes precedence over the
// environment; its handler must enable LevelDebug for the events to show.
//
// # Example
//
// A device hands out regions; the allocator carves them:
//
//	cfg := alloc.DefaultConfig() // 128 MiB regions, then 64 and 32 MiB
//	cfg.MaxRegions = 8
//	cfg.RegionStrategy = alloc.FillFirst
//	a, err := alloc.New(dev, cfg)
//	if err != nil {
//		return err
//	}
//	defer a.Close()
//
//	w, err := a.Alloc(weightBytes)
//	switch {
//	case errors.Is(err, alloc.ErrTooLarge):
//		// split the tensor into pieces of at most a.MaxAllocation() bytes
//	case errors.Is(err, alloc.ErrOutOfMemory):
//		var oom *alloc.OutOfMemoryError
//		errors.As(err, &oom) // oom.LargestFree, oom.Regions, ...
//		return err
//	case err != nil:
//		return err
//	}
//	bindStorage(buffers[w.RegionID], w.Offset, w.Size)
//	...
//	if err := a.Free(w); err != nil {
//		return err // a double free, say
//	}
//
// The runnable Example in this package uses a small in-memory device.
package alloc
