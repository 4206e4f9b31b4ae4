//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cogentcore/webgpu/wgpu"
)

var errNoDevice = errors.New("adapter found but no device could be created on it")

// Device is an open WebGPU device with its queue, the shared bind group
// layout of the calling convention, compiled kernels and the batch of
// dispatches not yet submitted. All methods are safe for concurrent use;
// one mutex serialises them.
type Device struct {
	mu       sync.Mutex
	closed   bool
	instance *wgpu.Instance
	adapter  *wgpu.Adapter
	dev      *wgpu.Device
	queue    *wgpu.Queue
	info     Info
	limits   Limits
	windows  Windows

	bgl     *wgpu.BindGroupLayout
	layout  *wgpu.PipelineLayout
	dummy   *wgpu.Buffer
	kernels map[string]*Kernel
	buffers map[*Buffer]struct{}

	batch    batch
	gen      uint64 // batches submitted
	backstop backstop

	staging     *wgpu.Buffer // Read's MapRead buffer, grown on demand
	stagingSize uint64
	stats       Stats
}

// Stats returns the device's counters since Open.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Open creates a WebGPU instance, picks an adapter (high performance
// preferred, the CPU/fallback adapter accepted) and creates a device on
// it with the adapter's maximum buffer size and storage binding size.
// Without any adapter, or when the adapter gives no device, it returns an
// error wrapping ErrNoAdapter; it never panics.
func Open(opts Options) (*Device, error) {
	if !handleLayoutOK() {
		return nil, errors.New("gpu: unexpected github.com/cogentcore/webgpu handle layout (version not v0.23.0?)")
	}
	if opts.Verbose {
		wgpu.SetLogLevel(wgpu.LogLevelWarn)
	} else {
		wgpu.SetLogLevel(wgpu.LogLevelOff)
	}
	runtimeDir()
	backends := []uint32{backendVulkan | backendMetal | backendDX12}
	if opts.OpenGL {
		backends = append(backends, backendGL)
	}
	var errs []error
	for _, b := range backends {
		inst := createInstance(b)
		if inst == nil {
			errs = append(errs, fmt.Errorf("%s: no instance", backendNames(b)))
			continue
		}
		adapter, err := requestAdapter(inst, opts)
		if err != nil {
			inst.Release()
			errs = append(errs, fmt.Errorf("%s: %w", backendNames(b), err))
			continue
		}
		d, err := openDevice(inst, adapter, opts)
		if err != nil {
			adapter.Release()
			inst.Release()
			if !errors.Is(err, errNoDevice) {
				return nil, err
			}
			errs = append(errs, fmt.Errorf("%s: %w", backendNames(b), err))
			continue
		}
		return d, nil
	}
	return nil, fmt.Errorf("%w: %w", ErrNoAdapter, errors.Join(errs...))
}

func backendNames(b uint32) string {
	var names []string
	for _, n := range []struct {
		bit  uint32
		name string
	}{{backendVulkan, "vulkan"}, {backendMetal, "metal"}, {backendDX12, "d3d12"}, {backendGL, "opengl"}} {
		if b&n.bit != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, "/")
}

func requestAdapter(inst *wgpu.Instance, opts Options) (*wgpu.Adapter, error) {
	tries := []wgpu.RequestAdapterOptions{
		{PowerPreference: wgpu.PowerPreferenceHighPerformance},
		{PowerPreference: wgpu.PowerPreferenceHighPerformance, ForceFallbackAdapter: true},
	}
	if opts.ForceFallback {
		tries = tries[1:]
	}
	var err error
	for i := range tries {
		var a *wgpu.Adapter
		if a, err = inst.RequestAdapter(&tries[i]); err == nil && a != nil {
			return a, nil
		}
	}
	return nil, err
}

