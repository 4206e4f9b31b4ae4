package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/tmmu/tmmu/failure"
)

// Operator names the package in its failures.
const Operator = "tmmu.data"

// Source is one file of a dataset: random access to its bytes, its size
// and a name for messages.
type Source interface {
	io.ReaderAt
	Size() int64
	Name() string
}

// File is a Source on a local (or mounted) file.
type File struct {
	f    *os.File
	size int64
	name string
}

// OpenFile opens path as a Source.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, failure.New(failure.IOError, Operator, err.Error(), "file", path).Wrap(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, failure.New(failure.IOError, Operator, err.Error(), "file", path).Wrap(err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, failure.New(failure.IOError, Operator, path+" is not a regular file", "file", path)
	}
	return &File{f: f, size: st.Size(), name: path}, nil
}

// ReadAt reads from the file.
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// Size is the file's size when opened.
func (f *File) Size() int64 { return f.size }

// Name is the path it was opened with.
func (f *File) Name() string { return f.name }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Format says how a dataset's files encode their values.
type Format string

// Formats.
const (
	// Uint16 and Uint32 are flat token files: little-endian token ids
	// and nothing else, as nanoGPT's prepare scripts (uint16) and
	// Megatron's indexed datasets (the .bin beside the .idx) write them.
	Uint16 Format = "uint16"
	Uint32 Format = "uint32"
	// NPY is NumPy's .npy: a 1-D integer array of token ids, or an N-D
	// float32 or uint8 array of samples (images) with a 1-D integer
	// label file of as many rows.
	NPY Format = "npy"
)

// Formats lists the formats in a fixed order (help texts).
var Formats = []Format{Uint16, Uint32, NPY}

// GuessFormat returns the format of a file name: NPY for .npy, Uint16
// for anything else (nanoGPT's .bin).
func GuessFormat(name string) Format {
	if strings.EqualFold(filepath.Ext(name), ".npy") {
		return NPY
	}
	return Uint16
}

// Kind is what a dataset holds.
type Kind string

// Kinds.
const (
	Tokens Kind = "tokens" // one stream of token ids, the files concatenated
	Images Kind = "images" // samples (any N-D shape) with class labels
)

// part is one file's array inside the dataset.
type part struct {
	src   Source
	elem  elemType
	off   int64  // byte offset of the first element
	n     uint64 // elements (token files) or samples (image and label files)
	first uint64 // global index of its first element or sample
}

// Dataset is one or more files read as one: a token stream (their
// tokens concatenated in the order given) or a set of samples with
// labels. It reads only what it is asked for, and counts it.
type Dataset struct {
	Kind   Kind
	Format Format
	// Len is the number of tokens (Tokens) or samples (Images).
	Len uint64
	// SampleShape is one sample's shape (Images), SampleType its
	// element type ("float32" or "uint8").
	SampleShape []uint64
	SampleType  string

	parts, labels []part
	sampleElems   uint64
	read, fed     atomic.Uint64
	// Fetched, when set, counts the bytes the dataset's sources fetched
	// from where they live (a store's whole blocks); nil: BytesRead.
	Fetched func() uint64
}

func invalid(src, format string, args ...any) *failure.Error {
	return failure.New(failure.InvalidDataset, Operator, fmt.Sprintf(format, args...), "file", src)
}

