package data

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/tmmu/tmmu/failure"
)

// Order is how a stream walks its dataset.
type Order string

// Orders.
const (
	// Sequential walks the data in file order: row r of the k-th step
	// (k = 0 first) of a global batch of B rows of S tokens starts at
	// token ((k·B + r)·S) mod (T − S − 1) of the T tokens, and its labels
	// are the S tokens after its first; for samples, row r of step k is
	// sample (k·B + r) mod N.
	Sequential Order = "sequential"
	// Shuffled walks epochs of a permutation of the samples: the
	// non-overlapping windows of S+1 tokens starting at multiples of S
	// (N = ⌊(T−1)/S⌋ of them), or the N samples. Global row g = k·B + r
	// is sample π_e(g mod N) of epoch e = ⌊g/N⌋, π_e a permutation drawn
	// from (seed, e, the dataset's digest). Which sample a row gets
	// depends on the global batch, never on the world size; a job whose
	// global batch changes sets the origin of the steps after the change
	// (SetOrigin) to the rows consumed before it.
	Shuffled Order = "shuffled"
)

// Stream is a dataset read in an order, in steps of a global batch.
type Stream struct {
	D      *Dataset
	Order  Order
	Seed   uint64
	Digest [32]byte // the dataset's (Summary.Digest): shuffled orders derive from it
	// Seq is the tokens per row (token datasets; 0 for samples), Batch
	// the global batch's rows.
	Seq, Batch uint64

	// origin: the k-th step's global rows start at row0 + (k−k0)·B
	// (SetOrigin; zero: k·B).
	k0, row0 uint64
	// samples is N (shuffled) or T − S − 1 (sequential tokens).
	samples uint64
	buf     []byte
	vals    []int64
	perm    struct {
		epoch uint64
		ok    bool
		p     feistel
	}
}

// NewStream checks that the dataset holds at least one row of seq
// tokens (token sets) and returns the stream.
func NewStream(d *Dataset, order Order, seed uint64, digest [32]byte, seq, batch uint64) (*Stream, error) {
	if batch == 0 {
		return nil, fmt.Errorf("data: a stream needs a batch of at least one row")
	}
	s := &Stream{D: d, Order: order, Seed: seed, Digest: digest, Seq: seq, Batch: batch}
	switch order {
	case Sequential, Shuffled:
	default:
		return nil, failure.New(failure.InvalidDataset, Operator, fmt.Sprintf("order %q: want sequential or shuffled", order), "order", order)
	}
	switch d.Kind {
	case Tokens:
		if seq == 0 {
			return nil, fmt.Errorf("data: a token stream needs a sequence length")
		}
		if d.Len < seq+2 {
			return nil, failure.New(failure.InvalidDataset, Operator,
				fmt.Sprintf("%d tokens in all: shorter than one sample of %d tokens and its label (%d tokens)", d.Len, seq, seq+2),
				"file", d.parts[len(d.parts)-1].src.Name())
		}
		s.samples = d.Len - seq - 1
		if order == Shuffled {
			s.samples = (d.Len - 1) / seq
		}
	case Images:
		if d.Len == 0 {
			return nil, failure.New(failure.InvalidDataset, Operator, "the image set holds no sample", "file", d.parts[0].src.Name())
		}
		s.samples = d.Len
	}
	return s, nil
}

// Samples is how many distinct rows the order draws from: the
// windows of a shuffled token set, the samples of an image set, and
// T − S − 1 starting tokens for a sequential token set.
func (s *Stream) Samples() uint64 { return s.samples }

// SetOrigin makes the k0-th step's global rows start at stream row
// row0 (and the next steps' follow): a job whose world size changed
// continues its stream where the steps before k0 left it (the rows they
// consumed at their own global batches), instead of at k0·B.
func (s *Stream) SetOrigin(k0, row0 uint64) { s.k0, s.row0 = k0, row0 }

// Row returns where global row r of the k-th step (k = 0 first) starts:
// a token index (token sets) or a sample index. Global row g = k·B + r,
// or row0 + (k−k0)·B + r from an origin (SetOrigin), picks the sample.
func (s *Stream) Row(k, r uint64) uint64 {
	g := mulAdd(k, s.Batch, r)
	if k >= s.k0 && (s.k0 != 0 || s.row0 != 0) {
		g = s.row0 + mulAdd(k-s.k0, s.Batch, r)
	}
	switch {
	case s.Order == Shuffled:
		e, i := g/s.samples, g%s.samples
		if !s.perm.ok || s.perm.epoch != e {
			s.perm.p = newFeistel(s.samples, s.Seed, e, s.Digest)
			s.perm.epoch, s.perm.ok = e, true
		}
		i = s.perm.p.permute(i)
		if s.D.Kind == Tokens {
			return i * s.Seq
		}
		return i
	case s.D.Kind == Tokens:
		// ((k·B + r)·S) mod (T − S − 1), without overflow.
		return mulMod(g%s.samples, s.Seq, s.samples)
	}
	return g % s.samples
}

