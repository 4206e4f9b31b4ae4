package engine

import (
	"fmt"
	"slices"
	"sync"

	"github.com/tmmu/tmmu/alloc"
)

// MaxSlots is how many regions one launch may bind: a kernel has at most
// eight operands. The cpu binds that many; WebGPU binds gpu.NumSlots
// (6), which every planned launch fits (a plan puts an arena's tensors
// in few regions) but the unshared reference, one region per storage,
// can exceed (llama's attention backward: 7).
const MaxSlots = 8

// Launch is one kernel dispatch: Threads invocations of Kernel over the
// regions in Slots (slot i of the params is Slots[i]), or, when Groups
// is set, Threads workgroups of wgLanes lanes (groups.go).
type Launch struct {
	Kernel string
	Slots  []int // region ids
	// Params are the kernel's words: first one (slot, word offset) pair
	// per operand, then its scalars.
	Params []uint32
	// Spans are, operand by operand, the words of its region the kernel
	// may touch through it (its storage): a device may bind just those.
	Spans   []WordRange
	Threads uint32
	Groups  bool
	// Iters bounds the loop iterations one invocation runs (all loops
	// together). A device that ends long invocations (llvmpipe) refuses
	// a launch above its bound instead of computing garbage.
	Iters uint64
}

// WordRange is words [Lo, Hi) of a region.
type WordRange struct{ Lo, Hi uint64 }

// Limits are the device limits that shape the plan and the regions
// (WebGPU's names).
type Limits = alloc.Limits

// regionBytes is the largest region a device binds whole,
// min(MaxBufferSize, MaxStorageBufferBindingSize), rounded down to the
// offset alignment.
func regionBytes(l Limits) uint64 {
	r := l.MaxRegionSize()
	if a := l.MinStorageBufferOffsetAlignment; a > 0 {
		r -= r % a
	}
	return r
}

// Backend is a device that holds regions and runs kernels on them.
// Launches are queued in order; Wait returns once all queued work has
// finished (or the first error). Implementations are safe for use by one
// goroutine at a time (an engine owns its backend).
type Backend interface {
	// Name is "cpu" or "webgpu".
	Name() string
	// Describe says which device runs the kernels.
	Describe() string
	Limits() Limits
	// NewRegion allocates a region of size bytes (a multiple of 4),
	// zeroed, and returns its id.
	NewRegion(size uint64) (int, error)
	FreeRegion(id int) error
	Write(region int, offset uint64, data []byte) error
	Read(region int, offset, n uint64) ([]byte, error)
	// Prepare binds l for running many times (WebGPU: one bind group,
	// created here, never per run).
	Prepare(l Launch) (Prepared, error)
	Wait() error
	Close() error
}

// Prepared is a launch bound once and run once per step. Its regions
// must outlive it.
type Prepared interface {
	// Run queues the launch.
	Run() error
	// SetParams replaces params words [at, at+len(words)) for the runs
	// after it (runs queued before it still see the old words).
	SetParams(at int, words []uint32) error
	Release()
}

// wordWriter is a backend that writes words from a caller's slice
// without allocating.
type wordWriter interface {
	WriteWords(region int, offset uint64, src []uint32) error
}

// wordReader is a backend that reads words into a caller's slice
// without allocating.
type wordReader interface {
	ReadWords(region int, offset uint64, dst []uint32) error
}

// CPU is the reference backend: regions are host memory and kernels run
// one invocation after another (see kernels.go).
type CPU struct {
	mu       sync.Mutex
	regions  map[int][]uint32
	next     int
	limits   Limits
	capacity uint64 // 0 = unbounded
	used     uint64
	freed    uint64 // regions freed so far: prepared launches re-resolve theirs
	serial   invocation
}

// HostLimits are the cpu backend's: a region may hold 2^32 words (the
// kernels address words with u32), aligned as WebGPU aligns.
var HostLimits = Limits{MaxBufferSize: 16 << 30, MaxStorageBufferBindingSize: 16 << 30, MinStorageBufferOffsetAlignment: 256}

// PortableLimits are WebGPU's default limits, which every WebGPU device
// meets: 256 MiB buffers, 128 MiB storage bindings, 256-byte offset
// alignment. A job planned with ExecutableArenas(PortableLimits, …) runs
// on any backend, so every rank agrees on one plan whatever its device.
var PortableLimits = Limits{MaxBufferSize: 256 << 20, MaxStorageBufferBindingSize: 128 << 20, MinStorageBufferOffsetAlignment: 256}

// NewCPU returns a cpu backend with HostLimits.
func NewCPU() *CPU {
	return &CPU{regions: map[int][]uint32{}, limits: HostLimits}
}

// SetLimits overrides the limits (tests use small regions).
func (c *CPU) SetLimits(l Limits) { c.limits = l }

// SetCapacity bounds the bytes of all regions together, like a device's
// memory (0 = unbounded).
func (c *CPU) SetCapacity(bytes uint64) { c.capacity = bytes }

