// Package safetensors reads and writes the safetensors format
// (huggingface/safetensors), the file in which tmmu takes initial weights
// and gives trained ones back:
//
//	8 bytes   N, the header's length (little-endian uint64)
//	N bytes   a JSON object: for each tensor its "dtype", "shape" and
//	          "data_offsets" [begin, end) into the data that follows;
//	          optionally "__metadata__", a string-to-string map
//	the rest  the tensors' bytes, little-endian, row-major
//
// Open checks what the format's reference implementation checks: the
// header is valid UTF-8 JSON of at most MaxHeaderBytes, every dtype is
// known, each tensor's byte range holds exactly its shape's elements, and
// the ranges tile the data with no gap and no overlap. A file that fails
// any of them is refused with INVALID_ENCODING naming the tensor and the
// offset, before a byte of data is read.
//
// Write is deterministic: tensors in name order, data in that order,
// the header padded with spaces to a multiple of 8 bytes (as the
// reference writer does, so that every tensor starts aligned).
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/tmmu/tmmu/failure"
)

// Operator names the package in its failures.
const Operator = "tmmu.safetensors"

// MaxHeaderBytes bounds the JSON header (the reference implementation's
// limit).
const MaxHeaderBytes = 100 << 20

// DType is a safetensors element type ("F32", "BF16", ...).
type DType string

// The element types of the format.
const (
	Bool DType = "BOOL"
	U8   DType = "U8"
	I8   DType = "I8"
	F8E5 DType = "F8_E5M2"
	F8E4 DType = "F8_E4M3"
	I16  DType = "I16"
	U16  DType = "U16"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I32  DType = "I32"
	U32  DType = "U32"
	F32  DType = "F32"
	F64  DType = "F64"
	I64  DType = "I64"
	U64  DType = "U64"
)

// Size returns the bytes of one element, 0 for an unknown type.
func (d DType) Size() uint64 {
	switch d {
	case Bool, U8, I8, F8E5, F8E4:
		return 1
	case I16, U16, F16, BF16:
		return 2
	case I32, U32, F32:
		return 4
	case F64, I64, U64:
		return 8
	}
	return 0
}

// Info describes one tensor of a file.
type Info struct {
	Name  string
	DType DType
	Shape []uint64
	// Begin and End are the tensor's bytes in the data section.
	Begin, End uint64
}

// Elements returns the product of the shape (1 for a scalar).
func (i Info) Elements() uint64 {
	n := uint64(1)
	for _, d := range i.Shape {
		n *= d
	}
	return n
}

// File is an opened safetensors file: its header, and its data read on
// demand from the underlying reader.
type File struct {
	r io.ReaderAt
	// dataStart is where the data section begins (8 + header length).
	dataStart uint64
	// Tensors in name order.
	Tensors  []Info
	Metadata map[string]string
	byName   map[string]int
}

