//go:build cgo

package gpu

import (
	"errors"
	"fmt"

	"github.com/cogentcore/webgpu/wgpu"
)

// Buffer is a storage buffer on a Device (usage Storage|CopySrc|CopyDst).
type Buffer struct {
	d     *Device
	buf   *wgpu.Buffer // nil once released
	size  uint64
	label string
}

// Size is the buffer's size in bytes (the requested size rounded up to 4).
func (b *Buffer) Size() uint64 { return b.size }

// Label is the label given to NewBuffer.
func (b *Buffer) Label() string { return b.label }

// NewBuffer creates a zero-filled storage buffer of size bytes, rounded up
// to a multiple of 4 (at least 4). Sizes above Limits().MaxBufferSize are
// refused; a buffer larger than MaxStorageBufferBindingSize can be created
// but not bound to a slot.
func (d *Device) NewBuffer(size uint64, label string) (*Buffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	size = max(4, (size+3)&^3)
	if size > d.limits.MaxBufferSize {
		return nil, fmt.Errorf("gpu: buffer %q: size %d exceeds MaxBufferSize %d", label, size, d.limits.MaxBufferSize)
	}
	buf, err := d.dev.CreateBuffer(&wgpu.BufferDescriptor{
		Label: label,
		Size:  size,
		Usage: wgpu.BufferUsageStorage | wgpu.BufferUsageCopySrc | wgpu.BufferUsageCopyDst,
	})
	if err == nil {
		err = d.collect("new buffer") // out-of-memory lands here
		if err != nil {
			buf.Release()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gpu: buffer %q (%d bytes): %w", label, size, err)
	}
	b := &Buffer{d: d, buf: buf, size: size, label: label}
	d.buffers[b] = struct{}{}
	return b, nil
}

// Release frees the buffer. Dispatches already recorded that use it stay
// valid (wgpu reference-counts it); later use of b is an error. Releasing
// twice, or after the device is closed, is a no-op.
func (b *Buffer) Release() {
	d := b.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if b.buf == nil {
		return
	}
	b.buf.Release()
	b.buf = nil
	delete(d.buffers, b)
}

func (d *Device) checkBuffer(b *Buffer) error {
	switch {
	case d.closed:
		return ErrClosed
	case b == nil:
		return errors.New("gpu: nil buffer")
	case b.d != d:
		return fmt.Errorf("gpu: buffer %q belongs to another device", b.label)
	case b.buf == nil:
		return fmt.Errorf("gpu: buffer %q used after Release", b.label)
	}
	return nil
}

// Write copies data into b at byte offset. offset and len(data) must be
// multiples of 4. It is ordered after every Dispatch made before it: a
// pending batch is submitted first (without waiting).
func (d *Device) Write(b *Buffer, offset uint64, data []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkBuffer(b); err != nil {
		return err
	}
	n := uint64(len(data))
	if offset%4 != 0 || n%4 != 0 {
		return fmt.Errorf("gpu: write to %q: offset %d and length %d must be multiples of 4", b.label, offset, n)
	}
	if offset > b.size || n > b.size-offset {
		return fmt.Errorf("gpu: write to %q: [%d, %d) is outside its %d bytes", b.label, offset, offset+n, b.size)
	}
	if n == 0 {
		return nil
	}
	if err := d.flushLocked(); err != nil {
		return err
	}
	queueWrite(d.queue, b.buf, offset, data)
	return d.collectFor("write to", b.label)
}

// Read returns n bytes of b from byte offset (any alignment). It submits
// the pending batch, copies through a MapRead staging buffer and waits,
// polling the device, until the copy is mapped.
func (d *Device) Read(b *Buffer, offset, n uint64) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkBuffer(b); err != nil {
		return nil, err
	}
	if offset > b.size || n > b.size-offset {
		return nil, fmt.Errorf("gpu: read from %q: [%d, %d) is outside its %d bytes", b.label, offset, offset+n, b.size)
	}
	if n == 0 {
		return []byte{}, nil
	}
	if err := d.flushLocked(); err != nil {
		return nil, err
	}
	// Copies need 4-byte aligned offsets and sizes; b.size is a multiple
	// of 4, so the widened range stays inside b.
	lo := offset &^ 3
	hi := (offset + n + 3) &^ 3
	size := hi - lo
	out, err := d.readAligned(b, lo, size)
	if err != nil {
		return nil, fmt.Errorf("gpu: read from %q: %w", b.label, err)
	}
	return out[offset-lo : offset-lo+n], nil
}

