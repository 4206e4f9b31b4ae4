package alloc

import "slices"

// block is a byte range [start, end) of a region, free or allocated. The
// blocks of a region form a doubly linked list in offset order that tiles
// the region: the first starts at 0, each ends where the next starts, the
// last ends at the region's size.
type block struct {
	start, end uint64
	free       bool
	id         uint64 // allocation ID while allocated
	prev, next *block
}

func (b *block) size() uint64 { return b.end - b.start }

// region is a Region the allocator holds, with its blocks.
type region struct {
	Region
	seq       int // acquisition order, for deterministic tie-breaks
	first     *block
	nblocks   int
	live      map[uint64]*block // allocated blocks by start offset
	freeBytes uint64
	// freeSizes is the multiset of free block sizes, sorted ascending: its
	// last element is the largest free block, and a binary search finds
	// the smallest free block that fits.
	freeSizes []uint64
	locked    bool
}

func newRegion(r Region, seq int) *region {
	b := &block{start: 0, end: r.Size, free: true}
	return &region{
		Region:    r,
		seq:       seq,
		first:     b,
		nblocks:   1,
		live:      make(map[uint64]*block),
		freeBytes: r.Size,
		freeSizes: []uint64{r.Size},
	}
}

func (r *region) largestFree() uint64 {
	if len(r.freeSizes) == 0 {
		return 0
	}
	return r.freeSizes[len(r.freeSizes)-1]
}

func (r *region) addFreeSize(s uint64) {
	i, _ := slices.BinarySearch(r.freeSizes, s)
	r.freeSizes = slices.Insert(r.freeSizes, i, s)
}

func (r *region) removeFreeSize(s uint64) {
	i, ok := slices.BinarySearch(r.freeSizes, s)
	if !ok {
		panic("alloc: free size multiset out of sync")
	}
	r.freeSizes = slices.Delete(r.freeSizes, i, i+1)
}

// selectBlock returns the free block strategy s picks for n bytes, or nil.
func (r *region) selectBlock(s BlockStrategy, n uint64) *block {
	if r.largestFree() < n {
		return nil
	}
	switch s {
	case BestFit:
		i, _ := slices.BinarySearch(r.freeSizes, n)
		want := r.freeSizes[i]
		for b := r.first; b != nil; b = b.next {
			if b.free && b.size() == want {
				return b
			}
		}
	default:
		for b := r.first; b != nil; b = b.next {
			if b.free && b.size() >= n {
				return b
			}
		}
	}
	return nil
}

// take marks the first n bytes of free block b allocated, splitting off
// the rest as a new free block, which it returns (nil when b fit exactly).
func (r *region) take(b *block, n, id uint64) (rest *block) {
	r.removeFreeSize(b.size())
	if b.size() > n {
		rest = &block{start: b.start + n, end: b.end, free: true, prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = rest
		}
		b.next = rest
		b.end = rest.start
		r.nblocks++
		r.addFreeSize(rest.size())
	}
	b.free = false
	b.id = id
	r.freeBytes -= n
	r.live[b.start] = b
	return rest
}

// release frees allocated block b and merges it with free neighbours. It
// returns the resulting free block and whether it merged with the
// predecessor and with the successor.
func (r *region) release(b *block) (merged *block, left, right bool) {
	delete(r.live, b.start)
	b.free = true
	b.id = 0
	r.freeBytes += b.size()
	if p := b.prev; p != nil && p.free {
		r.removeFreeSize(p.size())
		p.end = b.end
		p.next = b.next
		if b.next != nil {
			b.next.prev = p
		}
		r.nblocks--
		b, left = p, true
	}
	if n := b.next; n != nil && n.free {
		r.removeFreeSize(n.size())
		b.end = n.end
		b.next = n.next
		if n.next != nil {
			n.next.prev = b
		}
		r.nblocks--
		right = true
	}
	r.addFreeSize(b.size())
	return b, left, right
}
