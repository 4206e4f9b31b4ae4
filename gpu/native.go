//go:build cgo

package gpu

// Calls into wgpu-native that the wrapper does not offer, or offers
// unsafely. The wgpu-native functions are declared here by hand (enums
// and flags passed as uint32_t, which is what they are; struct layouts
// checked against the webgpu.h/wgpu.h of webgpu v0.23.0) and resolved at
// link time against the libwgpu_native.a that the wgpu package links.
//
// Instance creation. wgpu.CreateInstance with a descriptor leaves fields
// of WGPUInstanceExtras uninitialised (malloc), which makes wgpu-native
// panic or misbehave, and without one it enables every backend,
// including OpenGL, whose EGL initialisation panics where libEGL is
// installed without a working vendor library. So the instance is created
// here with zeroed extras and an explicit backend set.
//
// Error scopes. The wrapper scopes most calls itself, but only for
// validation errors (out-of-memory errors pass through), and some calls
// not at all. wgpu-native treats an error that no scope captures, on a
// device without an uncaptured-error callback (the wrapper never installs
// one), as fatal and aborts the process. So the device keeps a "backstop"
// of two scopes (validation, out-of-memory: the only filters wgpu-native
// accepts) pushed at the bottom of its scope stack for its whole life;
// collect pops them, turns what they caught into an error, and pushes
// them again.
//
// Completion. wgpu-native reports a finished map or a finished
// submission through a callback with a userdata pointer, fired later by
// a device poll. The wrapper's MapAsync passes a pointer to a Go
// variable that nothing in Go keeps alive after the call, so a garbage
// collection between the call and the poll can free it ("misuse of an
// invalid Handle" in the callback). Here the callbacks write a flag in C
// memory (gpuFlag), which Go polls; no Go memory is ever handed to
// wgpu-native beyond a call.

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct WGPUDeviceImpl *gpuDeviceRef;
typedef struct WGPUInstanceImpl *gpuInstanceRef;
typedef struct WGPUBufferImpl *gpuBufferRef;
typedef struct WGPUQueueImpl *gpuQueueRef;

// A completion flag: done is set (last) by the callback, status first.
typedef struct {
	uint32_t status;
	uint32_t done;
} gpuFlag;

static void gpu_flag_cb(uint32_t status, void *userdata) {
	gpuFlag *f = (gpuFlag *)userdata;
	f->status = status;
	__atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
}

static uint32_t gpu_flag_done(gpuFlag *f) { return __atomic_load_n(&f->done, __ATOMIC_ACQUIRE); }

typedef void (*gpuStatusCallback)(uint32_t status, void *userdata);
void wgpuBufferMapAsync(gpuBufferRef buffer, uint32_t mode, size_t offset, size_t size, gpuStatusCallback callback, void *userdata);
void const *wgpuBufferGetConstMappedRange(gpuBufferRef buffer, size_t offset, size_t size);
void wgpuQueueOnSubmittedWorkDone(gpuQueueRef queue, gpuStatusCallback callback, void *userdata);

// Maps [offset, offset+size) of buffer for reading; f is set when done.
static void gpu_map_read(gpuBufferRef b, size_t offset, size_t size, gpuFlag *f) {
	wgpuBufferMapAsync(b, 1, offset, size, gpu_flag_cb, f); // WGPUMapMode_Read
}

// Copies the mapped range of b to dst.
static int gpu_copy_mapped(gpuBufferRef b, size_t offset, size_t size, void *dst) {
	void const *src = wgpuBufferGetConstMappedRange(b, offset, size);
	if (src == NULL) {
		return 0;
	}
	memcpy(dst, src, size);
	return 1;
}

void wgpuQueueWriteBuffer(gpuQueueRef queue, gpuBufferRef buffer, uint64_t offset, void const *data, size_t size);

// Writes size bytes at data into buffer at offset (wgpu copies them).
static void gpu_queue_write(gpuQueueRef q, gpuBufferRef b, uint64_t offset, void const *data, size_t size) {
	wgpuQueueWriteBuffer(q, b, offset, data, size);
}

