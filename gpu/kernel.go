//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"strings"

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
	names      []string // kernels dispatched, for error messages

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
	*b = batch{params: b.params}
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
// submitted are returned by that later call.
func (d *Device) Dispatch(k *Kernel, slots []*Buffer, params []uint32, x, y, z uint32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
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
	if len(params) > MaxParams {
		return fail("%d params words, at most %d", len(params), MaxParams)
	}
	if m := d.limits.MaxComputeWorkgroupsPerDimension; x > m || y > m || z > m {
		return fail("workgroups (%d, %d, %d) exceed MaxComputeWorkgroupsPerDimension %d", x, y, z, m)
	}
	entries := make([]wgpu.BindGroupEntry, 0, NumSlots+1)
	for i := 0; i < NumSlots; i++ {
		buf := d.dummy
		if i < len(slots) && slots[i] != nil {
			s := slots[i]
			if err := d.checkBuffer(s); err != nil {
				return fail("slot %d: %v", i, err)
			}
			if s.size > d.limits.MaxStorageBufferBindingSize {
				return fail("slot %d: buffer %q has %d bytes, above MaxStorageBufferBindingSize %d",
					i, s.label, s.size, d.limits.MaxStorageBufferBindingSize)
			}
			buf = s.buf
		}
		entries = append(entries, wgpu.BindGroupEntry{Binding: uint32(i), Buffer: buf, Size: wgpu.WholeSize})
	}
	pbuf, poff, psize, err := d.putParams(params)
	if err != nil {
		return fail("params: %v", err)
	}
	entries = append(entries, wgpu.BindGroupEntry{Binding: ParamsBinding, Buffer: pbuf, Offset: poff, Size: psize})

	bg, err := d.dev.CreateBindGroup(&wgpu.BindGroupDescriptor{Label: k.name, Layout: d.bgl, Entries: entries})
	if err == nil {
		if err = d.collect("bind group"); err != nil {
			bg.Release()
		}
	}
	if err != nil {
		return fail("%v", err)
	}
	b := &d.batch
	if b.empty() {
		enc, err := d.dev.CreateCommandEncoder(&wgpu.CommandEncoderDescriptor{Label: "tmmu-batch"})
		if err != nil {
			bg.Release()
			return fail("%v", err)
		}
		b.enc = enc
		b.pass = enc.BeginComputePass(&wgpu.ComputePassDescriptor{Label: "tmmu-batch"})
	}
	b.bindGroups = append(b.bindGroups, bg)
	b.names = append(b.names, k.name)
	b.pass.SetPipeline(k.pipeline)
	b.pass.SetBindGroup(0, bg, nil)
	b.pass.DispatchWorkgroups(x, y, z)
	return d.collect("dispatch " + k.name)
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
	if err := d.queue.WriteBuffer(buf, off, wgpu.ToBytes(params)); err != nil {
		return nil, 0, 0, err
	}
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
	for i := 0; !d.dev.Poll(true, nil); i++ {
		if i == 1000 {
			if err == nil {
				err = errors.New("gpu: wait: queue never became idle")
			}
			break
		}
	}
	if cerr := d.collect("wait"); err == nil {
		err = cerr
	}
	return err
}
