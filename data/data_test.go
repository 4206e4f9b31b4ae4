package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/data/datatest"
	"github.com/tmmu/tmmu/failure"
)

// mem is an in-memory Source.
type mem struct {
	*bytes.Reader
	name string
}

func (m mem) Name() string { return m.name }

func src(name string, b []byte) Source { return mem{bytes.NewReader(b), name} }

func u16(vals ...int) []byte {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	}
	return b
}

// npy writes a version-1 .npy file as NumPy does.
func npy(descr string, shape []uint64, body []byte) []byte { return datatest.NPY(descr, shape, body) }

func TestSequentialOrderIsTheFormula(t *testing.T) {
	toks := make([]int, 1000)
	for i := range toks {
		toks[i] = i % 50
	}
	// Two files: the stream is their concatenation.
	d, err := Open(Uint16, []Source{src("a.bin", u16(toks[:333]...)), src("b.bin", u16(toks[333:]...))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const S, B = 16, 6
	s, err := NewStream(d, Sequential, 0, [32]byte{}, S, B)
	if err != nil {
		t.Fatal(err)
	}
	T := uint64(len(toks))
	tok, lab := make([]int32, 2*S), make([]int32, 2*S)
	for k := range uint64(40) {
		for lo := uint64(0); lo < B; lo += 2 {
			if err := s.Tokens(k, lo, tok, lab); err != nil {
				t.Fatal(err)
			}
			for r := range uint64(2) {
				start := ((k*B + lo + r) * S) % (T - S - 1)
				for j := range uint64(S) {
					if tok[r*S+j] != int32(toks[start+j]) || lab[r*S+j] != int32(toks[start+j+1]) {
						t.Fatalf("step %d row %d token %d: %d/%d, want %d/%d", k, lo+r, j, tok[r*S+j], lab[r*S+j], toks[start+j], toks[start+j+1])
					}
				}
			}
		}
	}
	// A rank reads S+1 tokens a row: (S+1)/S of what it feeds.
	before := d.BytesRead()
	s.Tokens(41, 0, tok, lab)
	if got, want := d.BytesRead()-before, uint64(2*(S+1)*2); got != want {
		t.Errorf("2 rows read %d bytes, want %d", got, want)
	}
}

// TestOriginContinuesTheStream: a stream whose global batch changes at
// step k0 (SetOrigin to the rows consumed before it) reads, from k0 on,
// the rows that follow those: across 10 steps of 4 rows and then steps
// of 3, every global row of a single stream of rows is read once, in
// order, in both orders.
func TestOriginContinuesTheStream(t *testing.T) {
	toks := make([]int, 801)
	for i := range toks {
		toks[i] = (i * 11) % 89
	}
	d, _ := Open(Uint16, []Source{src("t.bin", u16(toks...))}, nil)
	const S = 8
	for _, order := range []Order{Sequential, Shuffled} {
		one, _ := NewStream(d, order, 5, [32]byte{3}, S, 1) // row g is step g's
		four, _ := NewStream(d, order, 5, [32]byte{3}, S, 4)
		three, _ := NewStream(d, order, 5, [32]byte{3}, S, 3)
		three.SetOrigin(10, 40)
		g := uint64(0)
		for k := range uint64(20) {
			s, B := four, uint64(4)
			if k >= 10 {
				s, B = three, 3
			}
			for r := range B {
				if got, want := s.Row(k, r), one.Row(g, 0); got != want {
					t.Fatalf("%s: step %d row %d starts at %d, global row %d at %d", order, k, r, got, g, want)
				}
				g++
			}
		}
	}
}

func TestShuffledEpochsArePermutations(t *testing.T) {
	for _, n := range []uint64{1, 2, 3, 5, 17, 64, 65, 1000, 4097} {
		for epoch := range uint64(3) {
			f := newFeistel(n, 7, epoch, [32]byte{1})
			seen := make([]bool, n)
			for i := range n {
				j := f.permute(i)
				if j >= n || seen[j] {
					t.Fatalf("n=%d epoch %d: %d → %d repeats or leaves the range", n, epoch, i, j)
				}
				seen[j] = true
			}
		}
	}
	a, b := newFeistel(1000, 1, 0, [32]byte{}), newFeistel(1000, 1, 1, [32]byte{})
	same := 0
	for i := range uint64(1000) {
		if a.permute(i) == b.permute(i) {
			same++
		}
	}
	if same > 20 {
		t.Errorf("epochs 0 and 1 agree on %d of 1000 places", same)
	}
}

// TestShuffledOrderIgnoresTheWorld: whatever the split of the global
// batch among ranks, row g of the stream gets the same tokens, and each
// epoch visits every window once.
func TestShuffledOrderIgnoresTheWorld(t *testing.T) {
	toks := make([]int, 801)
	for i := range toks {
		toks[i] = (i * 7) % 97
	}
	d, _ := Open(Uint16, []Source{src("t.bin", u16(toks...))}, nil)
	const S, B = 8, 8
	rows := func(world uint64) [][]int32 {
		var out [][]int32
		per := B / world
		streams := make([]*Stream, world)
		for w := range world {
			streams[w], _ = NewStream(d, Shuffled, 3, [32]byte{9}, S, B)
		}
		for k := range uint64(30) {
			for w := range world {
				tok, lab := make([]int32, per*S), make([]int32, per*S)
				if err := streams[w].Tokens(k, w*per, tok, lab); err != nil {
					t.Fatal(err)
				}
				for r := range per {
					out = append(out, tok[r*S:(r+1)*S])
				}
			}
		}
		return out
	}
	one, four := rows(1), rows(4)
	for g := range one {
		for j := range one[g] {
			if one[g][j] != four[g][j] {
				t.Fatalf("row %d differs between 1 and 4 ranks", g)
			}
		}
	}
	s, _ := NewStream(d, Shuffled, 3, [32]byte{9}, S, B)
	n := s.Samples()
	if n != 100 {
		t.Fatalf("%d windows, want 100", n)
	}
	seen := map[uint64]bool{}
	for g := range n {
		start := s.Row(g/B, g%B)
		if start%S != 0 || start+S >= uint64(len(toks)) || seen[start] {
			t.Fatalf("row %d starts at %d", g, start)
		}
		seen[start] = true
	}
	other, _ := NewStream(d, Shuffled, 4, [32]byte{9}, S, B)
	if s.Row(0, 0) == other.Row(0, 0) && s.Row(0, 1) == other.Row(0, 1) && s.Row(0, 2) == other.Row(0, 2) {
		t.Error("another seed gives the same first rows")
	}
}

func TestImagesAndLabels(t *testing.T) {
	// 3 uint8 samples of 2×2 and 2 float32 ones in a second file? No:
	// files of one set share dtype and shape; two uint8 files.
	img1 := npy("|u1", []uint64{3, 2, 2}, []byte{0, 255, 51, 102, 1, 2, 3, 4, 5, 6, 7, 8})
	img2 := npy("|u1", []uint64{1, 2, 2}, []byte{10, 20, 30, 40})
	lbl1 := npy("<i8", []uint64{3}, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 2), 0), 1))
	lbl2 := npy("<i8", []uint64{1}, binary.LittleEndian.AppendUint64(nil, 3))
	d, err := Open(NPY, []Source{src("i1.npy", img1), src("i2.npy", img2)}, []Source{src("l1.npy", lbl1), src("l2.npy", lbl2)})
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != Images || d.Len != 4 || d.SampleType != "uint8" || fmt.Sprint(d.SampleShape) != "[2 2]" {
		t.Fatalf("%+v", d)
	}
	s, err := NewStream(d, Sequential, 0, [32]byte{}, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]float32, 8), make([]int32, 2)
	if err := s.SamplesInto(1, 0, x, y); err != nil { // samples 2 and 3
		t.Fatal(err)
	}
	if y[0] != 1 || y[1] != 3 || x[0] != 5.0/255 || x[4] != 10.0/255 {
		t.Errorf("x %v y %v", x, y)
	}
	if _, err := d.Scan(3); !errors.Is(err, failure.InvalidDataset) || !strings.Contains(err.Error(), "l2.npy") || !strings.Contains(err.Error(), "label 3") {
		t.Errorf("a label past 3 classes: %v", err)
	}
	if _, err := d.Scan(4); err != nil {
		t.Error(err)
	}
}