// f is set once the work submitted to q so far has finished.
static void gpu_on_done(gpuQueueRef q, gpuFlag *f) {
	wgpuQueueOnSubmittedWorkDone(q, gpu_flag_cb, f);
}

typedef struct gpuChainedStruct {
	struct gpuChainedStruct const *next;
	uint32_t sType;
} gpuChainedStruct;

typedef struct {
	gpuChainedStruct chain;
	uint32_t backends;           // WGPUInstanceBackendFlags
	uint32_t flags;              // WGPUInstanceFlags
	uint32_t dx12ShaderCompiler; // WGPUDx12Compiler
	uint32_t gles3MinorVersion;  // WGPUGles3MinorVersion
	char const *dxilPath;
	char const *dxcPath;
} gpuInstanceExtras;

typedef struct {
	gpuChainedStruct const *nextInChain;
} gpuInstanceDescriptor;

gpuInstanceRef wgpuCreateInstance(gpuInstanceDescriptor const *descriptor);

static gpuInstanceRef gpu_create_instance(uint32_t backends) {
	gpuInstanceExtras extras = {0};
	extras.chain.sType = 0x00030006; // WGPUSType_InstanceExtras
	extras.backends = backends;
	gpuInstanceDescriptor desc = {0};
	desc.nextInChain = &extras.chain;
	return wgpuCreateInstance(&desc);
}
typedef void (*gpuErrorCallback)(uint32_t type, char const *message, void *userdata);

void wgpuDevicePushErrorScope(gpuDeviceRef device, uint32_t filter);
void wgpuDevicePopErrorScope(gpuDeviceRef device, gpuErrorCallback callback, void *userdata);

typedef struct {
	uint32_t type;
	char *message;
} gpuCaught;

static void gpu_pop_cb(uint32_t type, char const *message, void *userdata) {
	gpuCaught *c = (gpuCaught *)userdata;
	c->type = type;
	c->message = (type != 0 && message != NULL) ? strdup(message) : NULL;
}

// Filters: 0 validation, 1 out-of-memory. Pushed in this order, so
// validation is the inner one.
static void gpu_push_backstop(gpuDeviceRef d) {
	wgpuDevicePushErrorScope(d, 1);
	wgpuDevicePushErrorScope(d, 0);
}

// Pops the two scopes (validation first) into out[0..1].
static void gpu_pop_backstop(gpuDeviceRef d, gpuCaught *out) {
	for (int i = 0; i < 2; i++) {
		out[i].type = 0;
		out[i].message = NULL;
		wgpuDevicePopErrorScope(d, gpu_pop_cb, &out[i]);
	}
}
// For the test of the backstop: a buffer with no usage flags (a
// validation error) created outside any scope of the wrapper.
typedef struct {
	void const *nextInChain;
	char const *label;
	uint32_t usage;
	uint64_t size;
	uint32_t mappedAtCreation;
} gpuBufferDescriptor;
void *wgpuDeviceCreateBuffer(gpuDeviceRef device, gpuBufferDescriptor const *descriptor);
void wgpuBufferRelease(void *buffer);

static void gpu_unscoped_validation_error(gpuDeviceRef d) {
	gpuBufferDescriptor desc = {0};
	desc.size = 4;
	void *b = wgpuDeviceCreateBuffer(d, &desc);
	if (b != NULL) {
		wgpuBufferRelease(b);
	}
}
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/cogentcore/webgpu/wgpu"
)

// Backend flags (WGPUInstanceBackend).
const (
	backendVulkan = 1 << 0
	backendGL     = 1 << 1
	backendMetal  = 1 << 2
	backendDX12   = 1 << 3
)

// The wrapper's handle types are structs whose only field is the C
// handle, unexported; rawDevice and createInstance read and write it
// directly (handleLayoutOK checks the layout; the module is pinned to one
// version).

// handleLayoutOK reports whether wgpu.Device and wgpu.Instance are single
// pointers, and wgpu.Buffer and wgpu.Queue a device and their own.
func handleLayoutOK() bool {
	p := unsafe.Sizeof(uintptr(0))
	return unsafe.Sizeof(wgpu.Device{}) == p && unsafe.Sizeof(wgpu.Instance{}) == p &&
		unsafe.Sizeof(wgpu.Buffer{}) == 2*p && unsafe.Sizeof(wgpu.Queue{}) == 2*p
}

