//go:build !cgo

package gpu

import "fmt"

// Without cgo there is no wgpu-native: Open always fails with
// ErrNoAdapter, so the rest of the API is unreachable (methods of the
// nil *Device it would return report that error).

var errNoCgo = fmt.Errorf("%w: built without cgo (CGO_ENABLED=0 or no C compiler)", ErrNoAdapter)

// Device is an open WebGPU device; without cgo none can be opened.
type Device struct{}

// Buffer is a storage buffer on a Device.
type Buffer struct{}

// Kernel is a compiled compute pipeline.
type Kernel struct{}

// Open fails: the package was built without cgo.
func Open(Options) (*Device, error) { return nil, errNoCgo }

func (d *Device) Info() Info                                   { return Info{} }
func (d *Device) Limits() Limits                               { return Limits{} }
func (d *Device) Close() error                                 { return nil }
func (d *Device) Stats() Stats                                 { return Stats{} }
func (d *Device) NewBuffer(uint64, string) (*Buffer, error)    { return nil, errNoCgo }
func (d *Device) Write(*Buffer, uint64, []byte) error          { return errNoCgo }
func (d *Device) Read(*Buffer, uint64, uint64) ([]byte, error) { return nil, errNoCgo }
func (d *Device) Compile(string, string) (*Kernel, error)      { return nil, errNoCgo }
func (d *Device) Dispatch(*Kernel, []*Buffer, []uint32, uint32, uint32, uint32) error {
	return errNoCgo
}
func (d *Device) Flush() error  { return errNoCgo }
func (d *Device) Wait() error   { return errNoCgo }
func (b *Buffer) Size() uint64  { return 0 }
func (b *Buffer) Label() string { return "" }
func (b *Buffer) Release()      {}
func (k *Kernel) Name() string  { return "" }

// Binding is a kernel bound for repeated dispatches.
type Binding struct{}

func (d *Device) Windows() Windows                                    { return Windows{} }
func (d *Device) Bind(*Kernel, []*Buffer, []uint32) (*Binding, error) { return nil, errNoCgo }
func (d *Device) BindRanges(*Kernel, []*Buffer, []Range, []uint32) (*Binding, error) {
	return nil, errNoCgo
}
func (b *Binding) SetParams(int, []uint32) error         { return errNoCgo }
func (b *Binding) Dispatch(uint32, uint32, uint32) error { return errNoCgo }
func (b *Binding) Release()                              {}