func TestScan(t *testing.T) {
	a, b := src("a.bin", u16(1, 2, 3)), src("b.bin", u16(4, 70, 6))
	d, _ := Open(Uint16, []Source{a, b}, nil)
	_, err := d.Scan(64)
	var fe *failure.Error
	if !errors.As(err, &fe) || fe.Code != failure.InvalidDataset || fe.Diagnostics["file"] != "b.bin" || fe.Diagnostics["offset"] != "2" {
		t.Fatalf("token 70 at b.bin:2 past vocab 64: %v", err)
	}
	sum, err := d.Scan(71)
	if err != nil {
		t.Fatal(err)
	}
	if sum.MaxToken != 70 || sum.Bytes != 12 {
		t.Errorf("%+v", sum)
	}
	// The digest is the content's, not the names'.
	d2, _ := Open(Uint16, []Source{src("x/other.bin", u16(1, 2, 3)), src("y.bin", u16(4, 70, 6))}, nil)
	sum2, _ := d2.Scan(0)
	if sum2.Digest != sum.Digest {
		t.Error("renaming the files changed the digest")
	}
	d3, _ := Open(Uint16, []Source{src("a.bin", u16(1, 2, 3)), src("b.bin", u16(4, 70, 7))}, nil)
	sum3, _ := d3.Scan(0)
	if sum3.Digest == sum.Digest {
		t.Error("another token did not change the digest")
	}
	// The same bytes read as uint32 are another dataset.
	d4, _ := Open(Uint32, []Source{src("a.bin", u16(1, 2, 3, 4)), src("b.bin", u16(4, 70))}, nil)
	sum4, _ := d4.Scan(0)
	if sum4.Digest == sum.Digest {
		t.Error("the format does not count in the digest")
	}
	// A chunk boundary: a file larger than one scan chunk, the bad token
	// past it.
	big := make([]int, scanChunk/2+5)
	big[len(big)-1] = 999
	d5, _ := Open(Uint16, []Source{src("big.bin", u16(big...))}, nil)
	if _, err := d5.Scan(500); !errors.As(err, &fe) || fe.Diagnostics["offset"] != fmt.Sprint(2*(len(big)-1)) {
		t.Errorf("token past the first chunk: %v", err)
	}
}

