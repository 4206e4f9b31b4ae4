package engine

import (
	"errors"
	"fmt"

	"github.com/tmmu/tmmu/gpu"
)

// WebGPU runs the kernels as WGSL compute shaders on a WebGPU device
// (package gpu): each region is one storage buffer, bound whole.
type WebGPU struct {
	dev     *gpu.Device
	buffers map[int]*gpu.Buffer
	next    int
	kernels map[string]*gpu.Kernel
}

// ErrNoAdapter is returned by NewWebGPU when the machine has no WebGPU
// adapter (not even a CPU Vulkan driver).
var ErrNoAdapter = gpu.ErrNoAdapter

// NewWebGPU opens the first WebGPU adapter.
func NewWebGPU() (*WebGPU, error) {
	d, err := gpu.Open(gpu.Options{})
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

func (w *WebGPU) Limits() Limits {
	l := w.dev.Limits()
	return Limits{MaxBufferSize: l.MaxBufferSize, MaxStorageBufferBindingSize: l.MaxStorageBufferBindingSize,
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

func (w *WebGPU) Read(region int, offset, n uint64) ([]byte, error) {
	b, err := w.buffer(region)
	if err != nil {
		return nil, err
	}
	return w.dev.Read(b, offset, n)
}

func (w *WebGPU) Launch(l Launch) error {
	k, ok := w.kernels[l.Kernel]
	if !ok {
		src, ok := wgslSource(l.Kernel)
		if !ok {
			return fmt.Errorf("engine: no WGSL kernel %q", l.Kernel)
		}
		var err error
		if k, err = w.dev.Compile(l.Kernel, src); err != nil {
			return err
		}
		w.kernels[l.Kernel] = k
	}
	slots := make([]*gpu.Buffer, len(l.Slots))
	for i, id := range l.Slots {
		b, err := w.buffer(id)
		if err != nil {
			return err
		}
		slots[i] = b
	}
	groups := (uint64(l.Threads) + wgslWorkgroup - 1) / wgslWorkgroup
	if groups == 0 {
		return nil
	}
	x := min(groups, uint64(max(w.dev.Limits().MaxComputeWorkgroupsPerDimension, 1)))
	y := (groups + x - 1) / x
	return w.dev.Dispatch(k, slots, l.Params, uint32(x), uint32(y), 1)
}

func (w *WebGPU) Wait() error { return w.dev.Wait() }

func (w *WebGPU) Close() error {
	var errs []error
	for id, b := range w.buffers {
		b.Release()
		delete(w.buffers, id)
	}
	errs = append(errs, w.dev.Close())
	return errors.Join(errs...)
}