// Open reads the headers of a dataset's files (nothing else). labels is
// nil for token files and holds one label file per sample file for an
// image set.
func Open(format Format, files, labels []Source) (*Dataset, error) {
	if len(files) == 0 {
		return nil, failure.New(failure.InvalidDataset, Operator, "a dataset needs at least one file")
	}
	d := &Dataset{Format: format, Kind: Tokens}
	switch format {
	case Uint16, Uint32:
		if len(labels) > 0 {
			return nil, invalid(labels[0].Name(), "label files go with .npy sample arrays, not with %s token files", format)
		}
		size := 2
		if format == Uint32 {
			size = 4
		}
		for _, f := range files {
			if f.Size()%int64(size) != 0 {
				return nil, invalid(f.Name(), "%d bytes is not a whole number of %s tokens (%d bytes each): the file ends mid-token at offset %d", f.Size(), format, size, f.Size()/int64(size)*int64(size)).With("offset", f.Size()/int64(size)*int64(size))
			}
			d.parts = append(d.parts, part{src: f, elem: elemType{'u', size}, n: uint64(f.Size()) / uint64(size), first: d.Len})
			d.Len += uint64(f.Size()) / uint64(size)
		}
		return d, nil
	case NPY:
	default:
		return nil, failure.New(failure.InvalidDataset, Operator, fmt.Sprintf("format %q: want %s", format, formatList()), "format", format)
	}
	for i, f := range files {
		h, err := readNPYHeader(f, f.Size())
		if err != nil {
			return nil, invalid(f.Name(), "%v", err)
		}
		t, err := parseDescr(h.descr)
		if err != nil {
			return nil, invalid(f.Name(), "%v", err)
		}
		elems, ok := product(h.shape)
		if !ok || elems > uint64(f.Size()-h.dataOff)/uint64(t.size) || uint64(f.Size()-h.dataOff) != elems*uint64(t.size) {
			return nil, invalid(f.Name(), "shape %v of %s needs %s bytes after the header, the file has %d", h.shape, t, bytesString(elems, t.size, ok), f.Size()-h.dataOff).With("offset", h.dataOff)
		}
		if len(h.shape) == 0 {
			return nil, invalid(f.Name(), "a scalar is not a dataset")
		}
		p := part{src: f, elem: t, off: h.dataOff, first: d.Len}
		if len(labels) == 0 {
			if len(h.shape) != 1 || t.kind == 'f' {
				return nil, invalid(f.Name(), "a token file is a 1-D integer array, this one is %s of shape %v (an image set names its label files too)", t, h.shape)
			}
			p.n = h.shape[0]
			d.parts = append(d.parts, p)
			d.Len += p.n
			continue
		}
		d.Kind = Images
		if len(h.shape) < 2 || !(t.kind == 'f' || t == (elemType{'u', 1})) {
			return nil, invalid(f.Name(), "samples are an N-D float32 or uint8 array (N ≥ 2, the first dimension the samples), this one is %s of shape %v", t, h.shape)
		}
		if i == 0 {
			d.SampleShape, d.SampleType = h.shape[1:], t.String()
			d.sampleElems, _ = product(d.SampleShape)
		} else if !equal(h.shape[1:], d.SampleShape) || t.String() != d.SampleType {
			return nil, invalid(f.Name(), "samples of shape %v (%s), the first file's are %v (%s)", h.shape[1:], t, d.SampleShape, d.SampleType)
		}
		p.n = h.shape[0]
		d.parts = append(d.parts, p)
		d.Len += p.n
	}
	if len(labels) == 0 {
		return d, nil
	}
	if len(labels) != len(files) {
		return nil, failure.New(failure.InvalidDataset, Operator, fmt.Sprintf("%d sample files and %d label files: give one label file per sample file", len(files), len(labels)))
	}
	for i, f := range labels {
		h, err := readNPYHeader(f, f.Size())
		if err != nil {
			return nil, invalid(f.Name(), "%v", err)
		}
		t, err := parseDescr(h.descr)
		if err != nil {
			return nil, invalid(f.Name(), "%v", err)
		}
		if len(h.shape) != 1 || t.kind == 'f' {
			return nil, invalid(f.Name(), "labels are a 1-D integer array, this one is %s of shape %v", t, h.shape)
		}
		if uint64(f.Size()-h.dataOff) != h.shape[0]*uint64(t.size) {
			return nil, invalid(f.Name(), "shape %v of %s needs %d bytes after the header, the file has %d", h.shape, t, h.shape[0]*uint64(t.size), f.Size()-h.dataOff).With("offset", h.dataOff)
		}
		if h.shape[0] != d.parts[i].n {
			return nil, invalid(f.Name(), "%d labels for the %d samples of %s", h.shape[0], d.parts[i].n, d.parts[i].src.Name())
		}
		d.labels = append(d.labels, part{src: f, elem: t, off: h.dataOff, n: h.shape[0], first: d.parts[i].first})
	}
	return d, nil
}

