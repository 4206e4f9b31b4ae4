package alloc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"slices"
	"sync"
)

// DebugEnv is the environment variable that turns on debug logging to
// standard error when Config.Logger is nil: set it to "1".
const DebugEnv = "TMMU_ALLOC_DEBUG"

// Allocation is a live block: Size bytes at Offset in the region with ID
// RegionID. Offset is a multiple of the allocator's alignment and Size is
// the request rounded up to it. ID is unique over the allocator's life;
// Free checks it, so a stale copy of a freed allocation cannot free a block
// that was handed out again at the same place.
type Allocation struct {
	RegionID uint64
	Offset   uint64
	Size     uint64
	ID       uint64
}

// End is the offset one past the allocation's last byte.
func (a Allocation) End() uint64 { return a.Offset + a.Size }

func (a Allocation) String() string {
	return fmt.Sprintf("region %d [%d, %d) #%d", a.RegionID, a.Offset, a.End(), a.ID)
}

// Allocator carves allocations out of regions it acquires from a Device.
// It is safe for concurrent use.
type Allocator struct {
	dev      Device
	cfg      Config
	align    uint64
	sizes    []uint64 // region sizes to try, largest (preferred) first
	log      *slog.Logger
	strategy RegionStrategy
	blocks   BlockStrategy

	mu         sync.Mutex
	regions    []*region // in acquisition order
	byID       map[uint64]*region
	poolLocked bool
	lockReason string
	refusal    error // the device's refusals during the current Alloc
	seq        int
	nextID     uint64
	allocated  uint64
	reserved   uint64
	live       int
	closed     bool
}

