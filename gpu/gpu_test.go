//go:build cgo

package gpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// open opens a device or skips the test when there is no WebGPU adapter,
// unless TMMU_REQUIRE_WEBGPU=1 (set by CI, which installs the Vulkan CPU
// driver), where that is a failure.
func open(t testing.TB) *Device { t.Helper(); return openWith(t, Options{}) }

func openWith(t testing.TB, o Options) *Device {
	t.Helper()
	d, err := Open(o)
	if errors.Is(err, ErrNoAdapter) {
		if os.Getenv("TMMU_REQUIRE_WEBGPU") == "1" {
			t.Fatalf("TMMU_REQUIRE_WEBGPU=1 but: %v", err)
		}
		t.Skipf("no WebGPU adapter (install mesa-vulkan-drivers for the CPU one): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesf32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func bytesu32(b []byte) []uint32 {
	v := make([]uint32, len(b)/4)
	for i := range v {
		v[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return v
}

const bindings = `
@group(0) @binding(0) var<storage, read_write> r0: array<u32>;
@group(0) @binding(1) var<storage, read_write> r1: array<u32>;
@group(0) @binding(2) var<storage, read_write> r2: array<u32>;
@group(0) @binding(3) var<storage, read_write> r3: array<u32>;
@group(0) @binding(4) var<storage, read_write> r4: array<u32>;
@group(0) @binding(5) var<storage, read_write> r5: array<u32>;
@group(0) @binding(6) var<storage, read> params: array<u32>;
`

// add: r1[offOut+i] = r0[offA+i] + r2[offB+i] as f32, params = n, offA, offB, offOut.
const addWGSL = bindings + `
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
	let i = id.x;
	if (i >= params[0]) { return; }
	let a = bitcast<f32>(r0[params[1] + i]);
	let b = bitcast<f32>(r2[params[2] + i]);
	r1[params[3] + i] = bitcast<u32>(a + b);
}
`

func TestLimitsAndInfo(t *testing.T) {
	d := open(t)
	info, l := d.Info(), d.Limits()
	t.Logf("adapter: %+v", info)
	t.Logf("limits: %+v", l)
	if info.Name == "" || info.Backend == "" || info.Type == "" {
		t.Errorf("incomplete info %+v", info)
	}
	for name, v := range map[string]uint64{
		"MaxBufferSize":                    l.MaxBufferSize,
		"MaxStorageBufferBindingSize":      l.MaxStorageBufferBindingSize,
		"MinStorageBufferOffsetAlignment":  uint64(l.MinStorageBufferOffsetAlignment),
		"MaxStorageBuffersPerShaderStage":  uint64(l.MaxStorageBuffersPerShaderStage),
		"MaxComputeWorkgroupsPerDimension": uint64(l.MaxComputeWorkgroupsPerDimension),
	} {
		if v == 0 {
			t.Errorf("%s is 0", name)
		}
	}
	if a := l.MinStorageBufferOffsetAlignment; a&(a-1) != 0 {
		t.Errorf("MinStorageBufferOffsetAlignment %d is not a power of two", a)
	}
	if l.MaxStorageBufferBindingSize <= 128<<20 && l.MaxBufferSize <= 256<<20 {
		t.Logf("note: limits not above the WebGPU defaults")
	}
}

func TestAddAtOffsetsOfOneBuffer(t *testing.T) {
	d := open(t)
	k, err := d.Compile("add_f32", addWGSL)
	if err != nil {
		t.Fatal(err)
	}
	const n, offA, offB, offOut = 1000, 3, 1203, 17
	in := make([]float32, offB+n+5)
	for i := range in {
		in[i] = float32(i)*0.37 - 50.125 + float32(math.Sin(float64(i)))
	}
	src, err := d.NewBuffer(uint64(4*len(in)), "in")
	if err != nil {
		t.Fatal(err)
	}
	out, err := d.NewBuffer(4*(offOut+n), "out")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(src, 0, f32bytes(in)); err != nil {
		t.Fatal(err)
	}
	// The inputs live in one buffer, bound as slot 0 and slot 2.
	if err := d.Dispatch(k, []*Buffer{src, out, src}, []uint32{n, offA, offB, offOut}, (n+63)/64, 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(); err != nil {
		t.Fatal(err)
	}
	raw, err := d.Read(out, 4*offOut, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	got := bytesf32(raw)
	for i := 0; i < n; i++ {
		want := in[offA+i] + in[offB+i]
		if math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Fatalf("out[%d] = %v, want %v", i, got[i], want)
		}
	}
	// Untouched words before offOut stay zero.
	head, err := d.Read(out, 0, 4*offOut)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range bytesu32(head) {
		if v != 0 {
			t.Fatalf("out[%d] = %#x, want 0", i, v)
		}
	}
}

// One buffer in two read_write slots, read through one and written through
// the other, in the same dispatch: no usage-conflict error.
func TestSameBufferInTwoSlots(t *testing.T) {
	d := open(t)
	k, err := d.Compile("double_inplace", bindings+`
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
	let i = id.x;
	if (i >= params[0]) { return; }
	r3[i] = bitcast<u32>(bitcast<f32>(r0[i]) * 2.0);
}
`)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i) + 0.5
	}
	b, err := d.NewBuffer(4*n, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, f32bytes(in)); err != nil {
		t.Fatal(err)
	}
	if err := d.Dispatch(k, []*Buffer{b, b, nil, b}, []uint32{n}, 2, 1, 1); err != nil {
		t.Fatal(err)
	}
	raw, err := d.Read(b, 0, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range bytesf32(raw) {
		if v != in[i]*2 {
			t.Fatalf("x[%d] = %v, want %v", i, v, in[i]*2)
		}
	}
	// The same buffer in all six slots.
	if err := d.Dispatch(k, []*Buffer{b, b, b, b, b, b}, []uint32{n}, 2, 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestCompileErrors(t *testing.T) {
	d := open(t)
	for _, tc := range []struct{ name, wgsl string }{
		{"syntax_error", "fn main( {"},
		{"no_entry_point", bindings + "@compute @workgroup_size(1) fn other() {}"},
		{"binding_outside_layout", `@group(0) @binding(200) var<storage, read_write> r7: array<u32>;
@compute @workgroup_size(1) fn main() { r7[0] = 1u; }`},
		{"type_error", bindings + "@compute @workgroup_size(1) fn main() { r0[0] = 1.5; }"},
	} {
		_, err := d.Compile(tc.name, tc.wgsl)
		if err == nil {
			t.Errorf("%s: compiled", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: error does not name the kernel: %v", tc.name, err)
		}
		t.Logf("%s: %.200s", tc.name, strings.ReplaceAll(err.Error(), "\n", " | "))
	}
	// The device still works, and the cache is by name.
	k, err := d.Compile("add_f32", addWGSL)
	if err != nil {
		t.Fatal(err)
	}
	if k2, err := d.Compile("add_f32", addWGSL); err != nil || k2 != k {
		t.Errorf("recompile: %v, same kernel %v", err, k2 == k)
	}
	if _, err := d.Compile("add_f32", addWGSL+"\n// changed\n"); err == nil {
		t.Error("same name, different source: no error")
	}
	if err := d.Wait(); err != nil {
		t.Fatal(err)
	}
}

// Many dispatches with different params in one batch: each sees its own.
func TestBatchParams(t *testing.T) {
	d := open(t)
	k, err := d.Compile("store_param", bindings+`
@compute @workgroup_size(1)
fn main() {
	r0[params[0]] = params[1] + arrayLength(&params);
}
`)
	if err != nil {
		t.Fatal(err)
	}
	const n = 700 // spans several params chunks
	out, err := d.NewBuffer(4*n, "out")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		params := []uint32{uint32(i), uint32(i * 7)}
		params = append(params, make([]uint32, i%5)...)
		if err := d.Dispatch(k, []*Buffer{out}, params, 1, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := d.Read(out, 0, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range bytesu32(raw) {
		if want := uint32(i*7 + 2 + i%5); v != want {
			t.Fatalf("out[%d] = %d, want %d", i, v, want)
		}
	}
}

func TestReadWriteRanges(t *testing.T) {
	d := open(t)
	b, err := d.NewBuffer(10, "odd")
	if err != nil {
		t.Fatal(err)
	}
	if b.Size() != 12 {
		t.Errorf("size %d, want 12", b.Size())
	}
	if err := d.Write(b, 0, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}); err != nil {
		t.Fatal(err)
	}
	got, err := d.Read(b, 3, 6)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string([]byte{4, 5, 6, 7, 8, 9}) {
		t.Errorf("Read(3, 6) = %v", got)
	}
	if err := d.Write(b, 2, []byte{1, 2, 3, 4}); err == nil {
		t.Error("unaligned write accepted")
	}
	if err := d.Write(b, 8, make([]byte, 8)); err == nil {
		t.Error("write past the end accepted")
	}
	if _, err := d.Read(b, 8, 8); err == nil {
		t.Error("read past the end accepted")
	}
	if _, err := d.NewBuffer(d.Limits().MaxBufferSize+4, "huge"); err == nil {
		t.Error("buffer above MaxBufferSize accepted")
	}
}

// A read larger than the staging buffer goes through it in chunks: the
// bytes come back whole, from an unaligned offset across chunk
// boundaries, and the staging buffer stays at maxStaging.
func TestLargeReadInChunks(t *testing.T) {
	d := open(t)
	const size = 2*maxStaging + 1<<20
	b, err := d.NewBuffer(size, "large")
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*31 + i>>12)
	}
	if err := d.Write(b, 0, data); err != nil {
		t.Fatal(err)
	}
	before := d.Stats().Reads
	got, err := d.Read(b, 3, size-5)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[3:size-2]) {
		t.Fatal("a chunked read returned other bytes than were written")
	}
	if reads := d.Stats().Reads - before; reads != 3 {
		t.Errorf("%d reads for %d bytes, want 3 chunks of at most %d", reads, size-5, maxStaging)
	}
	if d.stagingSize > maxStaging {
		t.Errorf("staging buffer %d bytes, above %d", d.stagingSize, maxStaging)
	}
}

func TestErrorsAreReturned(t *testing.T) {
	d := open(t)
	k, err := d.Compile("add_f32", addWGSL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.NewBuffer(64, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Dispatch(k, make([]*Buffer, 7), nil, 1, 1, 1); err == nil {
		t.Error("7 slots accepted")
	}
	if err := d.Dispatch(k, []*Buffer{b}, nil, d.Limits().MaxComputeWorkgroupsPerDimension+1, 1, 1); err == nil {
		t.Error("too many workgroups accepted")
	}
	gone, err := d.NewBuffer(64, "gone")
	if err != nil {
		t.Fatal(err)
	}
	gone.Release()
	gone.Release()
	if err := d.Dispatch(k, []*Buffer{gone}, nil, 1, 1, 1); err == nil || !strings.Contains(err.Error(), "Release") {
		t.Errorf("released buffer: %v", err)
	}

	// A buffer destroyed after its dispatch was recorded: wgpu reports it
	// when the batch is ended; returned by Wait, not fatal.
	victim, err := d.NewBuffer(64, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Dispatch(k, []*Buffer{victim, b, victim}, []uint32{1, 0, 0, 0}, 1, 1, 1); err != nil {
		t.Fatal(err)
	}
	victim.buf.Destroy()
	err = d.Wait()
	if err == nil {
		t.Fatal("submit with a destroyed buffer: no error")
	}
	t.Logf("destroyed buffer: %v", err)

	// The device is still usable.
	if err := d.Dispatch(k, []*Buffer{b, b, b}, []uint32{1, 0, 1, 2}, 1, 1, 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Wait(); err != nil {
		t.Fatal(err)
	}
}

// An error that no scope of the wrapper covers (the wrapper scopes only
// validation errors, and not every call) would abort the process in
// wgpu-native; the device's backstop scopes turn it into an error of the
// next call.
func TestBackstopCatchesUnscopedErrors(t *testing.T) {
	d := open(t)
	d.mu.Lock()
	unscopedValidationError(d.dev)
	err := d.collect("test")
	d.mu.Unlock()
	if err == nil {
		t.Fatal("no error")
	}
	t.Logf("%v", err)
	if err := d.Wait(); err != nil {
		t.Errorf("error reported twice: %v", err)
	}
	// Still usable.
	b, err := d.NewBuffer(4, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Read(b, 0, 4); err != nil || got[3] != 4 {
		t.Fatalf("read %v, %v", got, err)
	}
}

func TestConcurrentUse(t *testing.T) {
	d := open(t)
	k, err := d.Compile("add_f32", addWGSL)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				const n = 256
				in := make([]float32, 2*n)
				for i := range in {
					in[i] = float32(g*1000 + i)
				}
				src, err := d.NewBuffer(4*2*n, "src")
				if err != nil {
					return err
				}
				defer src.Release()
				out, err := d.NewBuffer(4*n, "out")
				if err != nil {
					return err
				}
				defer out.Release()
				if err := d.Write(src, 0, f32bytes(in)); err != nil {
					return err
				}
				for rep := 0; rep < 5; rep++ {
					if err := d.Dispatch(k, []*Buffer{src, out, src}, []uint32{n, 0, n, 0}, n/64, 1, 1); err != nil {
						return err
					}
					raw, err := d.Read(out, 0, 4*n)
					if err != nil {
						return err
					}
					for i, v := range bytesf32(raw) {
						if want := in[i] + in[n+i]; v != want {
							return fmt.Errorf("goroutine %d: out[%d] = %v, want %v", g, i, v, want)
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestClose(t *testing.T) {
	d := open(t)
	b, err := d.NewBuffer(16, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.NewBuffer(16, "after"); !errors.Is(err, ErrClosed) {
		t.Errorf("NewBuffer after Close: %v", err)
	}
	if _, err := d.Read(b, 0, 4); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	b.Release()
}

// TestRoundTripTiming logs the latency of a trivial dispatch followed by
// a 4-byte read.
func TestRoundTripTiming(t *testing.T) {
	d := open(t)
	k, err := d.Compile("store_param", bindings+`
@compute @workgroup_size(1)
fn main() { r0[0] = params[0]; }
`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.NewBuffer(4, "b")
	if err != nil {
		t.Fatal(err)
	}
	var times []time.Duration
	for i := 0; i < 50; i++ {
		start := time.Now()
		if err := d.Dispatch(k, []*Buffer{b}, []uint32{uint32(i)}, 1, 1, 1); err != nil {
			t.Fatal(err)
		}
		raw, err := d.Read(b, 0, 4)
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, time.Since(start))
		if got := bytesu32(raw)[0]; got != uint32(i) {
			t.Fatalf("got %d, want %d", got, i)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	t.Logf("dispatch + 4-byte read round trip over 50: min %v, median %v, max %v (%s)",
		times[0], times[len(times)/2], times[len(times)-1], d.Info())
}

func BenchmarkRoundTrip(b *testing.B) {
	d := open(b)
	k, err := d.Compile("store_param", bindings+`
@compute @workgroup_size(1)
fn main() { r0[0] = params[0]; }
`)
	if err != nil {
		b.Fatal(err)
	}
	buf, err := d.NewBuffer(4, "b")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := d.Dispatch(k, []*Buffer{buf}, []uint32{uint32(i)}, 1, 1, 1); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Read(buf, 0, 4); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReadsUnderGC reads while another goroutine runs the garbage
// collector without pause. A read waits for a map callback that wgpu
// fires from Poll; state that callback needs must not live where the
// collector can free it in between (the wrapper's MapAsync kept its
// callback handle in Go memory only C pointed to: "misuse of an invalid
// Handle").
func TestReadsUnderGC(t *testing.T) {
	d := open(t)
	b, err := d.NewBuffer(1<<12, "gc")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 1<<12)
	for i := range want {
		want[i] = byte(i * 7)
	}
	if err := d.Write(b, 0, want); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// repeat runs f until the reads are done.
	repeat := func(f func()) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					f()
				}
			}
		})
	}
	repeat(runtime.GC)
	repeat(func() { // reuses freed small objects
		for i := range 1000 {
			x := new(uint64)
			*x = uint64(i) << 40
			gcSink = x
		}
	})
	defer func() { close(stop); wg.Wait() }()
	for i := range 2000 {
		got, err := d.Read(b, 0, uint64(len(want)))
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if string(got) != string(want) {
			t.Fatalf("read %d: wrong bytes", i)
		}
	}
}

var gcSink *uint64

// TestRuntimeDir: without XDG_RUNTIME_DIR, Open's runtimeDir sets a
// private directory, so Mesa's loader does not complain; a set one is
// kept.
func TestRuntimeDir(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/somewhere/else")
	runtimeDir()
	if got := os.Getenv("XDG_RUNTIME_DIR"); got != "/somewhere/else" {
		t.Fatalf("a set XDG_RUNTIME_DIR was replaced by %q", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	runtimeDir()
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if fi, err := os.Stat(dir); dir == "" || err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("XDG_RUNTIME_DIR %q: %v", dir, err)
	}
}