func openDevice(inst *wgpu.Instance, adapter *wgpu.Adapter, opts Options) (*Device, error) {
	al := adapter.GetLimits().Limits
	req := wgpu.DefaultLimits()
	req.MaxBufferSize = al.MaxBufferSize
	req.MaxStorageBufferBindingSize = al.MaxStorageBufferBindingSize
	// Enough storage bindings for every window of every slot, where the
	// adapter has them.
	want := windowsFor(al.MaxBufferSize, al.MaxStorageBufferBindingSize, math.MaxUint32)
	// (DefaultLimits leaves it undefined, which means WebGPU's 8.)
	if n := min(al.MaxStorageBuffersPerShaderStage, uint32(NumSlots*want.Count+1)); n > 8 {
		req.MaxStorageBuffersPerShaderStage = n
	}
	dev, err := adapter.RequestDevice(&wgpu.DeviceDescriptor{
		Label:          "tmmu",
		RequiredLimits: &wgpu.RequiredLimits{Limits: req},
	})
	if err != nil {
		// Some adapters refuse their own maxima; take the defaults.
		if dev, err = adapter.RequestDevice(nil); err != nil {
			return nil, fmt.Errorf("%w: %w", errNoDevice, err)
		}
	}
	pushBackstop(dev)
	d := &Device{
		instance: inst,
		adapter:  adapter,
		dev:      dev,
		queue:    dev.GetQueue(),
		backstop: newBackstop(),
		kernels:  map[string]*Kernel{},
		buffers:  map[*Buffer]struct{}{},
	}
	ai := adapter.GetInfo()
	d.info = Info{
		Name:     ai.DriverDescription,
		Vendor:   ai.VendorName,
		Device:   ai.Name,
		Backend:  ai.BackendType.String(),
		Type:     ai.AdapterType.String(),
		VendorID: ai.VendorId,
		DeviceID: ai.DeviceId,
	}
	if d.info.Name == "" {
		d.info.Name = ai.Name
	}
	dl := dev.GetLimits().Limits
	d.limits = Limits{
		MaxBufferSize:                     dl.MaxBufferSize,
		MaxStorageBufferBindingSize:       dl.MaxStorageBufferBindingSize,
		MinStorageBufferOffsetAlignment:   dl.MinStorageBufferOffsetAlignment,
		MaxStorageBuffersPerShaderStage:   dl.MaxStorageBuffersPerShaderStage,
		MaxComputeWorkgroupsPerDimension:  dl.MaxComputeWorkgroupsPerDimension,
		MaxComputeInvocationsPerWorkgroup: dl.MaxComputeInvocationsPerWorkgroup,
		MaxComputeWorkgroupSizeX:          dl.MaxComputeWorkgroupSizeX,
		MaxComputeWorkgroupSizeY:          dl.MaxComputeWorkgroupSizeY,
		MaxComputeWorkgroupSizeZ:          dl.MaxComputeWorkgroupSizeZ,
		MaxComputeWorkgroupStorageSize:    dl.MaxComputeWorkgroupStorageSize,
	}
	if b := opts.MaxBindingBytes; b >= 256 && b < d.limits.MaxStorageBufferBindingSize {
		d.limits.MaxStorageBufferBindingSize = b
	}
	d.windows = windowsFor(dl.MaxBufferSize, d.limits.MaxStorageBufferBindingSize, dl.MaxStorageBuffersPerShaderStage)
	if err := d.initConvention(); err != nil {
		d.adapter, d.instance = nil, nil // released by Open
		d.release()
		return nil, err
	}
	return d, nil
}

// initConvention creates the explicit bind group layout of the calling
// convention (see the package documentation), its pipeline layout and the
// dummy buffer bound to unused slots.
func (d *Device) initConvention() error {
	if d.limits.MaxStorageBuffersPerShaderStage < NumSlots+1 {
		return fmt.Errorf("gpu: device allows %d storage buffers per shader stage, the calling convention needs %d",
			d.limits.MaxStorageBuffersPerShaderStage, NumSlots+1)
	}
	n := NumSlots*d.windows.Count + 1
	entries := make([]wgpu.BindGroupLayoutEntry, 0, n)
	for i := 0; i < n; i++ {
		typ := wgpu.BufferBindingTypeStorage
		if i == ParamsBinding {
			typ = wgpu.BufferBindingTypeReadOnlyStorage
		}
		entries = append(entries, wgpu.BindGroupLayoutEntry{
			Binding:    uint32(i),
			Visibility: wgpu.ShaderStageCompute,
			Buffer:     wgpu.BufferBindingLayout{Type: typ, MinBindingSize: 4},
		})
	}
	var err error
	if d.bgl, err = d.dev.CreateBindGroupLayout(&wgpu.BindGroupLayoutDescriptor{Label: "tmmu-slots", Entries: entries}); err != nil {
		return fmt.Errorf("gpu: bind group layout: %w", err)
	}
	if d.layout, err = d.dev.CreatePipelineLayout(&wgpu.PipelineLayoutDescriptor{
		Label: "tmmu-slots", BindGroupLayouts: []*wgpu.BindGroupLayout{d.bgl},
	}); err != nil {
		return fmt.Errorf("gpu: pipeline layout: %w", err)
	}
	if d.dummy, err = d.dev.CreateBuffer(&wgpu.BufferDescriptor{
		Label: "tmmu-dummy", Size: 16, Usage: wgpu.BufferUsageStorage,
	}); err != nil {
		return fmt.Errorf("gpu: dummy buffer: %w", err)
	}
	return d.collect("init")
}