// New returns an allocator over dev. It validates cfg, reads dev's limits,
// raises the alignment to the device's MinStorageBufferOffsetAlignment if
// that is larger, and clamps region sizes to the largest region the limits
// permit (rounded down to the alignment), dropping sizes that become
// duplicates. It acquires no region yet.
func New(dev Device, cfg Config) (*Allocator, error) {
	if dev == nil {
		return nil, errors.New("alloc: nil Device")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lim := dev.Limits()
	if lim.MaxBufferSize == 0 || lim.MaxStorageBufferBindingSize == 0 {
		return nil, fmt.Errorf("alloc: device limits MaxBufferSize %d and MaxStorageBufferBindingSize %d must both be > 0",
			lim.MaxBufferSize, lim.MaxStorageBufferBindingSize)
	}
	if m := lim.MinStorageBufferOffsetAlignment; m == 0 || bits.OnesCount64(m) != 1 {
		return nil, fmt.Errorf("alloc: device limit MinStorageBufferOffsetAlignment %d is not a power of two", m)
	}
	a := &Allocator{
		dev:      dev,
		align:    max(cfg.Alignment, lim.MinStorageBufferOffsetAlignment),
		log:      cfg.Logger,
		strategy: cfg.RegionStrategy,
		blocks:   cfg.BlockStrategy,
		byID:     make(map[uint64]*region),
	}
	cfg.FallbackSizes = slices.Clone(cfg.FallbackSizes)
	a.cfg = cfg
	if a.log == nil && os.Getenv(DebugEnv) == "1" {
		a.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if a.log != nil {
		a.log = a.log.With("component", "alloc")
	}
	limit := lim.MaxRegionSize() / a.align * a.align
	for _, s := range append([]uint64{cfg.RegionSize}, cfg.FallbackSizes...) {
		if s > limit {
			s = limit
		}
		if s < a.align {
			continue
		}
		if n := len(a.sizes); n == 0 || s < a.sizes[n-1] {
			a.sizes = append(a.sizes, s)
		}
	}
	if len(a.sizes) == 0 {
		return nil, fmt.Errorf("alloc: no region size fits the device: largest region %d bytes (min(MaxBufferSize %d, MaxStorageBufferBindingSize %d)), alignment %d",
			limit, lim.MaxBufferSize, lim.MaxStorageBufferBindingSize, a.align)
	}
	a.debug("allocator created",
		slog.Any("region_sizes", a.sizes),
		slog.Int("max_regions", cfg.MaxRegions),
		slog.Uint64("alignment", a.align),
		slog.String("region_strategy", cfg.RegionStrategy.String()),
		slog.String("block_strategy", cfg.BlockStrategy.String()))
	return a, nil
}

// Alignment is the alignment of every offset and the granule of every
// allocation size.
func (a *Allocator) Alignment() uint64 { return a.align }

// MaxAllocation is the largest request Alloc can ever satisfy: the size of
// the largest region it may acquire, rounded down to the alignment. Larger
// work must be split.
func (a *Allocator) MaxAllocation() uint64 { return a.sizes[0] / a.align * a.align }

// RegionSizes are the region sizes New settled on (after clamping to the
// device's limits), preferred first.
func (a *Allocator) RegionSizes() []uint64 { return slices.Clone(a.sizes) }

// Alloc reserves size bytes, rounded up to the alignment, in one region.
// It fails with ErrZeroSize, ErrClosed, an error wrapping ErrTooLarge, an
// *OutOfMemoryError, or an error about a misbehaving device.
func (a *Allocator) Alloc(size uint64) (Allocation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return Allocation{}, ErrClosed
	}
	if size == 0 {
		return Allocation{}, ErrZeroSize
	}
	if largest := a.MaxAllocation(); size > largest {
		return Allocation{}, fmt.Errorf("%w: requested %d bytes, at most %d fit in a region (largest region %d bytes, alignment %d); split the work so that no buffer straddles two regions",
			ErrTooLarge, size, largest, a.sizes[0], a.align)
	}
	n := (size + a.align - 1) / a.align * a.align

	a.refusal = nil
	if a.strategy == LoadBalancing {
		// Load balancing grows the pool first, while it can: the new
		// region, being empty, is then the first candidate.
		if _, err := a.grow(n); err != nil {
			return Allocation{}, err
		}
	}
	for _, r := range a.candidates(n) {
		if b := r.selectBlock(a.blocks, n); b != nil {
			return a.place(r, b, size, n), nil
		}
	}
	if a.strategy == FillFirst {
		r, err := a.grow(n)
		if err != nil {
			return Allocation{}, err
		}
		if r != nil {
			if b := r.selectBlock(a.blocks, n); b != nil {
				return a.place(r, b, size, n), nil
			}
		}
	}
	return Allocation{}, a.outOfMemory(size, n)
}

// candidates returns the regions that take new blocks and have a free
// block of at least n bytes, in the order the region strategy tries them.
func (a *Allocator) candidates(n uint64) []*region {
	var c []*region
	for _, r := range a.regions {
		if !r.locked && r.largestFree() >= n {
			c = append(c, r)
		}
	}
	slices.SortFunc(c, func(x, y *region) int {
		if x.freeBytes != y.freeBytes {
			less := x.freeBytes < y.freeBytes
			if a.strategy == LoadBalancing {
				less = !less
			}
			if less {
				return -1
			}
			return 1
		}
		return x.seq - y.seq
	})
	return c
}

// place allocates the first n bytes of free block b in r.
func (a *Allocator) place(r *region, b *block, requested, n uint64) Allocation {
	a.nextID++
	id := a.nextID
	offset, whole := b.start, b.size()
	rest := r.take(b, n, id)
	a.allocated += n
	a.live++
	if a.log == nil {
		return Allocation{RegionID: r.ID, Offset: offset, Size: n, ID: id}
	}
	if rest != nil {
		a.debug("block split",
			slog.Uint64("region", r.ID),
			slog.Uint64("offset", offset),
			slog.Uint64("from", whole),
			slog.Uint64("taken", n),
			slog.Uint64("remainder", rest.size()))
	}
	al := Allocation{RegionID: r.ID, Offset: offset, Size: n, ID: id}
	a.debug("alloc",
		slog.Uint64("region", r.ID),
		slog.Uint64("offset", offset),
		slog.Uint64("size", n),
		slog.Uint64("requested", requested),
		slog.Uint64("id", id),
		slog.Uint64("region_free", r.freeBytes))
	return al
}

// Reserve acquires a region of exactly size bytes (rounded up to the
// alignment, at most the largest configured region size) now, for a
// caller that knows what it will place: an allocation that then fills it
// leaves no slack, so the bytes reserved from the device are the bytes
// allocated. It counts against the handle budget. It fails with
// ErrClosed, ErrZeroSize, an error wrapping ErrTooLarge, or the device's
// refusal (the pool stays unlocked: other sizes may still be granted).
func (a *Allocator) Reserve(size uint64) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return 0, ErrClosed
	case size == 0:
		return 0, ErrZeroSize
	}
	n := (size + a.align - 1) / a.align * a.align
	if n > a.sizes[0] {
		return 0, fmt.Errorf("%w: a region of %d bytes, the largest is %d", ErrTooLarge, n, a.sizes[0])
	}
	if a.poolLocked || len(a.regions) >= a.cfg.MaxRegions {
		return 0, fmt.Errorf("alloc: reserving %d bytes: the pool is locked (%s)", n, cmp.Or(a.lockReason, fmt.Sprintf("handle budget of %d regions reached", a.cfg.MaxRegions)))
	}
	r, err := a.acquire(n, 0)
	if err != nil {
		return 0, err
	}
	return r.ID, nil
}

