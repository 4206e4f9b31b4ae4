// Package gpu runs WGSL compute kernels through WebGPU
// (github.com/cogentcore/webgpu, which links wgpu-native through cgo).
//
// # Devices
//
// Open picks an adapter of the Vulkan, Metal or D3D12 backend (OpenGL
// only with Options.OpenGL), high performance preferred, the CPU/fallback
// adapter (such as Mesa's llvmpipe Vulkan driver) accepted, and creates a
// device with the adapter's MaxBufferSize and MaxStorageBufferBindingSize
// and, where the adapter has them, enough storage bindings per stage for
// the windows below (the other limits stay at the WebGPU defaults). When no adapter exists
// (no Vulkan/Metal/D3D12 driver, e.g. a container without
// mesa-vulkan-drivers), Open returns an error wrapping ErrNoAdapter; it
// never panics. Callers that can run without a GPU test for it with
// errors.Is(err, gpu.ErrNoAdapter). The package needs cgo (wgpu-native is
// a C library); built without it (CGO_ENABLED=0), Open always returns an
// error wrapping ErrNoAdapter.
//
// Buffers are storage buffers (usage Storage|CopySrc|CopyDst), sizes
// rounded up to 4 bytes, zero-filled. Write takes 4-byte aligned offsets
// and lengths; Read any range. A buffer bound to a slot must not exceed
// Windows().MaxSlotBytes. Kernels are cached by name.
//
// # Calling convention
//
// Every kernel is a WGSL compute shader with entry point "main" and
// uses bind group 0 only, with this layout (an explicit layout, so a
// kernel declares just the bindings it uses):
//
//	@group(0) @binding(0) var<storage, read_write> r0: array<u32>;
//	@group(0) @binding(1) var<storage, read_write> r1: array<u32>;
//	@group(0) @binding(2) var<storage, read_write> r2: array<u32>;
//	@group(0) @binding(3) var<storage, read_write> r3: array<u32>;
//	@group(0) @binding(4) var<storage, read_write> r4: array<u32>;
//	@group(0) @binding(5) var<storage, read_write> r5: array<u32>;
//	@group(0) @binding(6) var<storage, read> params: array<u32>;
//
// Bindings 0..5 are the slots: Dispatch binds slots[i] to binding i, each
// buffer whole (offset 0, its full Size). Slots past len(slots), and nil
// entries, are bound to a 16-byte dummy buffer. One buffer may fill
// several slots (all read_write, which WebGPU allows in one dispatch);
// the kernel then sees aliases of the same memory. Slots must be declared
// read_write exactly as above (not read); the element type must be u32.
//
// Binding 6 is a read-only storage buffer (not a uniform) holding exactly
// the params words given to Dispatch, params[0] first, so
// arrayLength(&params) == len(params) (1 with a single 0 when no params
// were given). At most MaxParams words.
//
// Data is passed as u32 words; f32 values are reinterpreted with bitcast:
//
//	let a = bitcast<f32>(r0[params[1] + i]);
//	r1[i] = bitcast<u32>(a * 2.0);
//
// and on the Go side with math.Float32bits / math.Float32frombits
// (little-endian bytes in Write and Read). Element offsets inside a slot
// are ordinary params words.
//
// # Buffers larger than one binding
//
// One binding covers at most MaxStorageBufferBindingSize bytes (128 MiB
// on llvmpipe). A slot therefore has Windows().Count bindings, each a
// window of Windows().Bytes (a power of two): window w of slot s is
// bytes [w·Bytes, (w+1)·Bytes) of the buffer, at binding
// Windows().Binding(s, w), which is s for window 0 and follows the
// params binding for the others. Window 0 is the whole buffer when that
// fits one binding, so a kernel that declares only r0..r5 works on every
// buffer up to MaxStorageBufferBindingSize; a kernel that declares the
// windows reaches word i of a slot as window i >> log2(Bytes/4), index
// i & (Bytes/4 − 1). Windows past the buffer's end are the dummy buffer.
// On llvmpipe (32 storage bindings per stage) a slot has 5 windows: 640
// MiB.
//
// A slot may also bind a Range of its buffer (BindRanges): word 0 of the
// slot is then the range's first word. A range that fits one binding is
// window 0 alone, so a large buffer's slot needs no windows when the
// kernel only touches a part of it within one binding's reach; a larger
// range is windows of Bytes from its start.
//
// # Bindings
//
// Dispatch creates a bind group per call. Bind (and BindRanges) creates
// one Binding (bind group and its own params buffer) to dispatch again
// and again; its SetParams rewrites params words, submitting first any
// recorded dispatch that must still see the old ones.
//
// # Execution
//
// Dispatch records into the current batch: one command encoder with one
// compute pass (wgpu inserts the barriers between dispatches). Flush
// submits the batch; Wait submits it and waits until the queue has
// finished it. Read and Write submit the pending batch first, so they
// observe program order; Read waits for its copy, which goes through one
// staging buffer per Device (kept between reads, grown to the next power
// of two when a read needs more, at most 8 MiB: a larger read goes
// through it in chunks). Buffers are never mapped except that staging
// buffer. Stats counts dispatches, submits, reads and bind groups.
//
// # Completion
//
// Waiting never blocks inside wgpu-native. The package registers its own
// C callbacks (queue work done, buffer map) that set a flag allocated in
// C memory, and polls the device without waiting (wgpuDevicePoll with
// wait false) until the flag is set, yielding between polls. Two failures
// seen under CPU load come from the paths this replaces: the Go binding's
// map callback receives a pointer to a Go variable that the collector may
// already have freed (panic "misuse of an invalid Handle"), and a polling
// wait gives up after a fixed time while work is still in flight, which
// wgpu-native treats as fatal. A slow device therefore only makes a call
// slower; it never ends the process.
//
// # Errors
//
// Validation and out-of-memory errors are never fatal. Bad WGSL and
// layout mismatches are returned by Compile, bad bindings by Dispatch,
// and errors wgpu reports only when a batch is finished (it validates a
// compute pass when the pass ends) by the Flush, Wait, Read or Write that
// submits it; the batch is then dropped, not submitted. The device keeps
// a validation and an out-of-memory error scope open for its whole life,
// so an error that no narrower scope catches (wgpu-native aborts the
// process on uncaptured errors) is returned by the next call instead.
//
// wgpu-native still aborts on a few errors no scope can catch: a failed
// queue submit and a lost device (a GPU reset).
// The package avoids the submit failures it can cause: buffers are only
// released, never destroyed (wgpu keeps a released buffer alive while
// recorded work uses it), only Read's private staging buffer is ever
// mapped, and a batch that failed validation is never submitted.
//
// # Concurrency
//
// A Device and its Buffers and Kernels may be used from several
// goroutines; one mutex per Device serialises every call (including
// Buffer.Release), so calls do not overlap on the GPU queue. Dispatches
// from different goroutines join the same batch in call order.
package gpu