func TestRefusesBadFiles(t *testing.T) {
	f32 := npy("<f4", []uint64{2, 2}, make([]byte, 16))
	cases := []struct {
		name, mention string
		format        Format
		files, labels []Source
	}{
		{"odd bytes", "ends mid-token at offset 4", Uint16, []Source{src("t.bin", []byte{1, 0, 2, 0, 3})}, nil},
		{"uint32 odd", "mid-token", Uint32, []Source{src("t.bin", make([]byte, 6))}, nil},
		{"no magic", "no .npy magic", NPY, []Source{src("t.npy", make([]byte, 80))}, nil},
		{"short npy", "needs 16 bytes", NPY, []Source{src("t.npy", npy("<u2", []uint64{8}, make([]byte, 10)))}, nil},
		{"big endian", "big-endian", NPY, []Source{src("t.npy", npy(">u2", []uint64{2}, make([]byte, 4)))}, nil},
		{"float tokens", "1-D integer array", NPY, []Source{src("t.npy", npy("<f4", []uint64{2}, make([]byte, 8)))}, nil},
		{"2-D tokens", "1-D integer array", NPY, []Source{src("t.npy", f32)}, nil},
		{"complex", "not one tmmu reads", NPY, []Source{src("t.npy", npy("<c8", []uint64{2}, make([]byte, 16)))}, nil},
		{"labels count", "1 labels for the 2 samples", NPY, []Source{src("x.npy", f32)}, []Source{src("y.npy", npy("<i8", []uint64{1}, make([]byte, 8)))}},
		{"labels float", "labels are a 1-D integer array", NPY, []Source{src("x.npy", f32)}, []Source{src("y.npy", npy("<f4", []uint64{2}, make([]byte, 8)))}},
		{"1-D samples", "N ≥ 2", NPY, []Source{src("x.npy", npy("<f4", []uint64{2}, make([]byte, 8)))}, []Source{src("y.npy", npy("<i8", []uint64{2}, make([]byte, 16)))}},
		{"format", `format "csv"`, "csv", []Source{src("t.csv", nil)}, nil},
		{"no files", "at least one file", Uint16, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(c.format, c.files, c.labels)
			if !errors.Is(err, failure.InvalidDataset) || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("got %v, want INVALID_DATASET mentioning %q", err, c.mention)
			}
		})
	}
	// Shorter than one row.
	d, _ := Open(Uint16, []Source{src("t.bin", u16(1, 2, 3, 4))}, nil)
	if _, err := NewStream(d, Sequential, 0, [32]byte{}, 4, 1); !errors.Is(err, failure.InvalidDataset) || !strings.Contains(err.Error(), "shorter than one sample") {
		t.Errorf("4 tokens for rows of 4: %v", err)
	}
	// NaN in a float sample set.
	nan := make([]byte, 16)
	binary.LittleEndian.PutUint32(nan[8:], math.Float32bits(float32(math.NaN())))
	d, err := Open(NPY, []Source{src("x.npy", npy("<f4", []uint64{2, 2}, nan))}, []Source{src("y.npy", npy("<i8", []uint64{2}, make([]byte, 16)))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Scan(10); !errors.Is(err, failure.InvalidDataset) || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("NaN sample: %v", err)
	}
}