// acquire asks the device for a region of s bytes and adds it to the
// pool (level is the fallback level, for the log).
func (a *Allocator) acquire(s uint64, level int) (*region, error) {
	reg, err := a.dev.NewRegion(s)
	if err == nil && reg.Size != s {
		a.dev.FreeRegion(reg)
		err = fmt.Errorf("device returned a region of %d bytes", reg.Size)
	}
	if err != nil {
		a.debug("region refused", slog.Uint64("size", s), slog.Int("fallback", level), slog.Any("err", err))
		return nil, fmt.Errorf("region of %d bytes: %w", s, err)
	}
	if _, dup := a.byID[reg.ID]; dup {
		return nil, errDuplicate{reg.ID}
	}
	a.seq++
	r := newRegion(reg, a.seq)
	a.regions = append(a.regions, r)
	a.byID[r.ID] = r
	a.reserved += r.Size
	a.debug("region acquired",
		slog.Uint64("region", r.ID),
		slog.Uint64("size", r.Size),
		slog.Int("fallback", level),
		slog.Int("regions", len(a.regions)),
		slog.Int("max_regions", a.cfg.MaxRegions),
		slog.Uint64("reserved", a.reserved))
	if len(a.regions) >= a.cfg.MaxRegions {
		a.lockPool(fmt.Sprintf("handle budget of %d regions reached", a.cfg.MaxRegions))
	}
	return r, nil
}

// errDuplicate: the device returned a region ID already in use.
type errDuplicate struct{ id uint64 }

func (e errDuplicate) Error() string {
	return fmt.Sprintf("alloc: device returned region ID %d, which is already in use", e.id)
}

// grow acquires a new region that can hold n bytes, unless the pool is
// locked. It tries the configured sizes in order, skipping those smaller
// than n. When the handle budget is reached, or when the device refused
// every configured size, the pool locks for good. It returns the new
// region (nil if none; the device's refusals are left in a.refusal), and
// an error only for a device that misbehaved.
func (a *Allocator) grow(n uint64) (*region, error) {
	if a.poolLocked {
		return nil, nil
	}
	if len(a.regions) >= a.cfg.MaxRegions {
		a.lockPool(fmt.Sprintf("handle budget of %d regions reached", a.cfg.MaxRegions))
		return nil, nil
	}
	var refusals []error
	triedAll := true
	for level, s := range a.sizes {
		if s < n {
			triedAll = false
			break
		}
		r, err := a.acquire(s, level)
		if dup, ok := err.(errDuplicate); ok {
			return nil, dup
		}
		if err != nil {
			refusals = append(refusals, err)
			continue
		}
		return r, nil
	}
	a.refusal = errors.Join(refusals...)
	if triedAll {
		a.lockPool("device refused every region size")
	}
	return nil, nil
}

func (a *Allocator) lockPool(reason string) {
	if a.poolLocked {
		return
	}
	a.poolLocked, a.lockReason = true, reason
	a.debug("pool locked", slog.String("reason", reason), slog.Int("regions", len(a.regions)))
}

func (a *Allocator) outOfMemory(size, n uint64) error {
	devErr := a.refusal
	e := &OutOfMemoryError{
		Requested:  size,
		Aligned:    n,
		Regions:    len(a.regions),
		MaxRegions: a.cfg.MaxRegions,
		PoolLocked: a.poolLocked,
		DeviceErr:  devErr,
	}
	for _, r := range a.regions {
		if r.locked {
			e.LockedRegions++
			continue
		}
		e.FreeBytes += r.freeBytes
		e.LargestFree = max(e.LargestFree, r.largestFree())
	}
	switch {
	case a.poolLocked:
		e.Reason = "no new regions: " + a.lockReason
	case devErr != nil:
		e.Reason = "device refused a new region"
	}
	a.debug("out of memory",
		slog.Uint64("requested", size),
		slog.Uint64("aligned", n),
		slog.Int("regions", e.Regions),
		slog.Int("max_regions", e.MaxRegions),
		slog.Int("locked_regions", e.LockedRegions),
		slog.Uint64("largest_free", e.LargestFree),
		slog.Uint64("free", e.FreeBytes),
		slog.String("reason", e.Reason))
	return e
}

