//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cogentcore/webgpu/wgpu"
)

// Kernel is a compiled compute pipeline.
type Kernel struct {
	d        *Device
	name     string
	wgsl     string
	pipeline *wgpu.ComputePipeline
}

// Name is the name the kernel was compiled under.
func (k *Kernel) Name() string { return k.name }

// Compile compiles a WGSL compute shader with entry point "main" against
// the calling convention's bind group layout. Pipelines are cached by
// name: compiling the same name and source again returns the cached
// kernel; the same name with different source is an error. WGSL and
// layout errors are returned (prefixed with the name), never fatal.
func (d *Device) Compile(name, wgsl string) (*Kernel, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if k, ok := d.kernels[name]; ok {
		if k.wgsl != wgsl {
			return nil, fmt.Errorf("gpu: kernel %q already compiled from different WGSL", name)
		}
		return k, nil
	}
	k, err := d.compile(name, wgsl)
	if cerr := d.collect("compile"); err == nil && cerr != nil {
		k.pipeline.Release()
		k, err = nil, cerr
	}
	if err != nil {
		return nil, fmt.Errorf("gpu: compile %q: %w", name, err)
	}
	d.kernels[name] = k
	return k, nil
}

func (d *Device) compile(name, wgsl string) (*Kernel, error) {
	mod, err := d.dev.CreateShaderModule(&wgpu.ShaderModuleDescriptor{
		Label:          name,
		WGSLDescriptor: &wgpu.ShaderModuleWGSLDescriptor{Code: wgsl},
	})
	if err != nil {
		return nil, err
	}
	defer mod.Release()
	p, err := d.dev.CreateComputePipeline(&wgpu.ComputePipelineDescriptor{
		Label:   name,
		Layout:  d.layout,
		Compute: wgpu.ProgrammableStageDescriptor{Module: mod, EntryPoint: EntryPoint},
	})
	if err != nil {
		return nil, err
	}
	return &Kernel{d: d, name: name, wgsl: wgsl, pipeline: p}, nil
}

// batch is the work recorded since the last submit: one command encoder
// with one open compute pass, the bind groups its dispatches use and the
// params buffers they read.
type batch struct {
	enc        *wgpu.CommandEncoder
	pass       *wgpu.ComputePassEncoder
	bindGroups []*wgpu.BindGroup
	buffers    []*wgpu.Buffer // released Bindings' params, released with the batch
	names      []string       // kernels dispatched, for error messages

	params    []*wgpu.Buffer // paramsChunk bytes each, reused across batches
	paramsIdx int            // chunk being filled
	paramsOff uint64         // next free byte in it
}

func (b *batch) empty() bool { return b.enc == nil }

// discard drops recorded, unsubmitted work.
func (b *batch) discard() {
	if b.pass != nil {
		b.pass.End()
		b.pass.Release()
	}
	if b.enc != nil {
		b.enc.Release()
	}
	for _, bg := range b.bindGroups {
		bg.Release()
	}
	for _, buf := range b.buffers {
		buf.Release()
	}
	// Keep the slices' memory for the next batch.
	clear(b.bindGroups)
	clear(b.buffers)
	*b = batch{params: b.params, bindGroups: b.bindGroups[:0], buffers: b.buffers[:0], names: b.names[:0]}
}

func (b *batch) releaseParams() {
	for _, p := range b.params {
		p.Release()
	}
	b.params = nil
}

// Dispatch records k over x*y*z workgroups with slots bound to bindings
// 0..len(slots)-1 (at most NumSlots; nil entries and missing slots are
// bound to a 16-byte dummy buffer; one buffer may fill several slots) and
// params bound to binding 6. The dispatch joins the current batch; it runs
// at the next Flush, Wait, Read or Write. Errors found while recording are
// returned here; errors wgpu only reports when the batch is finished or
// submitted are returned by that later call. Dispatch creates a bind
// group each time; Bind creates one to dispatch many times.
func (d *Device) Dispatch(k *Kernel, slots []*Buffer, params []uint32, x, y, z uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDispatch(k, slots, nil, params, x, y, z); err != nil {
		return err
	}
	pbuf, poff, psize, err := d.putParams(params)
	if err != nil {
		return fmt.Errorf("gpu: dispatch %q: params: %v", k.name, err)
	}
	bg, err := d.bindGroup(k, slots, nil, pbuf, poff, psize)
	if err != nil {
		return err
	}
	if err := d.record(k, bg, x, y, z); err != nil {
		bg.Release()
		return err
	}
	d.batch.bindGroups = append(d.batch.bindGroups, bg)
	return d.collectFor("dispatch", k.name)
}

