package alloc

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrOutOfMemory: no region accepting blocks has a free block big
	// enough and the pool cannot grow. The error returned is an
	// *OutOfMemoryError; errors.Is(err, ErrOutOfMemory) matches it.
	ErrOutOfMemory = errors.New("alloc: out of memory")
	// ErrTooLarge: the request is larger than the largest region the
	// allocator may hold. An allocation never straddles two regions, so
	// the caller has to split the work.
	ErrTooLarge = errors.New("alloc: allocation larger than a region")
	// ErrZeroSize: Alloc was asked for zero bytes.
	ErrZeroSize = errors.New("alloc: zero-size allocation")
	// ErrNotAllocated: Free was given something that is not a live
	// allocation of this allocator (unknown region, no block there,
	// already freed, or a stale copy of a reused block).
	ErrNotAllocated = errors.New("alloc: not a live allocation")
	// ErrUnknownRegion: LockRegion or UnlockRegion named a region the
	// allocator does not hold.
	ErrUnknownRegion = errors.New("alloc: unknown region")
	// ErrClosed: the allocator has been closed.
	ErrClosed = errors.New("alloc: allocator closed")
	// ErrLiveAllocations: Close found allocations that were never freed.
	// The regions are returned to the device all the same.
	ErrLiveAllocations = errors.New("alloc: live allocations at close")
)

// OutOfMemoryError is the error Alloc returns when it cannot place a
// request. It matches ErrOutOfMemory under errors.Is and unwraps to the
// device's refusal, if the last attempt to grow the pool got one.
type OutOfMemoryError struct {
	// Requested is the size asked for; Aligned is that rounded up to the
	// alignment, which is what the allocation needed.
	Requested, Aligned uint64
	// Regions is the number of regions held; MaxRegions the budget.
	Regions, MaxRegions int
	// LockedRegions counts held regions that take no new blocks.
	LockedRegions int
	// LargestFree is the largest free block in a region that takes new
	// blocks; FreeBytes all free bytes in those regions.
	LargestFree, FreeBytes uint64
	// PoolLocked reports that the allocator will never acquire another
	// region; Reason says why (or why this attempt to grow failed).
	PoolLocked bool
	Reason     string
	// DeviceErr is the device's refusal(s) from the last attempt to grow,
	// or nil.
	DeviceErr error
}

func (e *OutOfMemoryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "alloc: out of memory: requested %d bytes (%d aligned); %d/%d regions in use",
		e.Requested, e.Aligned, e.Regions, e.MaxRegions)
	if e.LockedRegions > 0 {
		fmt.Fprintf(&b, " (%d locked)", e.LockedRegions)
	}
	fmt.Fprintf(&b, "; largest free block %d bytes, %d bytes free in all", e.LargestFree, e.FreeBytes)
	if e.Reason != "" {
		fmt.Fprintf(&b, "; %s", e.Reason)
	}
	if e.DeviceErr != nil {
		fmt.Fprintf(&b, ": %v", e.DeviceErr)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrOutOfMemory) true.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// Unwrap returns the device's refusal, if any.
func (e *OutOfMemoryError) Unwrap() error { return e.DeviceErr }