// Free returns an allocation's block to its region, merging it with free
// neighbours. Anything but a live allocation of this allocator (exactly as
// Alloc returned it) gets an error wrapping ErrNotAllocated and changes
// nothing.
func (a *Allocator) Free(al Allocation) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	r := a.byID[al.RegionID]
	if r == nil {
		return fmt.Errorf("%w: free of %v: no such region", ErrNotAllocated, al)
	}
	b := r.live[al.Offset]
	switch {
	case b == nil:
		return fmt.Errorf("%w: free of %v: no live allocation at that offset (already freed?)", ErrNotAllocated, al)
	case b.id != al.ID:
		return fmt.Errorf("%w: free of %v: the block there is allocation #%d (stale copy of a freed allocation?)", ErrNotAllocated, al, b.id)
	case b.size() != al.Size:
		return fmt.Errorf("%w: free of %v: the block there is %d bytes", ErrNotAllocated, al, b.size())
	}
	size := b.size()
	merged, left, right := r.release(b)
	a.allocated -= size
	a.live--
	if a.log == nil {
		return nil
	}
	a.debug("free",
		slog.Uint64("region", r.ID),
		slog.Uint64("offset", al.Offset),
		slog.Uint64("size", size),
		slog.Uint64("id", al.ID),
		slog.Uint64("region_free", r.freeBytes))
	if left || right {
		a.debug("block coalesce",
			slog.Uint64("region", r.ID),
			slog.Bool("left", left),
			slog.Bool("right", right),
			slog.Uint64("offset", merged.start),
			slog.Uint64("size", merged.size()))
	}
	return nil
}

// LockRegion stops region id from taking new blocks; its live blocks stay
// and can be freed as usual. Locking a locked region is a no-op.
func (a *Allocator) LockRegion(id uint64) error { return a.setRegionLock(id, true) }

// UnlockRegion lets region id take new blocks again.
func (a *Allocator) UnlockRegion(id uint64) error { return a.setRegionLock(id, false) }

func (a *Allocator) setRegionLock(id uint64, locked bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	r := a.byID[id]
	if r == nil {
		return fmt.Errorf("%w: %d", ErrUnknownRegion, id)
	}
	if r.locked != locked {
		r.locked = locked
		a.debug("region lock", slog.Uint64("region", id), slog.Bool("locked", locked))
	}
	return nil
}

// Close returns every region to the device. Afterwards every method but
// Stats and the accessors returns ErrClosed. If allocations were still
// live, Close returns an error wrapping ErrLiveAllocations (their memory is
// gone all the same).
func (a *Allocator) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	a.closed = true
	live, allocated := a.live, a.allocated
	for _, r := range a.regions {
		a.dev.FreeRegion(r.Region)
		a.debug("region freed", slog.Uint64("region", r.ID), slog.Uint64("size", r.Size), slog.Int("live", len(r.live)))
	}
	a.regions, a.byID = nil, map[uint64]*region{}
	a.reserved, a.allocated, a.live = 0, 0, 0
	a.lockPool("allocator closed")
	if live > 0 {
		return fmt.Errorf("%w: %d allocations (%d bytes) were never freed", ErrLiveAllocations, live, allocated)
	}
	return nil
}

// Stats is a snapshot of the allocator.
type Stats struct {
	// Regions held and the handle budget.
	Regions, MaxRegions int
	// ReservedBytes is the sum of the held regions' sizes.
	ReservedBytes uint64
	// AllocatedBytes is the sum of live allocation sizes (aligned).
	AllocatedBytes uint64
	// FreeBytes is ReservedBytes - AllocatedBytes.
	FreeBytes uint64
	// LargestFree is the largest free block in any region, locked or not.
	LargestFree uint64
	// Allocations counts live allocations.
	Allocations int
	// PoolLocked: no region will be acquired again.
	PoolLocked bool
	// PerRegion describes each region, in acquisition order.
	PerRegion []RegionStats
}

// RegionStats describes one region.
type RegionStats struct {
	ID, Size    uint64
	FreeBytes   uint64
	LargestFree uint64
	// Blocks counts free and allocated blocks; Allocations the allocated
	// ones.
	Blocks, Allocations int
	// Locked: the region takes no new blocks.
	Locked bool
}

// Stats returns a snapshot of the allocator's state.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Stats{
		Regions:        len(a.regions),
		MaxRegions:     a.cfg.MaxRegions,
		ReservedBytes:  a.reserved,
		AllocatedBytes: a.allocated,
		FreeBytes:      a.reserved - a.allocated,
		Allocations:    a.live,
		PoolLocked:     a.poolLocked,
	}
	for _, r := range a.regions {
		s.LargestFree = max(s.LargestFree, r.largestFree())
		s.PerRegion = append(s.PerRegion, RegionStats{
			ID:          r.ID,
			Size:        r.Size,
			FreeBytes:   r.freeBytes,
			LargestFree: r.largestFree(),
			Blocks:      r.nblocks,
			Allocations: len(r.live),
			Locked:      r.locked,
		})
	}
	return s
}

func (a *Allocator) debug(msg string, attrs ...slog.Attr) {
	if a.log == nil {
		return
	}
	a.log.LogAttrs(context.Background(), slog.LevelDebug, msg, attrs...)
}
