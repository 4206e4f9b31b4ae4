package alloc

import (
	"bytes"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// testConfig: 4 KiB regions falling back to 2 KiB and 1 KiB, a budget of
// four, 256-byte alignment (the fake device's minimum too).
func testConfig(rs RegionStrategy, bs BlockStrategy) Config {
	c := DefaultConfig()
	c.RegionSize = 4096
	c.FallbackSizes = []uint64{2048, 1024}
	c.MaxRegions = 4
	c.Alignment = 256
	c.RegionStrategy = rs
	c.BlockStrategy = bs
	return c
}

func newTestAllocator(t *testing.T, dev Device, cfg Config) *Allocator {
	t.Helper()
	a, err := New(dev, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

func mustAlloc(t *testing.T, a *Allocator, size uint64) Allocation {
	t.Helper()
	al, err := a.Alloc(size)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", size, err)
	}
	if err := checkInvariants(a); err != nil {
		t.Fatalf("after Alloc(%d): %v", size, err)
	}
	return al
}

func mustFree(t *testing.T, a *Allocator, al Allocation) {
	t.Helper()
	if err := a.Free(al); err != nil {
		t.Fatalf("Free(%v): %v", al, err)
	}
	if err := checkInvariants(a); err != nil {
		t.Fatalf("after Free(%v): %v", al, err)
	}
}

func wantLayout(t *testing.T, a *Allocator, id uint64, want ...string) {
	t.Helper()
	if got := blockLayout(a, id); !slices.Equal(got, want) {
		t.Fatalf("region %d blocks\n got %v\nwant %v", id, got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	tests := []struct {
		name  string
		edit  func(*Config)
		wants []string
	}{
		{"zero region size", func(c *Config) { c.RegionSize = 0 }, []string{"RegionSize is 0"}},
		{"alignment not power of two", func(c *Config) { c.Alignment = 384 }, []string{"Alignment 384 is not a power of two"}},
		{"zero alignment", func(c *Config) { c.Alignment = 0 }, []string{"Alignment 0 is not a power of two"}},
		{"region smaller than alignment", func(c *Config) { c.RegionSize, c.FallbackSizes = 128, nil }, []string{"RegionSize 128 is smaller than Alignment 256"}},
		{"fallback not decreasing", func(c *Config) { c.FallbackSizes = []uint64{64 << 20, 64 << 20} },
			[]string{"FallbackSizes[1] 67108864 is not smaller than FallbackSizes[0] 67108864"}},
		{"fallback larger than region", func(c *Config) { c.FallbackSizes = []uint64{256 << 20} },
			[]string{"FallbackSizes[0] 268435456 is not smaller than RegionSize 134217728"}},
		{"zero fallback", func(c *Config) { c.FallbackSizes = []uint64{0} }, []string{"FallbackSizes[0] is 0"}},
		{"fallback below alignment", func(c *Config) { c.FallbackSizes = []uint64{128} }, []string{"FallbackSizes[0] 128 is smaller than Alignment 256"}},
		{"budget", func(c *Config) { c.MaxRegions = 0 }, []string{"MaxRegions 0"}},
		{"strategies", func(c *Config) { c.RegionStrategy, c.BlockStrategy = 7, -1 },
			[]string{"RegionStrategy 7 is unknown", "BlockStrategy -1 is unknown"}},
		{"several at once", func(c *Config) { c.MaxRegions, c.RegionSize = -3, 0 }, []string{"MaxRegions -3", "RegionSize is 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
			if _, err := New(newFakeDevice(), c); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("New with the bad config = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestNewAppliesDeviceLimits(t *testing.T) {
	dev := newFakeDevice()
	dev.limits.MaxStorageBufferBindingSize = 3000 // below RegionSize 4096
	dev.limits.MinStorageBufferOffsetAlignment = 512
	cfg := testConfig(FillFirst, FirstFit)
	cfg.Alignment = 64
	a := newTestAllocator(t, dev, cfg)
	if got := a.Alignment(); got != 512 {
		t.Errorf("Alignment() = %d, want the device's 512", got)
	}
	// 4096 clamps to 3000 rounded down to 512 = 2560; 2048 and 1024 stay.
	if got, want := a.RegionSizes(), []uint64{2560, 2048, 1024}; !slices.Equal(got, want) {
		t.Errorf("RegionSizes() = %v, want %v", got, want)
	}
	if got := a.MaxAllocation(); got != 2560 {
		t.Errorf("MaxAllocation() = %d, want 2560", got)
	}
	al := mustAlloc(t, a, 1)
	if al.Size != 512 || dev.askedSizes()[0] != 2560 {
		t.Errorf("Alloc(1) = %v after asking %v, want 512 bytes from a 2560-byte region", al, dev.askedSizes())
	}

	// A limit below every size collapses the list to one clamped size.
	dev = newFakeDevice()
	dev.limits.MaxBufferSize = 1000
	a = newTestAllocator(t, dev, testConfig(FillFirst, FirstFit))
	if got, want := a.RegionSizes(), []uint64{768}; !slices.Equal(got, want) {
		t.Errorf("RegionSizes() = %v, want %v", got, want)
	}
}

func TestNewRejectsBadDevices(t *testing.T) {
	for name, edit := range map[string]func(*Limits){
		"zero buffer size":      func(l *Limits) { l.MaxBufferSize = 0 },
		"zero binding size":     func(l *Limits) { l.MaxStorageBufferBindingSize = 0 },
		"odd offset alignment":  func(l *Limits) { l.MinStorageBufferOffsetAlignment = 96 },
		"no region size fits":   func(l *Limits) { l.MaxBufferSize = 100 },
		"alignment over limits": func(l *Limits) { l.MinStorageBufferOffsetAlignment = 1 << 31 },
	} {
		t.Run(name, func(t *testing.T) {
			dev := newFakeDevice()
			edit(&dev.limits)
			if _, err := New(dev, testConfig(LoadBalancing, FirstFit)); err == nil {
				t.Fatalf("New accepted limits %+v", dev.limits)
			}
		})
	}
	if _, err := New(nil, DefaultConfig()); err == nil {
		t.Fatal("New accepted a nil device")
	}
}

// Workflow 1: the first allocation acquires a region and splits its one
// free block.
func TestFirstAllocationSplitsNewRegion(t *testing.T) {
	dev := newFakeDevice()
	a := newTestAllocator(t, dev, testConfig(LoadBalancing, FirstFit))
	al := mustAlloc(t, a, 1000)
	if got := dev.askedSizes(); !slices.Equal(got, []uint64{4096}) {
		t.Fatalf("device asked for %v, want [4096]", got)
	}
	if al.Offset != 0 || al.Size != 1024 || al.RegionID != 107 {
		t.Fatalf("Alloc(1000) = %v, want region 107 [0, 1024)", al)
	}
	wantLayout(t, a, al.RegionID, "[0,1024)", "[1024,4096)F")

	// Workflow 2: an exact fit takes a block without splitting it.
	cfg := testConfig(FillFirst, FirstFit)
	a = newTestAllocator(t, newFakeDevice(), cfg)
	x := mustAlloc(t, a, 4096-256)
	y := mustAlloc(t, a, 200)
	if y.RegionID != x.RegionID || y.Offset != 3840 || y.Size != 256 {
		t.Fatalf("second Alloc = %v, want the 256-byte tail of region %d", y, x.RegionID)
	}
	wantLayout(t, a, x.RegionID, "[0,3840)", "[3840,4096)")
}

func TestEveryOffsetAligned(t *testing.T) {
	for _, align := range []uint64{256, 1024} {
		cfg := testConfig(FillFirst, BestFit)
		cfg.Alignment = align
		cfg.RegionSize, cfg.FallbackSizes = 1<<20, nil
		a := newTestAllocator(t, newFakeDevice(), cfg)
		var live []Allocation
		for i := uint64(1); i < 200; i++ {
			size := i*37 + i%3
			al := mustAlloc(t, a, size)
			if al.Offset%align != 0 || al.Size%align != 0 || al.Size < size || al.Size-size >= align {
				t.Fatalf("alignment %d: Alloc(%d) = %v", align, size, al)
			}
			live = append(live, al)
			if i%3 == 0 {
				mustFree(t, a, live[i/2])
				live[i/2] = live[len(live)-1]
				live = live[:len(live)-1]
			}
		}
	}
}

// fragment leaves one 4096-byte region with free holes [0,1024),
// [1280,1792) and [2048,4096).
func fragment(t *testing.T, a *Allocator) uint64 {
	t.Helper()
	h1 := mustAlloc(t, a, 1024)
	mustAlloc(t, a, 256)
	h2 := mustAlloc(t, a, 512)
	mustAlloc(t, a, 256)
	mustFree(t, a, h1)
	mustFree(t, a, h2)
	wantLayout(t, a, h1.RegionID, "[0,1024)F", "[1024,1280)", "[1280,1792)F", "[1792,2048)", "[2048,4096)F")
	return h1.RegionID
}

func TestFirstFitVersusBestFit(t *testing.T) {
	for _, tt := range []struct {
		s    BlockStrategy
		want uint64
	}{
		{FirstFit, 0},   // the lowest hole that fits
		{BestFit, 1280}, // the tightest hole
	} {
		t.Run(tt.s.String(), func(t *testing.T) {
			cfg := testConfig(FillFirst, tt.s)
			cfg.MaxRegions = 1
			a := newTestAllocator(t, newFakeDevice(), cfg)
			fragment(t, a)
			if al := mustAlloc(t, a, 300); al.Offset != tt.want {
				t.Fatalf("Alloc(300) at %d, want %d", al.Offset, tt.want)
			}
			// A request only the tail holds goes there under both.
			if al := mustAlloc(t, a, 1100); al.Offset != 2048 {
				t.Fatalf("Alloc(1100) at %d, want 2048", al.Offset)
			}
		})
	}
}

func TestCoalesce(t *testing.T) {
	tests := []struct {
		name   string
		before []int // of A, B, C, D freed first
		free   int
		want   []string
	}{
		{"none", nil, 1,
			[]string{"[0,256)", "[256,512)F", "[512,768)", "[768,1024)", "[1024,4096)F"}},
		{"left", []int{0}, 1,
			[]string{"[0,512)F", "[512,768)", "[768,1024)", "[1024,4096)F"}},
		{"right", []int{2}, 1,
			[]string{"[0,256)", "[256,768)F", "[768,1024)", "[1024,4096)F"}},
		{"both", []int{0, 2}, 1,
			[]string{"[0,768)F", "[768,1024)", "[1024,4096)F"}},
		{"right into the tail", nil, 3,
			[]string{"[0,256)", "[256,512)", "[512,768)", "[768,4096)F"}},
		{"both into the tail", []int{0, 1, 3}, 2,
			[]string{"[0,4096)F"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(FillFirst, FirstFit)
			a := newTestAllocator(t, newFakeDevice(), cfg)
			var als []Allocation
			for range 4 {
				als = append(als, mustAlloc(t, a, 256))
			}
			id := als[0].RegionID
			wantLayout(t, a, id, "[0,256)", "[256,512)", "[512,768)", "[768,1024)", "[1024,4096)F")
			for _, i := range tt.before {
				mustFree(t, a, als[i])
			}
			mustFree(t, a, als[tt.free])
			wantLayout(t, a, id, tt.want...)
		})
	}
}

// Fragmentation: holes too small for a request do not add up until the
// blocks between them are freed and coalescing joins them.
func TestFragmentationRecoveredByCoalescing(t *testing.T) {
	cfg := testConfig(FillFirst, FirstFit)
	cfg.MaxRegions = 1
	a := newTestAllocator(t, newFakeDevice(), cfg)
	var als []Allocation
	for range 16 {
		als = append(als, mustAlloc(t, a, 256))
	}
	for i := 0; i < 16; i += 2 {
		mustFree(t, a, als[i])
	}
	_, err := a.Alloc(512)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || oom.FreeBytes != 2048 || oom.LargestFree != 256 {
		t.Fatalf("Alloc(512) in a checkerboard = %v, want OOM with 2048 free, largest 256", err)
	}
	for i := 1; i < 16; i += 2 {
		mustFree(t, a, als[i])
	}
	wantLayout(t, a, als[0].RegionID, "[0,4096)F")
	if al := mustAlloc(t, a, 4096); al.Offset != 0 {
		t.Fatalf("Alloc(4096) = %v", al)
	}
}

func TestLoadBalancingSpreadsAcrossRegions(t *testing.T) {
	dev := newFakeDevice()
	cfg := testConfig(LoadBalancing, FirstFit)
	cfg.MaxRegions = 3
	a := newTestAllocator(t, dev, cfg)
	// While the pool may grow, every allocation gets a new region.
	r1 := mustAlloc(t, a, 1024)
	r2 := mustAlloc(t, a, 512)
	r3 := mustAlloc(t, a, 256)
	if r1.RegionID == r2.RegionID || r2.RegionID == r3.RegionID || r1.RegionID == r3.RegionID {
		t.Fatalf("allocations share regions: %v %v %v", r1, r2, r3)
	}
	if s := a.Stats(); s.Regions != 3 || !s.PoolLocked {
		t.Fatalf("stats %+v, want 3 regions and the pool locked", s)
	}
	// Now the most free region wins: r3's (3840 free), then r2's.
	if al := mustAlloc(t, a, 256); al.RegionID != r3.RegionID {
		t.Fatalf("Alloc = %v, want region %d (most free)", al, r3.RegionID)
	}
	// r2 and r3 tie at 3584 free: the older region wins.
	if al := mustAlloc(t, a, 256); al.RegionID != r2.RegionID {
		t.Fatalf("Alloc = %v, want region %d", al, r2.RegionID)
	}
	if got := len(dev.askedSizes()); got != 3 {
		t.Fatalf("device asked %d times, want 3", got)
	}
}

func TestFillFirstPacksRegions(t *testing.T) {
	dev := newFakeDevice()
	cfg := testConfig(FillFirst, FirstFit)
	cfg.MaxRegions = 3
	a := newTestAllocator(t, dev, cfg)
	var first []Allocation
	for range 4 {
		first = append(first, mustAlloc(t, a, 1024))
	}
	for _, al := range first[1:] {
		if al.RegionID != first[0].RegionID {
			t.Fatalf("fill-first spread allocations: %v", first)
		}
	}
	if n := len(dev.askedSizes()); n != 1 {
		t.Fatalf("device asked %d times, want 1", n)
	}
	// The first region is full: only now does the pool grow.
	second := mustAlloc(t, a, 1024)
	if second.RegionID == first[0].RegionID || len(dev.askedSizes()) != 2 {
		t.Fatalf("Alloc into a full pool = %v (asked %v), want a new region", second, dev.askedSizes())
	}
	// With 1024 free in region 1 and 3072 in region 2, the fuller one
	// that fits wins...
	mustFree(t, a, first[1])
	if al := mustAlloc(t, a, 512); al.RegionID != first[0].RegionID {
		t.Fatalf("Alloc(512) = %v, want the fuller region %d", al, first[0].RegionID)
	}
	// ...and one that does not fit is passed over.
	if al := mustAlloc(t, a, 1024); al.RegionID != second.RegionID {
		t.Fatalf("Alloc(1024) = %v, want region %d", al, second.RegionID)
	}
}

func TestFallbackSizes(t *testing.T) {
	dev := newFakeDevice()
	dev.refuse[4096] = true
	a := newTestAllocator(t, dev, testConfig(FillFirst, FirstFit))
	al := mustAlloc(t, a, 256)
	if got := dev.askedSizes(); !slices.Equal(got, []uint64{4096, 2048}) {
		t.Fatalf("device asked %v, want [4096 2048]", got)
	}
	if s := a.Stats(); s.ReservedBytes != 2048 || s.PoolLocked {
		t.Fatalf("stats %+v, want one 2048-byte region and the pool open", s)
	}
	// Every new region starts again from the preferred size.
	dev.refuse[4096] = false
	mustAlloc(t, a, 2048-256)
	al2 := mustAlloc(t, a, 256)
	if al2.RegionID == al.RegionID || a.Stats().PerRegion[1].Size != 4096 {
		t.Fatalf("second region: %v, stats %+v", al2, a.Stats())
	}
	if got := dev.askedSizes(); !slices.Equal(got, []uint64{4096, 2048, 4096}) {
		t.Fatalf("device asked %v", got)
	}
}

func TestFallbackSkipsSizesTooSmall(t *testing.T) {
	dev := newFakeDevice()
	dev.refuse[4096] = true
	a := newTestAllocator(t, dev, testConfig(FillFirst, FirstFit))
	// Only a 4096-byte region could hold 3000 bytes: the smaller ones are
	// not tried, and the pool stays open for them.
	_, err := a.Alloc(3000)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || oom.PoolLocked || !errors.Is(err, errDeviceFull) {
		t.Fatalf("Alloc(3000) = %v, want OOM with the device's refusal and the pool open", err)
	}
	if got := dev.askedSizes(); !slices.Equal(got, []uint64{4096}) {
		t.Fatalf("device asked %v, want [4096]", got)
	}
	mustAlloc(t, a, 1000)
	if got := dev.askedSizes(); !slices.Equal(got, []uint64{4096, 4096, 2048}) {
		t.Fatalf("device asked %v, want [4096 4096 2048]", got)
	}
}

// Workflow 4, first path: the device refuses every size, so the pool locks
// for good and the device is not asked again.
func TestDeviceRefusesEverySizeLocksPool(t *testing.T) {
	for _, rs := range []RegionStrategy{LoadBalancing, FillFirst} {
		t.Run(rs.String(), func(t *testing.T) {
			dev := newFakeDevice()
			dev.capacity = 4096 + 1024 // one full region, then only a 1024 one
			a := newTestAllocator(t, dev, testConfig(rs, FirstFit))
			mustAlloc(t, a, 4096)
			mustAlloc(t, a, 1024)
			if got := dev.askedSizes(); !slices.Equal(got, []uint64{4096, 4096, 2048, 1024}) {
				t.Fatalf("device asked %v", got)
			}
			_, err := a.Alloc(256)
			var oom *OutOfMemoryError
			if !errors.As(err, &oom) || !errors.Is(err, ErrOutOfMemory) || !errors.Is(err, errDeviceFull) {
				t.Fatalf("Alloc = %v, want OOM wrapping the device error", err)
			}
			if !oom.PoolLocked || oom.Regions != 2 || oom.MaxRegions != 4 || oom.LargestFree != 0 {
				t.Fatalf("OOM = %+v", oom)
			}
			if !strings.Contains(err.Error(), "device refused every region size") {
				t.Errorf("OOM message %q does not say why", err)
			}
			n := len(dev.askedSizes())
			if _, err := a.Alloc(256); !errors.Is(err, ErrOutOfMemory) {
				t.Fatalf("second Alloc = %v", err)
			}
			if len(dev.askedSizes()) != n {
				t.Fatalf("a locked pool asked the device again: %v", dev.askedSizes())
			}
		})
	}
}

// Workflow 4, second path: the handle budget.
func TestHandleBudgetOutOfMemory(t *testing.T) {
	dev := newFakeDevice()
	cfg := testConfig(FillFirst, FirstFit)
	cfg.MaxRegions = 2
	a := newTestAllocator(t, dev, cfg)
	mustAlloc(t, a, 3840)
	mustAlloc(t, a, 3840)
	_, err := a.Alloc(300)
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("Alloc past the budget = %v, want ErrOutOfMemory", err)
	}
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("%T is not *OutOfMemoryError", err)
	}
	want := OutOfMemoryError{Requested: 300, Aligned: 512, Regions: 2, MaxRegions: 2, LargestFree: 256, FreeBytes: 512,
		PoolLocked: true, Reason: "no new regions: handle budget of 2 regions reached"}
	if *oom != want {
		t.Fatalf("OOM = %+v\nwant %+v", *oom, want)
	}
	for _, s := range []string{"out of memory", "requested 300 bytes (512 aligned)", "2/2 regions", "largest free block 256 bytes", "handle budget"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("OOM message %q lacks %q", err, s)
		}
	}
	if n := len(dev.askedSizes()); n != 2 {
		t.Fatalf("device asked %d times, want 2", n)
	}
	// What still fits, fits.
	mustAlloc(t, a, 256)
}

func TestTooLarge(t *testing.T) {
	dev := newFakeDevice()
	a := newTestAllocator(t, dev, testConfig(LoadBalancing, FirstFit))
	for _, size := range []uint64{4097, 1 << 40, ^uint64(0)} {
		_, err := a.Alloc(size)
		if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrOutOfMemory) {
			t.Fatalf("Alloc(%d) = %v, want ErrTooLarge", size, err)
		}
		if !strings.Contains(err.Error(), "requested") || !strings.Contains(err.Error(), "at most 4096 fit in a region") {
			t.Errorf("message %q does not name the largest region", err)
		}
	}
	if len(dev.askedSizes()) != 0 {
		t.Fatalf("a refused request reached the device: %v", dev.askedSizes())
	}
	mustAlloc(t, a, 4096)
	if _, err := a.Alloc(0); !errors.Is(err, ErrZeroSize) {
		t.Fatalf("Alloc(0) = %v, want ErrZeroSize", err)
	}

	// A region that is not a multiple of the alignment: its tail is never
	// handed out, and the largest allocation is rounded down.
	cfg := testConfig(LoadBalancing, FirstFit)
	cfg.RegionSize, cfg.FallbackSizes = 1000, nil
	a = newTestAllocator(t, newFakeDevice(), cfg)
	if got := a.MaxAllocation(); got != 768 {
		t.Fatalf("MaxAllocation() = %d, want 768", got)
	}
	if _, err := a.Alloc(769); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Alloc(769) = %v, want ErrTooLarge", err)
	}
	al := mustAlloc(t, a, 768)
	wantLayout(t, a, al.RegionID, "[0,768)", "[768,1000)F")
}

func TestRegionLocking(t *testing.T) {
	cfg := testConfig(FillFirst, FirstFit)
	cfg.MaxRegions = 2
	a := newTestAllocator(t, newFakeDevice(), cfg)
	x := mustAlloc(t, a, 256)
	if err := a.LockRegion(x.RegionID); err != nil {
		t.Fatal(err)
	}
	// The locked region has room but takes nothing: a new region does.
	y := mustAlloc(t, a, 256)
	if y.RegionID == x.RegionID {
		t.Fatalf("a locked region took %v", y)
	}
	if err := a.LockRegion(y.RegionID); err != nil {
		t.Fatal(err)
	}
	_, err := a.Alloc(256)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || oom.LockedRegions != 2 || oom.LargestFree != 0 || !strings.Contains(err.Error(), "(2 locked)") {
		t.Fatalf("Alloc with every region locked = %v", err)
	}
	// Blocks in a locked region can still be freed, and coalesce.
	mustFree(t, a, x)
	wantLayout(t, a, x.RegionID, "[0,4096)F")
	st := a.Stats()
	if !st.PerRegion[0].Locked || !st.PerRegion[1].Locked {
		t.Fatalf("stats %+v do not show the locks", st.PerRegion)
	}
	if err := a.UnlockRegion(x.RegionID); err != nil {
		t.Fatal(err)
	}
	if z := mustAlloc(t, a, 256); z.RegionID != x.RegionID {
		t.Fatalf("Alloc after unlock = %v, want region %d", z, x.RegionID)
	}
	if err := a.LockRegion(12345); !errors.Is(err, ErrUnknownRegion) {
		t.Fatalf("LockRegion(unknown) = %v", err)
	}
	if err := a.UnlockRegion(12345); !errors.Is(err, ErrUnknownRegion) {
		t.Fatalf("UnlockRegion(unknown) = %v", err)
	}
}

func TestBadFrees(t *testing.T) {
	a := newTestAllocator(t, newFakeDevice(), testConfig(FillFirst, FirstFit))
	x := mustAlloc(t, a, 256)
	keep := mustAlloc(t, a, 512)
	mustFree(t, a, x)
	before := a.Stats()

	// The same offset handed out again: a stale copy of x must not free it.
	y := mustAlloc(t, a, 256)
	if y.Offset != x.Offset || y.RegionID != x.RegionID {
		t.Fatalf("expected %v to reuse %v's place", y, x)
	}
	tests := map[string]Allocation{
		"double free":    {RegionID: keep.RegionID, Offset: 4096 - 256, Size: 256, ID: 99},
		"stale copy":     x,
		"unknown region": {RegionID: 1, Offset: 0, Size: 256, ID: keep.ID},
		"inside a block": {RegionID: keep.RegionID, Offset: keep.Offset + 256, Size: 256, ID: keep.ID},
		"wrong size":     {RegionID: keep.RegionID, Offset: keep.Offset, Size: 256, ID: keep.ID},
		"zero value":     {},
	}
	for name, bad := range tests {
		if err := a.Free(bad); !errors.Is(err, ErrNotAllocated) {
			t.Errorf("%s: Free(%v) = %v, want ErrNotAllocated", name, bad, err)
		}
	}
	mustFree(t, a, y)
	if err := a.Free(y); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("second Free(%v) = %v, want ErrNotAllocated", y, err)
	}
	if after := a.Stats(); after.AllocatedBytes != before.AllocatedBytes || after.Allocations != 1 {
		t.Fatalf("bad frees changed the stats: %+v, then %+v", before, after)
	}
	mustFree(t, a, keep)
}

func TestStats(t *testing.T) {
	a := newTestAllocator(t, newFakeDevice(), testConfig(FillFirst, FirstFit))
	if s := a.Stats(); s.Regions != 0 || s.ReservedBytes != 0 || s.MaxRegions != 4 {
		t.Fatalf("fresh stats %+v", s)
	}
	mustAlloc(t, a, 300)
	b := mustAlloc(t, a, 1000)
	s := a.Stats()
	want := Stats{Regions: 1, MaxRegions: 4, ReservedBytes: 4096, AllocatedBytes: 1536, FreeBytes: 2560,
		LargestFree: 2560, Allocations: 2,
		PerRegion: []RegionStats{{ID: b.RegionID, Size: 4096, FreeBytes: 2560, LargestFree: 2560, Blocks: 3, Allocations: 2}}}
	if !statsEqual(s, want) {
		t.Fatalf("Stats() = %+v\nwant %+v", s, want)
	}
}

func statsEqual(x, y Stats) bool {
	return reflect.DeepEqual(x, y)
}

func TestDebugLogging(t *testing.T) {
	var buf bytes.Buffer
	cfg := testConfig(FillFirst, FirstFit)
	cfg.MaxRegions = 1
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := newTestAllocator(t, newFakeDevice(), cfg)
	x := mustAlloc(t, a, 256)
	y := mustAlloc(t, a, 256)
	mustFree(t, a, x)
	mustFree(t, a, y)
	mustAlloc(t, a, 4096)
	if _, err := a.Alloc(256); !errors.Is(err, ErrOutOfMemory) {
		t.Fatal(err)
	}
	if err := a.Close(); !errors.Is(err, ErrLiveAllocations) {
		t.Fatal(err)
	}
	out := buf.String()
	for _, msg := range []string{"region acquired", "pool locked", "block split", "msg=alloc", "msg=free", "block coalesce", "out of memory", "region freed"} {
		if !strings.Contains(out, msg) {
			t.Errorf("log lacks %q:\n%s", msg, out)
		}
	}

	t.Setenv(DebugEnv, "1")
	if a := newTestAllocator(t, newFakeDevice(), testConfig(FillFirst, FirstFit)); a.log == nil {
		t.Errorf("%s=1 did not turn logging on", DebugEnv)
	}
	t.Setenv(DebugEnv, "")
	if a := newTestAllocator(t, newFakeDevice(), testConfig(FillFirst, FirstFit)); a.log != nil {
		t.Errorf("logging on without %s or a Logger", DebugEnv)
	}
}

func TestDeviceMisbehaviour(t *testing.T) {
	dev := newFakeDevice()
	dev.wrongSize = true
	a := newTestAllocator(t, dev, testConfig(FillFirst, FirstFit))
	_, err := a.Alloc(256)
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "device returned a region of 3840 bytes") {
		t.Fatalf("Alloc = %v, want OOM naming the wrong size", err)
	}
	if len(dev.live) != 0 || len(dev.freed) != 3 {
		t.Fatalf("wrong-sized regions not handed back: live %v freed %v", dev.live, dev.freed)
	}

	dup := &dupDevice{fakeDevice: newFakeDevice()}
	a = newTestAllocator(t, dup, testConfig(LoadBalancing, FirstFit))
	mustAlloc(t, a, 256)
	if _, err := a.Alloc(256); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("Alloc with a duplicate region ID = %v", err)
	}
	if err := checkInvariants(a); err != nil {
		t.Fatal(err)
	}
}

