package alloc

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// TestPropertyInvariants drives a randomly configured allocator over a
// randomly refusing device with random allocs, frees, bad frees and region
// locks, and checks after every step that the bookkeeping is sound, that
// live allocations never overlap, and that every out-of-memory error is
// true.
func TestPropertyInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		align := uint64(1) << rapid.IntRange(4, 9).Draw(t, "alignLog")
		devAlign := uint64(1) << rapid.IntRange(4, 9).Draw(t, "devAlignLog")
		eff := max(align, devAlign)
		regionSize := uint64(rapid.IntRange(1, 64).Draw(t, "regionUnits"))*align +
			rapid.Uint64Range(0, align-1).Draw(t, "regionSlack")
		var fallbacks []uint64
		prev := regionSize
		for i := range rapid.IntRange(0, 3).Draw(t, "fallbacks") {
			if prev-1 < align {
				break
			}
			s := rapid.Uint64Range(align, prev-1).Draw(t, fmt.Sprintf("fallback%d", i))
			fallbacks = append(fallbacks, s)
			prev = s
		}
		cfg := Config{
			RegionSize:     regionSize,
			FallbackSizes:  fallbacks,
			MaxRegions:     rapid.IntRange(1, 4).Draw(t, "maxRegions"),
			Alignment:      align,
			RegionStrategy: rapid.SampledFrom([]RegionStrategy{LoadBalancing, FillFirst}).Draw(t, "regionStrategy"),
			BlockStrategy:  rapid.SampledFrom([]BlockStrategy{FirstFit, BestFit}).Draw(t, "blockStrategy"),
		}
		dev := newFakeDevice()
		dev.limits = Limits{
			MaxBufferSize:                   rapid.Uint64Range(eff, max(eff, 2*regionSize)).Draw(t, "maxBuffer"),
			MaxStorageBufferBindingSize:     rapid.Uint64Range(eff, max(eff, 2*regionSize)).Draw(t, "maxBinding"),
			MinStorageBufferOffsetAlignment: devAlign,
		}
		dev.capacity = rapid.Uint64Range(0, 4*regionSize).Draw(t, "capacity")
		a, err := New(dev, cfg)
		if err != nil {
			// Only when the device's alignment leaves no usable size.
			if regionSize >= eff {
				t.Fatalf("New(%+v) with limits %+v: %v", cfg, dev.limits, err)
			}
			return
		}

		live := map[uint64]Allocation{} // by allocation ID
		var freed []Allocation
		regionIDs := func() []uint64 {
			var ids []uint64
			for _, r := range a.Stats().PerRegion {
				ids = append(ids, r.ID)
			}
			return ids
		}

		t.Repeat(map[string]func(*rapid.T){
			"": func(t *rapid.T) {
				if err := checkInvariants(a); err != nil {
					t.Fatal(err)
				}
				var als []Allocation
				a.mu.Lock()
				for _, al := range live {
					als = append(als, al)
					r := a.byID[al.RegionID]
					if r == nil || r.live[al.Offset] == nil || r.live[al.Offset].id != al.ID || r.live[al.Offset].size() != al.Size {
						a.mu.Unlock()
						t.Fatalf("%v is not a live block", al)
					}
				}
				a.mu.Unlock()
				if err := checkNoOverlap(als); err != nil {
					t.Fatal(err)
				}
				if n := a.Stats().Allocations; n != len(live) {
					t.Fatalf("%d allocations live, the model has %d", n, len(live))
				}
			},
			"alloc": func(t *rapid.T) {
				var size uint64
				if rapid.Bool().Draw(t, "small") {
					size = rapid.Uint64Range(1, 4*eff).Draw(t, "size")
				} else {
					size = rapid.Uint64Range(1, a.MaxAllocation()+eff).Draw(t, "size")
				}
				n := (size + eff - 1) / eff * eff
				al, err := a.Alloc(size)
				var oom *OutOfMemoryError
				switch {
				case err == nil:
					if al.Offset%eff != 0 || al.Size != n {
						t.Fatalf("Alloc(%d) = %v, want %d bytes at a multiple of %d", size, al, n, eff)
					}
					live[al.ID] = al
				case errors.Is(err, ErrTooLarge):
					if n <= a.MaxAllocation() {
						t.Fatalf("Alloc(%d) refused as too large with MaxAllocation %d: %v", size, a.MaxAllocation(), err)
					}
				case errors.As(err, &oom):
					if oom.Aligned != n {
						t.Fatalf("OOM for %d aligned to %d, want %d", size, oom.Aligned, n)
					}
					for _, r := range a.Stats().PerRegion {
						if !r.Locked && r.LargestFree >= n {
							t.Fatalf("OOM for %d bytes while region %+v has room: %v", n, r, err)
						}
					}
					if !oom.PoolLocked && oom.DeviceErr == nil {
						t.Fatalf("OOM without a locked pool or a device refusal: %v", err)
					}
				default:
					t.Fatalf("Alloc(%d): unexpected error %v", size, err)
				}
			},
			"free": func(t *rapid.T) {
				if len(live) == 0 {
					t.Skip("nothing live")
				}
				// Sorted, so that the same draws make the same choices.
				id := rapid.SampledFrom(slices.Sorted(maps.Keys(live))).Draw(t, "id")
				if err := a.Free(live[id]); err != nil {
					t.Fatalf("Free(%v): %v", live[id], err)
				}
				freed = append(freed, live[id])
				delete(live, id)
			},
			"freeAgain": func(t *rapid.T) {
				if len(freed) == 0 {
					t.Skip("nothing freed")
				}
				al := rapid.SampledFrom(freed).Draw(t, "freed")
				if err := a.Free(al); !errors.Is(err, ErrNotAllocated) {
					t.Fatalf("second Free(%v) = %v, want ErrNotAllocated", al, err)
				}
			},
			"lock": func(t *rapid.T) {
				ids := regionIDs()
				if len(ids) == 0 {
					t.Skip("no regions")
				}
				id := rapid.SampledFrom(ids).Draw(t, "region")
				var err error
				if rapid.Bool().Draw(t, "lock") {
					err = a.LockRegion(id)
				} else {
					err = a.UnlockRegion(id)
				}
				if err != nil {
					t.Fatal(err)
				}
			},
		})

		err = a.Close()
		if (len(live) > 0) != errors.Is(err, ErrLiveAllocations) {
			t.Fatalf("Close with %d live = %v", len(live), err)
		}
		if len(dev.live) != 0 {
			t.Fatalf("Close left %d regions on the device", len(dev.live))
		}
	})
}

