package engine

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/tmmu/tmmu/gpu"
)

// WebGPU runs the kernels as WGSL compute shaders on a WebGPU device
// (package gpu): each region is one storage buffer, and each launch
// binds just the ranges of them its operands reach (see bind).
type WebGPU struct {
	dev     *gpu.Device
	buffers map[int]*gpu.Buffer
	next    int
	kernels map[string]*gpu.Kernel
	// windowed counts the launches prepared with a slot of windows.
	windowed int
}

// ErrNoAdapter is returned by NewWebGPU when the machine has no WebGPU
// adapter (not even a CPU Vulkan driver).
var ErrNoAdapter = gpu.ErrNoAdapter

// NewWebGPU opens the first WebGPU adapter.
func NewWebGPU() (*WebGPU, error) { return newWebGPU(gpu.Options{}) }

func newWebGPU(o gpu.Options) (*WebGPU, error) {
	d, err := gpu.Open(o)
	if err != nil {
		return nil, err
	}
	return &WebGPU{dev: d, buffers: map[int]*gpu.Buffer{}, kernels: map[string]*gpu.Kernel{}}, nil
}

// Open returns the backend named by name: "webgpu", "cpu", or "auto":
// webgpu when an adapter exists, else cpu, with reason saying why it
// fell back (empty when it did not).
func Open(name string) (be Backend, reason string, err error) {
	switch name {
	case "cpu":
		return NewCPU(), "", nil
	case "webgpu":
		w, err := NewWebGPU()
		if err != nil {
			return nil, "", err
		}
		return w, "", nil
	case "auto", "":
		w, err := NewWebGPU()
		if err != nil {
			return NewCPU(), fmt.Sprintf("no WebGPU device (%v): running the cpu reference kernels", err), nil
		}
		return w, "", nil
	}
	return nil, "", fmt.Errorf("engine: unknown backend %q (webgpu, cpu or auto)", name)
}

func (w *WebGPU) Name() string     { return "webgpu" }
func (w *WebGPU) Describe() string { return w.dev.Info().String() }

// Limits are the device's, with MaxStorageBufferBindingSize the largest
// region one slot binds (package gpu's Windows.MaxSlotBytes: 640 MiB on
// llvmpipe, whose bindings stop at 128 MiB).
func (w *WebGPU) Limits() Limits {
	l := w.dev.Limits()
	return Limits{MaxBufferSize: l.MaxBufferSize, MaxStorageBufferBindingSize: w.dev.Windows().MaxSlotBytes,
		MinStorageBufferOffsetAlignment: uint64(l.MinStorageBufferOffsetAlignment)}
}

func (w *WebGPU) NewRegion(size uint64) (int, error) {
	w.next++
	b, err := w.dev.NewBuffer(size, fmt.Sprintf("tmmu-region-%d", w.next))
	if err != nil {
		return 0, err
	}
	w.buffers[w.next] = b
	return w.next, nil
}

func (w *WebGPU) buffer(id int) (*gpu.Buffer, error) {
	b, ok := w.buffers[id]
	if !ok {
		return nil, fmt.Errorf("engine: webgpu region %d does not exist", id)
	}
	return b, nil
}

func (w *WebGPU) FreeRegion(id int) error {
	b, err := w.buffer(id)
	if err != nil {
		return err
	}
	// Work in flight may still use it (torchlette §14.1): wait first.
	if err := w.dev.Wait(); err != nil {
		return err
	}
	b.Release()
	delete(w.buffers, id)
	return nil
}

func (w *WebGPU) Write(region int, offset uint64, data []byte) error {
	b, err := w.buffer(region)
	if err != nil {
		return err
	}
	return w.dev.Write(b, offset, data)
}

// WriteWords writes words without converting them to bytes (WebGPU
// words are little-endian, as the params words already assume).
func (w *WebGPU) WriteWords(region int, offset uint64, src []uint32) error {
	b, err := w.buffer(region)
	if err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	return w.dev.Write(b, offset, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 4*len(src)))
}

func (w *WebGPU) Read(region int, offset, n uint64) ([]byte, error) {
	b, err := w.buffer(region)
	if err != nil {
		return nil, err
	}
	return w.dev.Read(b, offset, n)
}

func (w *WebGPU) Prepare(l Launch) (Prepared, error) {
	k, slots, ranges, params, err := w.resolve(l)
	if err != nil {
		return nil, err
	}
	b, err := w.dev.BindRanges(k, slots, ranges, params)
	if err != nil {
		return nil, err
	}
	x, y, ok := w.grid(l)
	return &gpuLaunch{b: b, x: x, y: y, empty: !ok}, nil
}

// gpuLaunch is a prepared launch: a gpu.Binding and its grid.
type gpuLaunch struct {
	b     *gpu.Binding
	x, y  uint32
	empty bool
}

func (g *gpuLaunch) Run() error {
	if g.empty {
		return nil
	}
	return g.b.Dispatch(g.x, g.y, 1)
}
func (g *gpuLaunch) SetParams(at int, words []uint32) error { return g.b.SetParams(at, words) }
func (g *gpuLaunch) Release()                               { g.b.Release() }