func (d *Device) checkDispatch(k *Kernel, slots []*Buffer, ranges []Range, params []uint32, x, y, z uint32) error {
	if d.closed {
		return ErrClosed
	}
	if k == nil || k.d != d || k.pipeline == nil {
		return errors.New("gpu: dispatch: kernel is nil or not of this device")
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("gpu: dispatch %q: "+format, append([]any{k.name}, args...)...)
	}
	if len(slots) > NumSlots {
		return fail("%d slots given, at most %d", len(slots), NumSlots)
	}
	if ranges != nil && len(ranges) != len(slots) {
		return fail("%d ranges for %d slots", len(ranges), len(slots))
	}
	if len(params) > MaxParams {
		return fail("%d params words, at most %d", len(params), MaxParams)
	}
	if m := d.limits.MaxComputeWorkgroupsPerDimension; x > m || y > m || z > m {
		return fail("workgroups (%d, %d, %d) exceed MaxComputeWorkgroupsPerDimension %d", x, y, z, m)
	}
	for i, s := range slots {
		if s == nil {
			continue
		}
		if err := d.checkBuffer(s); err != nil {
			return fail("slot %d: %v", i, err)
		}
		if ranges != nil && ranges[i].Size > 0 {
			r := ranges[i]
			if a := uint64(d.limits.MinStorageBufferOffsetAlignment); r.Offset%a != 0 || r.Size%4 != 0 ||
				r.Size > d.windows.MaxSlotBytes || r.Offset > s.size || r.Size > s.size-r.Offset {
				return fail("slot %d: range [%d, +%d) of buffer %q (%d bytes) is not an aligned range of it of at most %d bytes",
					i, r.Offset, r.Size, s.label, s.size, d.windows.MaxSlotBytes)
			}
			continue
		}
		if s.size > d.windows.MaxSlotBytes {
			return fail("slot %d: buffer %q has %d bytes, above the %d one slot can bind (%d windows of %d bytes; MaxStorageBufferBindingSize %d)",
				i, s.label, s.size, d.windows.MaxSlotBytes, d.windows.Count, d.windows.Bytes, d.limits.MaxStorageBufferBindingSize)
		}
	}
	return nil
}