// dupDevice hands out the same region ID every time.
type dupDevice struct{ *fakeDevice }

func (d *dupDevice) NewRegion(size uint64) (Region, error) {
	r, err := d.fakeDevice.NewRegion(size)
	r.ID = 1
	return r, err
}

func TestClose(t *testing.T) {
	dev := newFakeDevice()
	a := newTestAllocator(t, dev, testConfig(LoadBalancing, FirstFit))
	x := mustAlloc(t, a, 256)
	mustAlloc(t, a, 256)
	mustFree(t, a, x)
	err := a.Close()
	if !errors.Is(err, ErrLiveAllocations) || !strings.Contains(err.Error(), "1 allocations (256 bytes)") {
		t.Fatalf("Close = %v", err)
	}
	if len(dev.live) != 0 || len(dev.freed) != 2 {
		t.Fatalf("Close left regions on the device: %v", dev.live)
	}
	if _, err := a.Alloc(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close = %v", err)
	}
	if err := a.Free(x); !errors.Is(err, ErrClosed) {
		t.Errorf("Free after Close = %v", err)
	}
	if err := a.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
	if s := a.Stats(); s.Regions != 0 || s.ReservedBytes != 0 {
		t.Errorf("Stats after Close = %+v", s)
	}

	a = newTestAllocator(t, newFakeDevice(), testConfig(LoadBalancing, FirstFit))
	mustFree(t, a, mustAlloc(t, a, 1))
	if err := a.Close(); err != nil {
		t.Fatalf("Close with nothing live = %v", err)
	}
}