// Info describes the adapter.
func (d *Device) Info() Info { return d.info }

// Limits returns the device's limits.
func (d *Device) Limits() Limits { return d.limits }

// Windows returns how slots are bound on this device.
func (d *Device) Windows() Windows { return d.windows }

// windowsFor sizes the windows of a device with these limits: windows of
// the largest power of two a binding allows, as many per slot as the
// storage bindings per stage (less the params binding) and the largest
// buffer allow.
func windowsFor(maxBuffer, maxBinding uint64, perStage uint32) Windows {
	if maxBinding < 4 {
		return Windows{Count: 1, MaxSlotBytes: maxBinding}
	}
	w := uint64(1) << (bits.Len64(maxBinding) - 1)
	need := max(1, (maxBuffer+w-1)/w)
	// Word indices are u32: a slot holds at most 2^32 words.
	count := min(need, uint64(max(perStage, 1)-1)/NumSlots, (1<<34)/w)
	if count <= 1 {
		return Windows{Count: 1, Bytes: w, MaxSlotBytes: min(maxBinding, maxBuffer)}
	}
	return Windows{Count: int(count), Bytes: w, MaxSlotBytes: max(min(count*w, maxBuffer), maxBinding)}
}

// collect returns what the backstop error scopes caught since the last
// call, prefixed with op.
func (d *Device) collect(op string) error {
	return d.collectFor(op, "")
}

// collectFor is collect for op on name ("dispatch", the kernel): the
// two are joined only for an error, so the common path allocates
// nothing.
func (d *Device) collectFor(op, name string) error {
	err := d.backstop.pop(d.dev)
	pushBackstop(d.dev)
	if err == nil {
		return nil
	}
	if name != "" {
		op += " " + name
	}
	return fmt.Errorf("gpu: %s: %w", op, err)
}

// Close waits for submitted work, then releases kernels, buffers (every
// Buffer of the device becomes unusable) and the device. It returns the
// error of that last wait, if any. Closing twice is a no-op.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	err := d.waitLocked()
	d.release()
	return err
}

func (d *Device) release() {
	d.closed = true
	d.batch.discard()
	d.batch.releaseParams()
	for _, k := range d.kernels {
		k.pipeline.Release()
	}
	d.kernels = nil
	for b := range d.buffers {
		b.buf.Release()
		b.buf = nil
	}
	d.buffers = nil
	if d.staging != nil {
		d.staging.Release()
		d.staging = nil
	}
	if d.dummy != nil {
		d.dummy.Release()
	}
	if d.layout != nil {
		d.layout.Release()
	}
	if d.bgl != nil {
		d.bgl.Release()
	}
	d.backstop.pop(d.dev)
	d.backstop.free()
	d.queue.Release()
	d.dev.Release()
	if d.adapter != nil {
		d.adapter.Release()
	}
	if d.instance != nil {
		d.instance.Release()
	}
}

// runtimeDir gives the process an XDG_RUNTIME_DIR when it has none (a
// service, a container, ssh without a login session): Mesa's Vulkan
// loader prints "error: XDG_RUNTIME_DIR is invalid or not set" on every
// run otherwise. It is a private 0700 directory under the temporary one.
func runtimeDir() {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("tmmu-runtime-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return // not ours to use
	}
	os.Setenv("XDG_RUNTIME_DIR", dir)
}
