package alloc_test

import (
	"errors"
	"fmt"

	"github.com/tmmu/tmmu/alloc"
)

// memDevice hands out numbered regions until its capacity runs out. A
// WebGPU device would create a storage buffer per region instead and keep
// it under the region's ID.
type memDevice struct {
	capacity, used uint64
	next           uint64
}

func (d *memDevice) Limits() alloc.Limits {
	return alloc.Limits{
		MaxBufferSize:                   256 << 20,
		MaxStorageBufferBindingSize:     128 << 20,
		MinStorageBufferOffsetAlignment: 256,
	}
}

func (d *memDevice) NewRegion(size uint64) (alloc.Region, error) {
	if d.used+size > d.capacity {
		return alloc.Region{}, fmt.Errorf("%d bytes free", d.capacity-d.used)
	}
	d.used += size
	d.next++
	return alloc.Region{ID: d.next, Size: size}, nil
}

func (d *memDevice) FreeRegion(r alloc.Region) { d.used -= r.Size }

func Example() {
	cfg := alloc.DefaultConfig()
	cfg.RegionSize = 1 << 20
	cfg.FallbackSizes = []uint64{512 << 10}
	cfg.MaxRegions = 2
	cfg.RegionStrategy = alloc.FillFirst
	a, err := alloc.New(&memDevice{capacity: 3 << 19}, cfg) // room for 1.5 MiB
	if err != nil {
		panic(err)
	}
	defer a.Close()

	x, _ := a.Alloc(1000) // rounded up to 1024
	y, _ := a.Alloc(300 << 10)
	fmt.Println(x)
	fmt.Println(y)

	// The first region cannot take 800 KiB any more and the device
	// refuses a second 1 MiB region. The 512 KiB fallback could not hold
	// the request, so it is not tried: the request fails, and the pool
	// stays open for smaller ones.
	_, err = a.Alloc(800 << 10)
	fmt.Println(errors.Is(err, alloc.ErrOutOfMemory))
	fmt.Println(err)

	// Freeing y merges its block with the free tail of the region.
	if err := a.Free(y); err != nil {
		panic(err)
	}
	s := a.Stats()
	fmt.Printf("%d region(s), %d reserved, %d allocated, largest free %d\n",
		s.Regions, s.ReservedBytes, s.AllocatedBytes, s.LargestFree)

	_, err = a.Alloc(2 << 20)
	fmt.Println(err)
	// Output:
	// region 1 [0, 1024) #1
	// region 1 [1024, 308224) #2
	// true
	// alloc: out of memory: requested 819200 bytes (819200 aligned); 1/2 regions in use; largest free block 740352 bytes, 740352 bytes free in all; device refused a new region: region of 1048576 bytes: 524288 bytes free
	// 1 region(s), 1048576 reserved, 1024 allocated, largest free 1047552
	// alloc: allocation larger than a region: requested 2097152 bytes, at most 1048576 fit in a region (largest region 1048576 bytes, alignment 256); split the work so that no buffer straddles two regions
}