// TestReserveExactRegions: Reserve acquires a region of exactly the
// size asked (rounded to the alignment), allocations that fill it leave
// no slack, and it respects the largest size and the handle budget.
func TestReserveExactRegions(t *testing.T) {
	dev := newFakeDevice()
	cfg := testConfig(FillFirst, BestFit)
	cfg.MaxRegions = 2
	a := newTestAllocator(t, dev, cfg)
	id, err := a.Reserve(1000)
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.askedSizes(); !slices.Equal(got, []uint64{1024}) {
		t.Fatalf("device asked for %v, want [1024]", got)
	}
	x, y := mustAlloc(t, a, 512), mustAlloc(t, a, 512)
	if x.RegionID != id || y.RegionID != id {
		t.Fatalf("allocations in regions %d and %d, want the reserved %d", x.RegionID, y.RegionID, id)
	}
	if st := a.Stats(); st.ReservedBytes != 1024 || st.AllocatedBytes != 1024 {
		t.Fatalf("reserved %d, allocated %d; want 1024 and 1024", st.ReservedBytes, st.AllocatedBytes)
	}
	if _, err := a.Reserve(1 << 20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Reserve above the region size: %v, want ErrTooLarge", err)
	}
	if _, err := a.Reserve(0); !errors.Is(err, ErrZeroSize) {
		t.Fatalf("Reserve(0): %v", err)
	}
	if _, err := a.Reserve(256); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reserve(256); err == nil || !strings.Contains(err.Error(), "handle budget") {
		t.Fatalf("Reserve past the handle budget: %v", err)
	}
}