// bindGroup creates the bind group of slots and a params range. A slot
// with a range binds it: as window 0 when it fits one binding, else as
// windows of Bytes from its start. A slot without one binds the whole
// buffer as window 0 when it fits one binding, else as windows of Bytes
// from byte 0. Windows past the end are the dummy buffer.
func (d *Device) bindGroup(k *Kernel, slots []*Buffer, ranges []Range, pbuf *wgpu.Buffer, poff, psize uint64) (*wgpu.BindGroup, error) {
	ws := d.windows
	entries := make([]wgpu.BindGroupEntry, 0, NumSlots*ws.Count+1)
	for i := range NumSlots {
		var s *Buffer
		var r Range
		if i < len(slots) {
			s = slots[i]
		}
		if i < len(ranges) {
			r = ranges[i]
		}
		for w := range ws.Count {
			e := wgpu.BindGroupEntry{Binding: uint32(ws.Binding(i, w)), Buffer: d.dummy, Size: wgpu.WholeSize}
			switch {
			case s == nil:
			case r.Size > 0 && r.Size <= d.limits.MaxStorageBufferBindingSize:
				if w == 0 {
					e.Buffer, e.Offset, e.Size = s.buf, r.Offset, r.Size
				}
			case r.Size > 0:
				if at := uint64(w) * ws.Bytes; at < r.Size {
					e.Buffer, e.Offset, e.Size = s.buf, r.Offset+at, min(r.Size-at, ws.Bytes)
				}
			case w == 0 && s.size <= d.limits.MaxStorageBufferBindingSize:
				e.Buffer = s.buf
			case uint64(w)*ws.Bytes < s.size:
				e.Buffer, e.Offset = s.buf, uint64(w)*ws.Bytes
				e.Size = min(ws.Bytes, s.size-e.Offset)
			}
			entries = append(entries, e)
		}
	}
	entries = append(entries, wgpu.BindGroupEntry{Binding: ParamsBinding, Buffer: pbuf, Offset: poff, Size: psize})
	bg, err := d.dev.CreateBindGroup(&wgpu.BindGroupDescriptor{Label: k.name, Layout: d.bgl, Entries: entries})
	if err == nil {
		if err = d.collect("bind group"); err != nil {
			bg.Release()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gpu: dispatch %q: %v", k.name, err)
	}
	d.stats.BindGroups++
	return bg, nil
}

// record appends a dispatch of k with bg to the batch.
func (d *Device) record(k *Kernel, bg *wgpu.BindGroup, x, y, z uint32) error {
	b := &d.batch
	if b.empty() {
		enc, err := d.dev.CreateCommandEncoder(&wgpu.CommandEncoderDescriptor{Label: "tmmu-batch"})
		if err != nil {
			return fmt.Errorf("gpu: dispatch %q: %v", k.name, err)
		}
		b.enc = enc
		b.pass = enc.BeginComputePass(&wgpu.ComputePassDescriptor{Label: "tmmu-batch"})
	}
	d.stats.Dispatches++
	b.names = append(b.names, k.name)
	b.pass.SetPipeline(k.pipeline)
	b.pass.SetBindGroup(0, bg, nil)
	b.pass.DispatchWorkgroups(x, y, z)
	return nil
}

// Binding is a kernel with its slots and params bound once (one bind
// group and its own params buffer), to be dispatched any number of times
// without creating anything. SetParams rewrites params words between
// dispatches.
type Binding struct {
	d      *Device
	k      *Kernel
	bg     *wgpu.BindGroup // nil once released
	params *wgpu.Buffer
	words  int
	slots  []*Buffer
	ranges []Range
	gen    uint64 // batch generation of its last dispatch
}

// Bind binds k to slots and params for repeated dispatches (the same
// rules as Dispatch). Release it when done; it keeps the buffers' memory
// alive (a released Buffer cannot be dispatched through it).
func (d *Device) Bind(k *Kernel, slots []*Buffer, params []uint32) (*Binding, error) {
	return d.BindRanges(k, slots, nil, params)
}

// BindRanges is Bind with slot i bound to bytes [Offset, Offset+Size) of
// slots[i] where ranges[i].Size > 0 (Offset a multiple of
// MinStorageBufferOffsetAlignment, Size at most Windows().MaxSlotBytes):
// the kernel's word 0 of that slot is the range's first word. A range
// that fits one binding is window 0 (the slot's other windows are the
// dummy buffer); a larger one is windows of Windows().Bytes from
// Offset. A slot whose range is zero is bound as by Bind. ranges is nil
// or has one entry per slot.
func (d *Device) BindRanges(k *Kernel, slots []*Buffer, ranges []Range, params []uint32) (*Binding, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkDispatch(k, slots, ranges, params, 0, 0, 0); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		params = []uint32{0}
	}
	size := uint64(4 * len(params))
	pbuf, err := d.dev.CreateBuffer(&wgpu.BufferDescriptor{Label: k.name + "-params", Size: size, Usage: wgpu.BufferUsageStorage | wgpu.BufferUsageCopyDst})
	if err == nil {
		if err = d.collect("params buffer"); err != nil {
			pbuf.Release()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gpu: bind %q: params: %v", k.name, err)
	}
	queueWrite(d.queue, pbuf, 0, wgpu.ToBytes(params))
	bg, err := d.bindGroup(k, slots, ranges, pbuf, 0, size)
	if err != nil {
		pbuf.Release()
		return nil, err
	}
	return &Binding{d: d, k: k, bg: bg, params: pbuf, words: len(params), slots: slices.Clone(slots), ranges: slices.Clone(ranges)}, nil
}

// SetParams overwrites params words [at, at+len(words)). A dispatch
// already recorded with the old words is submitted first, so it still
// sees them.
func (b *Binding) SetParams(at int, words []uint32) error {
	d := b.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := b.check(); err != nil {
		return err
	}
	if at < 0 || at+len(words) > b.words {
		return fmt.Errorf("gpu: binding %q: params [%d, %d) outside its %d words", b.k.name, at, at+len(words), b.words)
	}
	if b.gen == d.gen && !d.batch.empty() {
		if err := d.flushLocked(); err != nil {
			return err
		}
	}
	queueWrite(d.queue, b.params, uint64(4*at), wgpu.ToBytes(words))
	return d.collectFor("params of", b.k.name)
}

// Dispatch records the bound kernel over x*y*z workgroups, like
// Device.Dispatch.
func (b *Binding) Dispatch(x, y, z uint32) error {
	d := b.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := b.check(); err != nil {
		return err
	}
	if err := d.checkDispatch(b.k, b.slots, b.ranges, nil, x, y, z); err != nil {
		return err
	}
	if err := d.record(b.k, b.bg, x, y, z); err != nil {
		return err
	}
	b.gen = d.gen
	return d.collectFor("dispatch", b.k.name)
}

func (b *Binding) check() error {
	switch {
	case b.d.closed:
		return ErrClosed
	case b.bg == nil:
		return fmt.Errorf("gpu: binding %q used after Release", b.k.name)
	}
	return nil
}

// Release frees the bind group and its params buffer (work already
// recorded keeps them alive). Releasing twice is a no-op.
func (b *Binding) Release() {
	d := b.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if b.bg == nil || d.closed {
		b.bg = nil
		return
	}
	if b.gen == d.gen && !d.batch.empty() {
		// A dispatch in the open batch uses them: wgpu-native resolves
		// a pass's bind groups when the pass ends, and aborts the
		// process if one was released before. The batch releases them
		// once it is submitted.
		d.batch.bindGroups = append(d.batch.bindGroups, b.bg)
		d.batch.buffers = append(d.batch.buffers, b.params)
	} else {
		b.bg.Release()
		b.params.Release()
	}
	b.bg, b.params, b.slots, b.ranges = nil, nil, nil, nil
}

// putParams writes params into the batch's params buffers and returns
// the buffer, offset and size of the binding.
func (d *Device) putParams(params []uint32) (*wgpu.Buffer, uint64, uint64, error) {
	b := &d.batch
	if len(params) == 0 {
		params = []uint32{0} // a binding of a runtime-sized array needs 4 bytes
	}
	size := uint64(4 * len(params))
	if b.paramsIdx < len(b.params) && b.paramsOff+size > paramsChunk {
		b.paramsIdx, b.paramsOff = b.paramsIdx+1, 0
	}
	if b.paramsIdx == len(b.params) {
		buf, err := d.dev.CreateBuffer(&wgpu.BufferDescriptor{
			Label: "tmmu-params",
			Size:  paramsChunk,
			Usage: wgpu.BufferUsageStorage | wgpu.BufferUsageCopyDst,
		})
		if err != nil {
			return nil, 0, 0, err
		}
		b.params = append(b.params, buf)
	}
	buf, off := b.params[b.paramsIdx], b.paramsOff
	// The write is staged and lands at the batch's submit, before its
	// commands; regions are never reused within a batch.
	queueWrite(d.queue, buf, off, wgpu.ToBytes(params))
	align := uint64(max(d.limits.MinStorageBufferOffsetAlignment, 4))
	b.paramsOff = (off + size + align - 1) / align * align
	return buf, off, size, nil
}

// Flush submits the pending batch without waiting for it.
func (d *Device) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	return d.flushLocked()
}

