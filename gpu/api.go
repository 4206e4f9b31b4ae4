package gpu

import (
	"errors"
	"fmt"
)

// ErrNoAdapter is returned (wrapped) by Open when no WebGPU adapter, not
// even a CPU fallback, can be found or no device can be created on it.
var ErrNoAdapter = errors.New("gpu: no WebGPU adapter")

// ErrClosed is returned by every method of a closed Device.
var ErrClosed = errors.New("gpu: device closed")

// Options configures Open. The zero value is the normal choice.
type Options struct {
	// ForceFallback asks for the fallback (CPU) adapter only.
	ForceFallback bool
	// OpenGL also tries wgpu's OpenGL (EGL) backend when Vulkan, Metal
	// and D3D12 offer no adapter. Off by default: wgpu-native aborts the
	// process while initialising it where libEGL is installed without a
	// working vendor library.
	OpenGL bool
	// Verbose lets wgpu-native log its warnings and errors to stderr
	// (process-wide). By default it logs nothing: every error it reports
	// to the device is returned by a call of this package anyway.
	Verbose bool
	// MaxBindingBytes, when at least 256 and below the device's
	// MaxStorageBufferBindingSize, lowers that limit: tests use it to
	// run the windowed binding of large buffers at small sizes.
	MaxBindingBytes uint64
}

// Info describes the adapter a Device runs on.
type Info struct {
	Name    string // adapter name, e.g. "llvmpipe (LLVM 15.0.6, 256 bits)"
	Vendor  string // as wgpu-native reports it (may be a hex vendor id)
	Device  string // as wgpu-native reports it (may be a hex device id)
	Backend string // "vulkan", "metal", "d3d12", "opengl", ...
	Type    string // "discrete-gpu", "integrated-gpu", "cpu" or "unknown"
	// VendorID and DeviceID are the PCI-style ids (0 when not known).
	VendorID, DeviceID uint32
}

func (i Info) String() string {
	return fmt.Sprintf("%s (%s, %s)", i.Name, i.Backend, i.Type)
}

// Limits are the device's limits (what was granted, not the defaults).
type Limits struct {
	MaxBufferSize                     uint64
	MaxStorageBufferBindingSize       uint64
	MinStorageBufferOffsetAlignment   uint32
	MaxStorageBuffersPerShaderStage   uint32
	MaxComputeWorkgroupsPerDimension  uint32
	MaxComputeInvocationsPerWorkgroup uint32
	MaxComputeWorkgroupSizeX          uint32
	MaxComputeWorkgroupSizeY          uint32
	MaxComputeWorkgroupSizeZ          uint32
	MaxComputeWorkgroupStorageSize    uint32
}

// Windows is how a slot's buffer is bound (see "Buffers larger than one
// binding" in the package documentation).
type Windows struct {
	// Count is the number of windows per slot (1: a slot is one binding).
	Count int
	// Bytes is the size of one window: the largest power of two not above
	// MaxStorageBufferBindingSize.
	Bytes uint64
	// MaxSlotBytes is the largest buffer one slot can bind: the binding
	// limit when Count is 1, else Count windows, never above MaxBufferSize.
	MaxSlotBytes uint64
}

// Range is bytes [Offset, Offset+Size) of a buffer, bound as one slot
// (Device.BindRanges).
type Range struct{ Offset, Size uint64 }

// Binding returns the binding number of window w of slot s: s itself
// for window 0, after the params binding for the others.
func (ws Windows) Binding(s, w int) int {
	if w == 0 {
		return s
	}
	return ParamsBinding + 1 + s*(ws.Count-1) + w - 1
}

const (
	// NumSlots is the number of read_write storage slots (bindings 0..5).
	NumSlots = 6
	// ParamsBinding is the binding of the read-only params array.
	ParamsBinding = 6
	// EntryPoint is the compute entry point every kernel must define.
	EntryPoint = "main"
	// MaxParams is the most params words one Dispatch takes.
	MaxParams = paramsChunk / 4
)

// paramsChunk is the size of one params buffer. A batch packs the params
// of its dispatches into such buffers, each at an offset aligned to
// MinStorageBufferOffsetAlignment.
const paramsChunk = 64 << 10

// Stats counts what a device did since Open: the per-step costs an
// engine wants to keep constant.
type Stats struct {
	Dispatches     uint64 // compute dispatches recorded
	Submits        uint64 // command buffers submitted (batches and reads)
	Reads          uint64 // device-to-host copies (Read calls that copied)
	ReadBytes      uint64 // bytes those copies moved
	BindGroups     uint64 // bind groups created (by Dispatch and Bind)
	StagingBuffers uint64 // staging buffers created (Read reuses one)
}