// resolve compiles (once) the module the launch needs and returns its
// buffers, the ranges they are bound at and the params, rewritten for
// those ranges (see bind).
func (w *WebGPU) resolve(l Launch) (*gpu.Kernel, []*gpu.Buffer, []gpu.Range, []uint32, error) {
	shape, slots, ranges, params, err := w.bind(l)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	name := shape.key(l.Kernel)
	k, ok := w.kernels[name]
	if !ok {
		src, ok := wgslSource(wgslPrelude(w.dev.Windows(), shape), l.Kernel, l.Groups)
		if !ok {
			return nil, nil, nil, nil, fmt.Errorf("engine: no WGSL kernel %q", l.Kernel)
		}
		if k, err = w.dev.Compile(name, src); err != nil {
			return nil, nil, nil, nil, err
		}
		w.kernels[name] = k
	}
	if slices.Contains(shape.windowed, true) {
		w.windowed++
	}
	return k, slots, ranges, params, nil
}

// binding is bytes [lo, hi) of a region, bound as one slot.
type binding struct {
	region int
	lo, hi uint64
}

// bind decides which slot binds each operand of l, and which bytes of
// its region that slot covers. Operands whose storages lie within one
// binding's reach of each other share a slot bound to just that range
// (from its start, aligned down), so the kernel indexes one array; an
// operand larger than one binding gets a slot of windows over its range.
// Only when that takes more than gpu.NumSlots slots does each region
// get one slot over all its operands (windowed where that is larger
// than one binding). The operands' word offsets become offsets in their
// slot's range.
func (w *WebGPU) bind(l Launch) (bindShape, []*gpu.Buffer, []gpu.Range, []uint32, error) {
	lim := w.dev.Limits()
	maxB, align := lim.MaxStorageBufferBindingSize, max(uint64(lim.MinStorageBufferOffsetAlignment), 4)
	n := len(l.Spans)
	sizes := map[int]uint64{}
	for _, id := range l.Slots {
		b, err := w.buffer(id)
		if err != nil {
			return bindShape{}, nil, nil, nil, err
		}
		sizes[id] = b.Size()
	}
	// place puts operand k in one of bs (joining one when the joint
	// range is within reach), returning its slot.
	place := func(bs []binding, k int, reach uint64) ([]binding, int) {
		id := l.Slots[l.Params[2*k]]
		lo, hi := 4*l.Spans[k].Lo/align*align, min(4*l.Spans[k].Hi, sizes[id])
		if sizes[id] <= maxB {
			lo, hi = 0, sizes[id] // the whole buffer is one binding
		}
		for i, b := range bs {
			if b.region == id && max(b.hi, hi)-min(b.lo, lo) <= reach {
				bs[i].lo, bs[i].hi = min(b.lo, lo), max(b.hi, hi)
				return bs, i
			}
		}
		return append(bs, binding{id, lo, hi}), len(bs)
	}
	var bs []binding
	slot := make([]int, n)
	for k := range n {
		bs, slot[k] = place(bs, k, maxB)
	}
	if len(bs) > gpu.NumSlots {
		bs = bs[:0]
		for k := range n {
			bs, slot[k] = place(bs, k, math.MaxUint64)
		}
	}
	if len(bs) > gpu.NumSlots {
		return bindShape{}, nil, nil, nil, unsupported("kernel %s binds %d regions; a WebGPU kernel binds %d", l.Kernel, len(bs), gpu.NumSlots)
	}
	shape := bindShape{slot: slot, windowed: make([]bool, len(bs))}
	bufs := make([]*gpu.Buffer, len(bs))
	ranges := make([]gpu.Range, len(bs))
	for i, b := range bs {
		bufs[i] = w.buffers[b.region]
		ranges[i] = gpu.Range{Offset: b.lo, Size: min((b.hi-b.lo+3)&^3, sizes[b.region]-b.lo)}
		shape.windowed[i] = ranges[i].Size > maxB
		if ranges[i].Size > w.dev.Windows().MaxSlotBytes {
			return bindShape{}, nil, nil, nil, unsupported("kernel %s reaches %d bytes of one region; a WebGPU slot binds %d", l.Kernel, ranges[i].Size, w.dev.Windows().MaxSlotBytes)
		}
	}
	params := slices.Clone(l.Params)
	for k := range n {
		params[2*k] = uint32(slot[k])
		params[2*k+1] -= uint32(bs[slot[k]].lo / 4)
	}
	return shape, bufs, ranges, params, nil
}

// grid is the workgroup grid of l (false: nothing to run).
func (w *WebGPU) grid(l Launch) (x, y uint32, ok bool) {
	groups := (uint64(l.Threads) + wgslWorkgroup - 1) / wgslWorkgroup
	if l.Groups {
		groups = uint64(l.Threads)
	}
	if groups == 0 {
		return 0, 0, false
	}
	gx := min(groups, uint64(max(w.dev.Limits().MaxComputeWorkgroupsPerDimension, 1)))
	return uint32(gx), uint32((groups + gx - 1) / gx), true
}

func (w *WebGPU) Wait() error { return w.dev.Wait() }

// llvmpipeLoopLimit is where Mesa's llvmpipe ends a shader invocation:
// after 65,535 loop iterations, without an error.
const llvmpipeLoopLimit = 65535

// MaxLoopIterations is the most loop iterations one invocation may run
// on this device (0: no limit known). The engine refuses a launch above
// it (Launch.Iters) rather than compute a truncated result.
func (w *WebGPU) MaxLoopIterations() uint64 {
	i := w.dev.Info()
	if strings.Contains(strings.ToLower(i.Name+" "+i.Device), "llvmpipe") {
		return llvmpipeLoopLimit
	}
	return 0
}

func (w *WebGPU) Close() error {
	var errs []error
	for id, b := range w.buffers {
		b.Release()
		delete(w.buffers, id)
	}
	errs = append(errs, w.dev.Close())
	return errors.Join(errs...)
}