// readAligned copies [lo, lo+size) of b to the host through the staging
// buffer, at most maxStaging bytes at a time (each chunk submitted,
// mapped, copied and unmapped before the next).
func (d *Device) readAligned(b *Buffer, lo, size uint64) (out []byte, err error) {
	defer func() {
		if cerr := d.collect("read"); err == nil && cerr != nil {
			out, err = nil, cerr
		}
	}()
	out = make([]byte, size)
	for done := uint64(0); done < size; {
		n := min(size-done, maxStaging)
		if err := d.readChunk(b, lo+done, out[done:done+n]); err != nil {
			return nil, err
		}
		done += n
	}
	return out, nil
}

// readChunk copies len(out) bytes of b from byte offset off (both
// multiples of 4, at most maxStaging) into out.
func (d *Device) readChunk(b *Buffer, off uint64, out []byte) error {
	size := uint64(len(out))
	staging, err := d.stagingFor(size)
	if err != nil {
		return err
	}
	enc, err := d.dev.CreateCommandEncoder(&wgpu.CommandEncoderDescriptor{Label: "tmmu-read"})
	if err != nil {
		return err
	}
	defer enc.Release()
	if err := enc.CopyBufferToBuffer(b.buf, off, staging, 0, size); err != nil {
		return err
	}
	cmd, err := enc.Finish(nil)
	if err != nil {
		return err
	}
	d.queue.Submit(cmd)
	d.stats.Submits++
	d.stats.Reads++
	d.stats.ReadBytes += size
	cmd.Release()
	if err := d.collect("submit"); err != nil {
		return err
	}
	f := newFlag()
	mapRead(staging, 0, size, f)
	if err := d.collect("map"); err != nil {
		// A refused map still calls back (with an error status); wait
		// for it before freeing the flag it writes.
		d.await(f)
		f.free()
		return err
	}
	d.await(f)
	status := f.status()
	f.free()
	if status != uint32(wgpu.BufferMapAsyncStatusSuccess) {
		return fmt.Errorf("map staging buffer: %v", wgpu.BufferMapAsyncStatus(status))
	}
	ok := copyMapped(staging, 0, out)
	if err := staging.Unmap(); err != nil {
		return err
	}
	if !ok {
		return errors.New("staging buffer mapped but its range is not readable")
	}
	return nil
}

// maxStaging bounds the device's staging buffer: a larger read goes
// through it in chunks, so reading a whole state costs at most this
// much host-visible memory beside the plan's buffers.
const maxStaging = 8 << 20

// stagingFor returns the device's MapRead staging buffer, grown (to the
// next power of two, at most maxStaging) to hold size bytes. One buffer
// serves every read: reads are serialised by the device's mutex and each
// unmaps it again.
func (d *Device) stagingFor(size uint64) (*wgpu.Buffer, error) {
	if d.staging != nil && d.stagingSize >= size {
		return d.staging, nil
	}
	n := uint64(256)
	for n < size {
		n *= 2
	}
	buf, err := d.dev.CreateBuffer(&wgpu.BufferDescriptor{
		Label: "tmmu-staging",
		Size:  n,
		Usage: wgpu.BufferUsageMapRead | wgpu.BufferUsageCopyDst,
	})
	if err == nil {
		if err = d.collect("staging buffer"); err != nil {
			buf.Release()
		}
	}
	if err != nil {
		return nil, err
	}
	if d.staging != nil {
		d.staging.Release()
	}
	d.staging, d.stagingSize = buf, n
	d.stats.StagingBuffers++
	return buf, nil
}