// mulAdd is a·b + c wrapping at 2^64 (step counts never get there).
func mulAdd(a, b, c uint64) uint64 { return a*b + c }

// mulMod is a·b mod m with a 128-bit product.
func mulMod(a, b, m uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	_, rem := bits.Div64(hi%m, lo, m)
	return rem
}

// Tokens writes rows lo, lo+1, … of the k-th step's global batch into
// tok and lab (len(tok)/Seq rows each): each row's Seq tokens and the
// Seq tokens after its first (the labels). It reads Seq+1 tokens a row.
func (s *Stream) Tokens(k, lo uint64, tok, lab []int32) error {
	if s.D.Kind != Tokens {
		return fmt.Errorf("data: Tokens of a %s dataset", s.D.Kind)
	}
	S := s.Seq
	if uint64(len(tok))%S != 0 || len(lab) != len(tok) {
		return fmt.Errorf("data: %d tokens and %d labels for rows of %d", len(tok), len(lab), S)
	}
	if cap(s.vals) < int(S+1) {
		s.vals = make([]int64, S+1)
	}
	v := s.vals[:S+1]
	for i := range uint64(len(tok)) / S {
		start := s.Row(k, lo+i)
		if err := s.D.readRange(s.D.parts, start, start+S+1, v, &s.buf); err != nil {
			return err
		}
		for j := range S {
			tok[i*S+j], lab[i*S+j] = int32(v[j]), int32(v[j+1])
		}
	}
	s.D.fed.Add(uint64(len(tok)) * s.D.TokenBytes())
	return nil
}

// SamplesInto writes rows lo, lo+1, … of the k-th step's global batch of an
// image set into x (float32; uint8 samples are divided by 255, as
// torchvision's ToTensor does) and their labels into y.
func (s *Stream) SamplesInto(k, lo uint64, x []float32, y []int32) error {
	d := s.D
	if d.Kind != Images {
		return fmt.Errorf("data: samples of a %s dataset", d.Kind)
	}
	n := d.sampleElems
	if uint64(len(x)) != uint64(len(y))*n {
		return fmt.Errorf("data: %d values and %d labels for samples of %d values", len(x), len(y), n)
	}
	var lbl [1]int64
	for i := range uint64(len(y)) {
		idx := s.Row(k, lo+i)
		if err := d.readRange(d.labels, idx, idx+1, lbl[:], &s.buf); err != nil {
			return err
		}
		y[i] = int32(lbl[0])
		if err := d.readSample(idx, x[i*n:(i+1)*n], &s.buf); err != nil {
			return err
		}
		d.fed.Add(n*uint64(d.parts[0].elem.size) + uint64(d.labels[0].elem.size))
	}
	return nil
}

// readSample reads sample idx as float32 values.
func (d *Dataset) readSample(idx uint64, dst []float32, buf *[]byte) error {
	for i := range d.parts {
		p := &d.parts[i]
		if idx < p.first || idx >= p.first+p.n {
			continue
		}
		size := d.sampleElems * uint64(p.elem.size)
		if uint64(cap(*buf)) < size {
			*buf = make([]byte, size)
		}
		b := (*buf)[:size]
		if _, err := p.src.ReadAt(b, p.off+int64((idx-p.first)*size)); err != nil {
			return readError(p.src, err)
		}
		d.read.Add(size)
		if p.elem.kind == 'f' {
			for j := range dst {
				dst[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
			}
			return nil
		}
		for j := range dst {
			dst[j] = float32(b[j]) / 255
		}
		return nil
	}
	return fmt.Errorf("data: sample %d past the %d samples", idx, d.Len)
}

// feistel is a keyed permutation of [0, n): a balanced Feistel network
// on the smallest even number of bits that holds n, walked until its
// value falls below n (at most 4n/n = 4 tries expected).
type feistel struct {
	n    uint64
	half uint
	mask uint64
	keys [6]uint64
}

func newFeistel(n, seed, epoch uint64, digest [32]byte) feistel {
	b := uint(bits.Len64(n - 1))
	if b < 2 {
		b = 2
	}
	b += b & 1
	f := feistel{n: n, half: b / 2, mask: 1<<(b/2) - 1}
	h := sha256.New()
	var w [16]byte
	binary.LittleEndian.PutUint64(w[:8], seed)
	binary.LittleEndian.PutUint64(w[8:], epoch)
	h.Write([]byte("tmmu-shuffle-v1"))
	h.Write(w[:])
	h.Write(digest[:])
	sum := h.Sum(nil)
	x := binary.LittleEndian.Uint64(sum)
	for i := range f.keys {
		f.keys[i] = splitmix(&x) ^ binary.LittleEndian.Uint64(sum[8*(i%3+1):])
	}
	return f
}

func (f *feistel) permute(i uint64) uint64 {
	for {
		l, r := i>>f.half, i&f.mask
		for _, k := range f.keys {
			x := r ^ k
			l, r = r, l^(splitmix(&x)&f.mask)
		}
		i = l<<f.half | r
		if i < f.n {
			return i
		}
	}
}

func splitmix(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