type headerEntry struct {
	DType       DType    `json:"dtype"`
	Shape       []uint64 `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

func bad(format string, args ...any) *failure.Error {
	return failure.Newf(failure.InvalidEncoding, Operator, "not a safetensors file: "+format, args...)
}

// Open reads and checks the header of a safetensors file of size bytes.
func Open(r io.ReaderAt, size int64) (*File, error) {
	if size < 8 {
		return nil, bad("%d bytes, shorter than the 8-byte header length", size)
	}
	var lb [8]byte
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, failure.New(failure.IOError, Operator, "reading the header length: "+err.Error()).Wrap(err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > MaxHeaderBytes {
		return nil, bad("header length %d exceeds %d", n, MaxHeaderBytes)
	}
	if n > uint64(size)-8 {
		return nil, bad("header length %d runs past the end of the %d-byte file", n, size)
	}
	if n == 0 {
		return nil, bad("the header is empty, not a JSON object")
	}
	hb := make([]byte, n)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return nil, failure.New(failure.IOError, Operator, "reading the header: "+err.Error()).Wrap(err)
	}
	if !utf8.Valid(hb) {
		return nil, bad("the header is not UTF-8")
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hb))
	if err := dec.Decode(&raw); err != nil {
		return nil, bad("the header is not a JSON object: %v", err)
	}
	if raw == nil {
		return nil, bad("the header is not a JSON object")
	}
	if rest := bytes.TrimRight(hb[dec.InputOffset():], " "); len(rest) > 0 {
		return nil, bad("the header has bytes after its JSON object")
	}
	f := &File{r: r, dataStart: 8 + n, byName: map[string]int{}}
	dataLen := uint64(size) - f.dataStart
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return nil, bad("__metadata__ is not a map of strings: %v", err)
			}
			continue
		}
		var e headerEntry
		d := json.NewDecoder(bytes.NewReader(msg))
		d.DisallowUnknownFields()
		if err := d.Decode(&e); err != nil {
			return nil, bad("tensor %q: %v", name, err)
		}
		if e.DType.Size() == 0 {
			return nil, bad("tensor %q: unknown dtype %q", name, e.DType)
		}
		if len(e.DataOffsets) != 2 || e.DataOffsets[0] > e.DataOffsets[1] {
			return nil, bad("tensor %q: data_offsets %v is not [begin, end]", name, e.DataOffsets)
		}
		if e.Shape == nil {
			return nil, bad("tensor %q: no shape", name)
		}
		info := Info{Name: name, DType: e.DType, Shape: e.Shape, Begin: e.DataOffsets[0], End: e.DataOffsets[1]}
		want, ok := byteCount(info)
		if !ok || want != info.End-info.Begin {
			return nil, bad("tensor %q: shape %v of %s needs %s bytes, data_offsets %v hold %d", name, info.Shape, info.DType, countString(want, ok), e.DataOffsets, info.End-info.Begin)
		}
		if info.End > dataLen {
			return nil, bad("tensor %q: data_offsets %v run past the %d bytes of data", name, e.DataOffsets, dataLen)
		}
		f.Tensors = append(f.Tensors, info)
	}
	// The ranges tile the data: sorted by offset, each begins where the
	// one before ended, and the last ends at the end of the file.
	byOff := slices.Clone(f.Tensors)
	slices.SortFunc(byOff, func(a, b Info) int {
		if c := cmpU64(a.Begin, b.Begin); c != 0 {
			return c
		}
		return cmpU64(a.End, b.End)
	})
	at := uint64(0)
	for _, t := range byOff {
		if t.Begin != at {
			if t.Begin < at {
				return nil, bad("tensor %q: data_offsets [%d, %d] overlap the tensor before (which ends at %d)", t.Name, t.Begin, t.End, at)
			}
			return nil, bad("tensor %q: data_offsets [%d, %d] leave bytes [%d, %d) of no tensor", t.Name, t.Begin, t.End, at, t.Begin)
		}
		at = t.End
	}
	if at != dataLen {
		return nil, bad("the tensors' data ends at %d of the file's %d bytes of data", at, dataLen)
	}
	slices.SortFunc(f.Tensors, func(a, b Info) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	for i, t := range f.Tensors {
		f.byName[t.Name] = i
	}
	return f, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// byteCount is the shape's bytes, false when it overflows.
func byteCount(i Info) (uint64, bool) {
	n := i.DType.Size()
	for _, d := range i.Shape {
		if d != 0 && n > math.MaxUint64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

func countString(n uint64, ok bool) string {
	if !ok {
		return "more than 2^64"
	}
	return fmt.Sprint(n)
}

// Lookup returns the tensor named name.
func (f *File) Lookup(name string) (Info, bool) {
	i, ok := f.byName[name]
	if !ok {
		return Info{}, false
	}
	return f.Tensors[i], true
}

// Read returns a tensor's bytes as stored (little-endian).
func (f *File) Read(t Info) ([]byte, error) {
	b := make([]byte, t.End-t.Begin)
	if _, err := f.r.ReadAt(b, int64(f.dataStart+t.Begin)); err != nil && !(err == io.EOF && len(b) == 0) {
		return nil, failure.New(failure.IOError, Operator, fmt.Sprintf("reading tensor %q: %v", t.Name, err), "tensor", t.Name).Wrap(err)
	}
	return b, nil
}

// Float32s reads a floating-point tensor as float32 values. F32 is read
// as is; F16 and BF16 widen exactly. Other dtypes are refused.
func (f *File) Float32s(t Info) ([]float32, error) {
	if !Widens(t.DType) {
		return nil, failure.New(failure.InvalidEncoding, Operator, fmt.Sprintf("tensor %q is %s, not a floating-point type that widens to F32", t.Name, t.DType), "tensor", t.Name)
	}
	b, err := f.Read(t)
	if err != nil {
		return nil, err
	}
	return DecodeFloat32s(t.DType, b), nil
}

// Widens reports whether d converts to float32 exactly (F32, F16, BF16).
func Widens(d DType) bool { return d == F32 || d == F16 || d == BF16 }

// DecodeFloat32s converts little-endian F32, F16 or BF16 bytes to float32.
func DecodeFloat32s(d DType, b []byte) []float32 {
	switch d {
	case F32:
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v
	case BF16:
		v := make([]float32, len(b)/2)
		for i := range v {
			v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
		return v
	case F16:
		v := make([]float32, len(b)/2)
		for i := range v {
			v[i] = halfToFloat(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return v
	}
	panic("safetensors: DecodeFloat32s of " + string(d))
}

// halfToFloat widens an IEEE 754 binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, nan
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
	case frac == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: frac · 2^-24.
	v := float32(frac) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}

// Tensor is one tensor to write.
type Tensor struct {
	Name  string
	DType DType
	Shape []uint64
	Data  []byte // little-endian, row-major; len = elements · DType.Size()
}

// F32Tensor makes an F32 tensor of values.
func F32Tensor(name string, shape []uint64, values []float32) Tensor {
	b := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return Tensor{Name: name, DType: F32, Shape: shape, Data: b}
}

// Write writes tensors (in name order, whatever their order in the
// slice) and metadata (nil: none) as a safetensors file.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	ts := slices.Clone(tensors)
	slices.SortFunc(ts, func(a, b Tensor) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	at := uint64(0)
	for i, t := range ts {
		if i > 0 && ts[i-1].Name == t.Name {
			return fmt.Errorf("safetensors: tensor %q given twice", t.Name)
		}
		if t.Name == "__metadata__" || t.Name == "" {
			return fmt.Errorf("safetensors: %q is not a tensor name", t.Name)
		}
		n, ok := byteCount(Info{DType: t.DType, Shape: t.Shape})
		if t.DType.Size() == 0 || !ok || n != uint64(len(t.Data)) {
			return fmt.Errorf("safetensors: tensor %q: %d bytes for shape %v of %s", t.Name, len(t.Data), t.Shape, t.DType)
		}
		shape := t.Shape
		if shape == nil {
			shape = []uint64{}
		}
		header[t.Name] = headerEntry{DType: t.DType, Shape: shape, DataOffsets: []uint64{at, at + n}}
		at += n
	}
	hb, err := json.Marshal(header) // map keys sorted
	if err != nil {
		return err
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(len(hb)))
	if _, err := w.Write(lb[:]); err != nil {
		return err
	}
	if _, err := w.Write(hb); err != nil {
		return err
	}
	for _, t := range ts {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}