func (c *CPU) Name() string     { return "cpu" }
func (c *CPU) Describe() string { return "host memory, reference kernels" }
func (c *CPU) Limits() Limits   { return c.limits }

func (c *CPU) NewRegion(size uint64) (int, error) {
	if size%4 != 0 || size == 0 || size > regionBytes(c.limits) {
		return 0, fmt.Errorf("engine: cpu region of %d bytes (a positive multiple of 4 up to %d)", size, regionBytes(c.limits))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.capacity > 0 && c.used+size > c.capacity {
		return 0, fmt.Errorf("engine: cpu device out of memory: %d bytes in use, %d more asked, capacity %d", c.used, size, c.capacity)
	}
	c.next++
	c.regions[c.next] = make([]uint32, size/4)
	c.used += size
	return c.next, nil
}

func (c *CPU) FreeRegion(id int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.regions[id]
	if !ok {
		return fmt.Errorf("engine: cpu region %d does not exist", id)
	}
	c.used -= uint64(len(r)) * 4
	c.freed++
	delete(c.regions, id)
	return nil
}

func (c *CPU) words(region int, offset, n uint64) ([]uint32, error) {
	r, ok := c.regions[region]
	if !ok {
		return nil, fmt.Errorf("engine: cpu region %d does not exist", region)
	}
	if offset%4 != 0 || n%4 != 0 || offset+n > uint64(len(r))*4 {
		return nil, fmt.Errorf("engine: bytes [%d, %d) of cpu region %d (%d bytes, 4-byte granularity)", offset, offset+n, region, len(r)*4)
	}
	return r[offset/4 : (offset+n)/4], nil
}

func (c *CPU) Write(region int, offset uint64, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, err := c.words(region, offset, uint64(len(data)))
	if err != nil {
		return err
	}
	for i := range w {
		w[i] = le32(data[4*i:])
	}
	return nil
}

func (c *CPU) Read(region int, offset, n uint64) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, err := c.words(region, offset, n)
	if err != nil {
		return nil, err
	}
	out := make([]byte, n)
	for i, x := range w {
		put32(out[4*i:], x)
	}
	return out, nil
}

func (c *CPU) WriteWords(region int, offset uint64, src []uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, err := c.words(region, offset, 4*uint64(len(src)))
	if err != nil {
		return err
	}
	copy(w, src)
	return nil
}

func (c *CPU) ReadWords(region int, offset uint64, dst []uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, err := c.words(region, offset, 4*uint64(len(dst)))
	if err != nil {
		return err
	}
	copy(dst, w)
	return nil
}

func (c *CPU) Prepare(l Launch) (Prepared, error) { return c.prepare(l) }

func (c *CPU) prepare(l Launch) (*cpuLaunch, error) {
	if len(l.Slots) > MaxSlots {
		return nil, fmt.Errorf("engine: kernel %s binds %d regions (at most %d)", l.Kernel, len(l.Slots), MaxSlots)
	}
	p := &cpuLaunch{c: c, l: l, mem: make([][]uint32, len(l.Slots))}
	p.l.Params = slices.Clone(l.Params)
	if l.Groups {
		if p.group = groupKernels[l.Kernel]; p.group == nil {
			return nil, fmt.Errorf("engine: no workgroup kernel %q", l.Kernel)
		}
	} else if p.simt = kernels[l.Kernel]; p.simt == nil {
		if p.ranged = rangeKernels[l.Kernel]; p.ranged == nil {
			return nil, fmt.Errorf("engine: no kernel %q", l.Kernel)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := p.resolve(); err != nil {
		return nil, err
	}
	return p, nil
}

// cpuLaunch is a prepared launch of the cpu backend.
type cpuLaunch struct {
	c      *CPU
	l      Launch
	mem    [][]uint32
	freed  uint64 // c.freed when mem was resolved
	simt   kernel
	ranged rangeKernel
	group  groupKernel
	done   sync.WaitGroup
}

// resolve points mem at the slots' regions (c.mu held).
func (p *cpuLaunch) resolve() error {
	for i, id := range p.l.Slots {
		r, ok := p.c.regions[id]
		if !ok {
			return fmt.Errorf("engine: kernel %s: region %d does not exist", p.l.Kernel, id)
		}
		p.mem[i] = r
	}
	p.freed = p.c.freed
	return nil
}

func (p *cpuLaunch) Run() error {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.freed != c.freed {
		if err := p.resolve(); err != nil {
			return err
		}
	}
	p.run(&c.serial)
	return nil
}

func (p *cpuLaunch) SetParams(at int, words []uint32) error {
	if at < 0 || at+len(words) > len(p.l.Params) {
		return fmt.Errorf("engine: kernel %s: params [%d, %d) outside its %d words", p.l.Kernel, at, at+len(words), len(p.l.Params))
	}
	copy(p.l.Params[at:], words)
	return nil
}

func (p *cpuLaunch) Release() {}

func (c *CPU) Wait() error  { return nil }
func (c *CPU) Close() error { return nil }

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func put32(b []byte, x uint32) {
	b[0], b[1], b[2], b[3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
}