func formatList() string {
	s := make([]string, len(Formats))
	for i, f := range Formats {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

func product(shape []uint64) (uint64, bool) {
	n := uint64(1)
	for _, d := range shape {
		if d != 0 && n > math.MaxUint64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

func bytesString(elems uint64, size int, ok bool) string {
	if !ok || elems > math.MaxUint64/uint64(size) {
		return "more than 2^64"
	}
	return fmt.Sprint(elems * uint64(size))
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BytesRead is how many bytes of data the dataset has read (headers
// excluded) since it was opened: S+1 tokens a row of S.
func (d *Dataset) BytesRead() uint64 { return d.read.Load() }

// BytesFed is how many bytes of the data streams fed (S tokens a row,
// at the files' width; a sample and its label).
func (d *Dataset) BytesFed() uint64 { return d.fed.Load() }

// BytesFetched is what the sources fetched to serve the reads (Fetched,
// or BytesRead when the sources read exact ranges).
func (d *Dataset) BytesFetched() uint64 {
	if d.Fetched != nil {
		return d.Fetched()
	}
	return d.read.Load()
}

// Files names the dataset's files in order (label files after).
func (d *Dataset) Files() []string {
	var s []string
	for _, p := range d.parts {
		s = append(s, p.src.Name())
	}
	for _, p := range d.labels {
		s = append(s, p.src.Name())
	}
	return s
}

// readRange reads elements [a, b) of the concatenated parts as int64
// values into dst (len b−a).
func (d *Dataset) readRange(parts []part, a, b uint64, dst []int64, buf *[]byte) error {
	for i := range parts {
		p := &parts[i]
		if b <= p.first || a >= p.first+p.n {
			continue
		}
		lo, hi := max(a, p.first)-p.first, min(b, p.first+p.n)-p.first
		nb := int((hi - lo) * uint64(p.elem.size))
		if cap(*buf) < nb {
			*buf = make([]byte, nb)
		}
		bb := (*buf)[:nb]
		if _, err := p.src.ReadAt(bb, p.off+int64(lo)*int64(p.elem.size)); err != nil {
			return readError(p.src, err)
		}
		d.read.Add(uint64(nb))
		decodeInts(p.elem, bb, dst[max(a, p.first)-a:])
	}
	return nil
}

// decodeInts decodes little-endian integers of type t into dst.
func decodeInts(t elemType, b []byte, dst []int64) {
	n := len(b) / t.size
	switch {
	case t.kind == 'u' && t.size == 1:
		for i := range n {
			dst[i] = int64(b[i])
		}
	case t.kind == 'i' && t.size == 1:
		for i := range n {
			dst[i] = int64(int8(b[i]))
		}
	case t.kind == 'u' && t.size == 2:
		for i := range n {
			dst[i] = int64(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case t.kind == 'i' && t.size == 2:
		for i := range n {
			dst[i] = int64(int16(binary.LittleEndian.Uint16(b[2*i:])))
		}
	case t.kind == 'u' && t.size == 4:
		for i := range n {
			dst[i] = int64(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case t.kind == 'i' && t.size == 4:
		for i := range n {
			dst[i] = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case t.kind == 'u' && t.size == 8:
		for i := range n {
			v := binary.LittleEndian.Uint64(b[8*i:])
			if v > math.MaxInt64 {
				v = math.MaxInt64 // out of any vocabulary: Scan refuses it
			}
			dst[i] = int64(v)
		}
	case t.kind == 'i' && t.size == 8:
		for i := range n {
			dst[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
	default:
		panic(fmt.Sprintf("data: decodeInts of %v", t))
	}
}

// Summary is what Scan learns of a dataset by reading all of it.
type Summary struct {
	// Digest identifies the dataset's content: SHA-256 over the format,
	// the kind and each file's SHA-256 and size, in order (names and
	// paths do not count, so a stored copy and a mounted one agree).
	Digest [32]byte
	// MaxToken is the largest token id (Tokens) or label (Images).
	MaxToken int64
	// Bytes is the files' total size.
	Bytes uint64
}

// DigestString is the digest in hex.
func (s Summary) DigestString() string { return hex.EncodeToString(s.Digest[:]) }

// scanChunk is how much of a file Scan reads at once.
const scanChunk = 1 << 20

// Scan reads the whole dataset once: it computes the digest and checks
// every token id (or label) against limit (the model's vocabulary or
// classes; 0 checks only for negative values), and every float sample
// for NaN and infinity. The first bad value is reported with
// INVALID_DATASET naming the file and the value's byte offset.
func (d *Dataset) Scan(limit uint64) (Summary, error) {
	var s Summary
	s.MaxToken = -1
	top := sha256.New()
	fmt.Fprintf(top, "tmmu-dataset-v1 format=%s kind=%s\n", d.Format, d.Kind)
	scan := func(p part, values bool, floats bool) error {
		h := sha256.New()
		buf := make([]byte, scanChunk) // a multiple of every element size
		vals := make([]int64, scanChunk)
		size := p.src.Size()
		read := func(off int64, n int) ([]byte, error) {
			if _, err := p.src.ReadAt(buf[:n], off); err != nil && !(err == io.EOF && off+int64(n) == size) {
				return nil, readError(p.src, err)
			}
			h.Write(buf[:n])
			return buf[:n], nil
		}
		if p.off > 0 { // the .npy header: hashed, not checked
			if _, err := read(0, int(p.off)); err != nil {
				return err
			}
		}
		for off := p.off; off < size; off += scanChunk {
			body, err := read(off, int(min(scanChunk, size-off)))
			if err != nil {
				return err
			}
			cnt := len(body) / p.elem.size
			switch {
			case floats:
				for i := range cnt {
					v := math.Float32frombits(binary.LittleEndian.Uint32(body[4*i:]))
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						at := off + 4*int64(i)
						return invalid(p.src.Name(), "sample value %v at byte offset %d", v, at).With("offset", at)
					}
				}
			case values:
				decodeInts(p.elem, body, vals)
				for i, v := range vals[:cnt] {
					if v >= 0 && (limit == 0 || uint64(v) < limit) {
						s.MaxToken = max(s.MaxToken, v)
						continue
					}
					at := off + int64(i)*int64(p.elem.size)
					what, bound := "token id", "vocabulary"
					if d.Kind == Images {
						what, bound = "label", "number of classes"
					}
					if v < 0 {
						return invalid(p.src.Name(), "%s %d at byte offset %d is negative", what, v, at).With("offset", at)
					}
					return invalid(p.src.Name(), "%s %d at byte offset %d is not below the model's %s (%d)", what, v, at, bound, limit).With("offset", at)
				}
			}
		}
		fmt.Fprintf(top, "%x %d\n", h.Sum(nil), size)
		s.Bytes += uint64(size)
		return nil
	}
	for _, p := range d.parts {
		if err := scan(p, d.Kind == Tokens, d.Kind == Images && d.SampleType == "float32"); err != nil {
			return Summary{}, err
		}
	}
	if len(d.labels) > 0 {
		fmt.Fprintln(top, "labels")
	}
	for _, p := range d.labels {
		if err := scan(p, true, false); err != nil {
			return Summary{}, err
		}
	}
	copy(s.Digest[:], top.Sum(nil))
	return s, nil
}

// TokenBytes is the bytes of one token of a token dataset (its first
// file's width).
func (d *Dataset) TokenBytes() uint64 {
	if d.Kind != Tokens || len(d.parts) == 0 {
		return 0
	}
	return uint64(d.parts[0].elem.size)
}

// readError is a failed read of src: its own failure when it carries
// one (a stored block that is gone or changed), else IO_ERROR.
func readError(src Source, err error) error {
	var fe *failure.Error
	if errors.As(err, &fe) {
		return err
	}
	return failure.New(failure.IOError, Operator, fmt.Sprintf("reading %s: %v", src.Name(), err), "file", src.Name()).Wrap(err)
}