// TestConcurrentStress runs goroutines allocating and freeing at random
// under every strategy pair and checks, through a shared tracker, that no
// two live allocations ever overlap. Run it with -race.
func TestConcurrentStress(t *testing.T) {
	for _, rs := range []RegionStrategy{LoadBalancing, FillFirst} {
		for _, bs := range []BlockStrategy{FirstFit, BestFit} {
			t.Run(rs.String()+"/"+bs.String(), func(t *testing.T) {
				t.Parallel()
				stress(t, rs, bs)
			})
		}
	}
}

// tracker is the test's own record of which byte ranges are handed out.
type tracker struct {
	mu   sync.Mutex
	live map[uint64]map[uint64]Allocation // region → ID → allocation
}

func (tr *tracker) add(al Allocation) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	m := tr.live[al.RegionID]
	if m == nil {
		m = map[uint64]Allocation{}
		tr.live[al.RegionID] = m
	}
	for _, o := range m {
		if al.Offset < o.End() && o.Offset < al.End() {
			return fmt.Errorf("%v overlaps live %v", al, o)
		}
	}
	m[al.ID] = al
	return nil
}

func (tr *tracker) remove(al Allocation) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.live[al.RegionID], al.ID)
}

func stress(t *testing.T, rs RegionStrategy, bs BlockStrategy) {
	dev := newFakeDevice()
	dev.capacity = 3 << 20
	cfg := DefaultConfig()
	cfg.RegionSize, cfg.FallbackSizes = 1<<20, []uint64{1 << 19}
	cfg.MaxRegions = 4
	cfg.RegionStrategy, cfg.BlockStrategy = rs, bs
	a, err := New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracker{live: map[uint64]map[uint64]Allocation{}}
	const workers, ops = 16, 1500
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() { // a reader racing the writers
		for {
			select {
			case <-stop:
				return
			default:
				_ = a.Stats()
			}
		}
	}()
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			var mine []Allocation
			for range ops {
				if len(mine) < 24 && (len(mine) == 0 || rng.IntN(2) == 0) {
					al, err := a.Alloc(1 + rng.Uint64N(48<<10))
					if errors.Is(err, ErrOutOfMemory) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if err := tr.add(al); err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, al)
					continue
				}
				i := rng.IntN(len(mine))
				al := mine[i]
				mine[i] = mine[len(mine)-1]
				mine = mine[:len(mine)-1]
				tr.remove(al)
				if err := a.Free(al); err != nil {
					t.Error(err)
					return
				}
				if rng.IntN(8) == 0 { // a double free from a busy goroutine
					if err := a.Free(al); !errors.Is(err, ErrNotAllocated) {
						t.Errorf("double Free(%v) = %v", al, err)
					}
				}
			}
			for _, al := range mine {
				tr.remove(al)
				if err := a.Free(al); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := checkInvariants(a); err != nil {
		t.Fatal(err)
	}
	s := a.Stats()
	if s.Allocations != 0 || s.AllocatedBytes != 0 || s.Regions == 0 {
		t.Fatalf("after freeing everything: %+v", s)
	}
	for _, r := range s.PerRegion {
		if r.Blocks != 1 || r.LargestFree != r.Size {
			t.Fatalf("region %+v not coalesced back into one block", r)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