func rawBuffer(b *wgpu.Buffer) C.gpuBufferRef {
	return *(*C.gpuBufferRef)(unsafe.Add(unsafe.Pointer(b), unsafe.Sizeof(uintptr(0))))
}

func rawQueue(q *wgpu.Queue) C.gpuQueueRef {
	return *(*C.gpuQueueRef)(unsafe.Add(unsafe.Pointer(q), unsafe.Sizeof(uintptr(0))))
}

// flag is a completion flag in C memory (see "Completion" above).
type flag struct{ c *C.gpuFlag }

func newFlag() flag { return flag{(*C.gpuFlag)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gpuFlag{}))))} }

func (f flag) done() bool     { return C.gpu_flag_done(f.c) != 0 }
func (f flag) status() uint32 { return uint32(f.c.status) }

// free releases the flag; only once its callback has fired.
func (f flag) free() { C.free(unsafe.Pointer(f.c)) }

// mapRead starts mapping [offset, offset+size) of b for reading.
func mapRead(b *wgpu.Buffer, offset, size uint64, f flag) {
	C.gpu_map_read(rawBuffer(b), C.size_t(offset), C.size_t(size), f.c)
}

// queueWrite writes data into b at offset through the queue, with no
// allocation (the wrapper's WriteBuffer allocates a callback handle per
// call). Errors land in the device's error scopes (collect).
func queueWrite(q *wgpu.Queue, b *wgpu.Buffer, offset uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	C.gpu_queue_write(rawQueue(q), rawBuffer(b), C.uint64_t(offset), unsafe.Pointer(&data[0]), C.size_t(len(data)))
}

// copyMapped copies the mapped range [offset, offset+len(dst)) of b.
func copyMapped(b *wgpu.Buffer, offset uint64, dst []byte) bool {
	if len(dst) == 0 {
		return true
	}
	return C.gpu_copy_mapped(rawBuffer(b), C.size_t(offset), C.size_t(len(dst)), unsafe.Pointer(&dst[0])) != 0
}

// onDone sets f once the work submitted to q so far has finished.
func onDone(q *wgpu.Queue, f flag) { C.gpu_on_done(rawQueue(q), f.c) }

func rawDevice(d *wgpu.Device) C.gpuDeviceRef {
	return *(*C.gpuDeviceRef)(unsafe.Pointer(d))
}

// createInstance creates an instance limited to the given backends, or
// returns nil.
func createInstance(backends uint32) *wgpu.Instance {
	ref := C.gpu_create_instance(C.uint32_t(backends))
	if ref == nil {
		return nil
	}
	inst := new(wgpu.Instance)
	*(*C.gpuInstanceRef)(unsafe.Pointer(inst)) = ref
	return inst
}

func pushBackstop(d *wgpu.Device) { C.gpu_push_backstop(rawDevice(d)) }

// backstop is where popBackstop receives what the two scopes caught:
// C memory, allocated once per device (a Go array handed to C would be
// allocated on every call, and collect runs after every dispatch).
type backstop struct{ out *C.gpuCaught }

func newBackstop() backstop {
	return backstop{(*C.gpuCaught)(C.calloc(2, C.size_t(unsafe.Sizeof(C.gpuCaught{}))))}
}

func (b backstop) free() { C.free(unsafe.Pointer(b.out)) }

// pop pops the backstop scopes of d and returns what they caught.
func (b backstop) pop(d *wgpu.Device) error {
	C.gpu_pop_backstop(rawDevice(d), b.out)
	var msgs []string
	for _, c := range unsafe.Slice(b.out, 2) {
		if c._type == 0 {
			continue
		}
		msg := "(no message)"
		if c.message != nil {
			msg = C.GoString(c.message)
			C.free(unsafe.Pointer(c.message))
		}
		msgs = append(msgs, fmt.Sprintf("%v error: %s", wgpu.ErrorType(c._type), msg))
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// unscopedValidationError makes wgpu report a validation error that no
// scope of the wrapper covers (tests only).
func unscopedValidationError(d *wgpu.Device) { C.gpu_unscoped_validation_error(rawDevice(d)) }