func (d *Device) flushLocked() error {
	b := &d.batch
	if b.empty() {
		return nil
	}
	names := b.names
	fail := func(err error) error {
		b.discard()
		return fmt.Errorf("gpu: batch of %d dispatches (%s): %w", len(names), summarize(names), err)
	}
	err := b.pass.End()
	b.pass.Release()
	b.pass = nil
	if err != nil {
		return fail(err)
	}
	cmd, err := b.enc.Finish(nil)
	if err != nil {
		return fail(err)
	}
	d.queue.Submit(cmd)
	d.gen++
	d.stats.Submits++
	cmd.Release()
	b.discard() // releases the encoder and bind groups; wgpu keeps what the submission uses
	if err := d.collect("submit"); err != nil {
		return fmt.Errorf("gpu: batch of %d dispatches (%s): %w", len(names), summarize(names), err)
	}
	return nil
}

func summarize(names []string) string {
	seen := map[string]bool{}
	var u []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			u = append(u, n)
		}
	}
	if len(u) > 8 {
		u = append(u[:8], "...")
	}
	return strings.Join(u, ", ")
}

// Wait submits the pending batch and blocks, polling the device, until
// the queue is idle.
func (d *Device) Wait() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	return d.waitLocked()
}

func (d *Device) waitLocked() error {
	err := d.flushLocked()
	f := newFlag()
	onDone(d.queue, f)
	d.await(f)
	f.free()
	if cerr := d.collect("wait"); err == nil {
		err = cerr
	}
	return err
}

// await polls the device until f is set. It never asks wgpu to block:
// wgpu-native's waiting poll gives up after a fixed time, which a long
// submission on a loaded CPU device can exceed, and treats that as fatal.
// Nor does it ever give up itself: work in flight is never abandoned, so
// nothing it uses is freed under it.
func (d *Device) await(f flag) {
	for i := 0; ; i++ {
		d.dev.Poll(false, nil)
		if f.done() {
			return
		}
		if i < 64 {
			runtime.Gosched()
			continue
		}
		time.Sleep(min(time.Duration(i-63)*20*time.Microsecond, time.Millisecond))
	}
}