// TestNumpyFiles reads .npy files NumPy itself wrote (testdata, made by
// testdata/make.py).
func TestNumpyFiles(t *testing.T) {
	paths, _ := filepath.Glob("testdata/*.npy")
	if len(paths) == 0 {
		t.Fatal("no testdata/*.npy")
	}
	for _, p := range paths {
		f, err := OpenFile(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var labels []Source
		if strings.Contains(p, "images") {
			l, err := OpenFile(strings.Replace(p, "images", "labels", 1))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			labels = []Source{l}
		} else if strings.Contains(p, "labels") {
			continue
		}
		d, err := Open(NPY, []Source{f}, labels)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		// Every file holds 0, 1, 2, … (tokens, labels) or i/10 (float images).
		if d.Kind == Tokens {
			s, _ := NewStream(d, Sequential, 0, [32]byte{}, 4, 1)
			tok, lab := make([]int32, 4), make([]int32, 4)
			s.Tokens(2, 0, tok, lab)
			if fmt.Sprint(tok, lab) != "[8 9 10 11] [9 10 11 12]" {
				t.Errorf("%s: %v %v", p, tok, lab)
			}
			continue
		}
		s, _ := NewStream(d, Sequential, 0, [32]byte{}, 0, 1)
		n := len(make([]float32, 1)) * int(d.sampleElems)
		x, y := make([]float32, n), make([]int32, 1)
		s.SamplesInto(1, 0, x, y)
		if y[0] != 1 || x[0] != float32(n)/10 {
			t.Errorf("%s: sample 1 starts %v, label %d", p, x[0], y[0])
		}
	}
	if _, err := os.Stat("testdata/make.py"); err != nil {
		t.Error("testdata/make.py is missing")
	}
}

func FuzzOpenNPY(f *testing.F) {
	f.Add(npy("<u2", []uint64{4}, u16(1, 2, 3, 4)), false)
	f.Add(npy("<f4", []uint64{1, 2}, make([]byte, 8)), true)
	f.Add(npy("|u1", []uint64{2, 1}, []byte{1, 2}), true)
	lbl := npy("<i8", []uint64{2}, make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte, images bool) {
		var labels []Source
		if images {
			labels = []Source{src("l.npy", lbl)}
		}
		d, err := Open(NPY, []Source{src("f.npy", b)}, labels)
		if err != nil {
			if failure.CodeOf(err) != failure.InvalidDataset {
				t.Fatalf("not INVALID_DATASET: %v", err)
			}
			return
		}
		// What opens reads back whole.
		if _, err := d.Scan(0); err != nil && failure.CodeOf(err) != failure.InvalidDataset {
			t.Fatal(err)
		}
		if d.Kind == Tokens && d.Len >= 4 {
			s, err := NewStream(d, Shuffled, 1, [32]byte{}, 2, 1)
			if err != nil {
				t.Fatal(err)
			}
			tok, lab := make([]int32, 2), make([]int32, 2)
			if err := s.Tokens(3, 0, tok, lab); err != nil {
				t.Fatal(err)
			}
		}
	})
}
