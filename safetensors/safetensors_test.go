package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/failure"
)

func encode(t testing.TB, ts []Tensor, meta map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, ts, meta); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRoundTrip(t *testing.T) {
	ts := []Tensor{
		F32Tensor("b.weight", []uint64{2, 3}, []float32{1, 2, 3, 4, 5, -6}),
		F32Tensor("a.bias", []uint64{3}, []float32{0.5, -0.25, math.MaxFloat32}),
		{Name: "scalar", DType: I64, Shape: []uint64{}, Data: []byte{7, 0, 0, 0, 0, 0, 0, 0}},
		{Name: "empty", DType: F32, Shape: []uint64{0, 4}, Data: nil},
	}
	data := encode(t, ts, map[string]string{"format": "pt"})
	if n := binary.LittleEndian.Uint64(data); n%8 != 0 {
		t.Errorf("header length %d is not a multiple of 8", n)
	}
	f, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range f.Tensors {
		names = append(names, i.Name)
	}
	if want := []string{"a.bias", "b.weight", "empty", "scalar"}; !slices.Equal(names, want) {
		t.Fatalf("names %v, want %v", names, want)
	}
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata %v", f.Metadata)
	}
	w, _ := f.Lookup("b.weight")
	v, err := f.Float32s(w)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(v, []float32{1, 2, 3, 4, 5, -6}) || !slices.Equal(w.Shape, []uint64{2, 3}) {
		t.Errorf("b.weight %v %v", w.Shape, v)
	}
	s, _ := f.Lookup("scalar")
	if _, err := f.Float32s(s); !errors.Is(err, failure.InvalidEncoding) {
		t.Errorf("an I64 read as floats: %v", err)
	}
	// Deterministic: the same tensors in another order give the same bytes.
	slices.Reverse(ts)
	if again := encode(t, ts, map[string]string{"format": "pt"}); !bytes.Equal(again, data) {
		t.Error("the bytes depend on the order the tensors were given in")
	}
}

func TestWidening(t *testing.T) {
	// 1.0, -2.0, 65504 (max half), the smallest subnormal, +inf.
	half := []uint16{0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00}
	want := []float32{1, -2, 65504, float32(math.Ldexp(1, -24)), float32(math.Inf(1))}
	b := make([]byte, 2*len(half))
	for i, h := range half {
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	if got := DecodeFloat32s(F16, b); !slices.Equal(got, want) {
		t.Errorf("F16 %v, want %v", got, want)
	}
	// bf16 is the high half of a float32.
	for i, x := range []float32{1, -2, 3.140625} {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(x)>>16))
	}
	if got := DecodeFloat32s(BF16, b[:6]); !slices.Equal(got, []float32{1, -2, 3.140625}) {
		t.Errorf("BF16 %v", got)
	}
}

// raw builds a file from a header as written.
func raw(header string, data int) []byte {
	b := make([]byte, 8, 8+len(header)+data)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, data)...)
}

func TestRefusesMalformedFiles(t *testing.T) {
	cases := []struct {
		name, mention string
		file          []byte
	}{
		{"short", "shorter than", []byte{1, 2}},
		{"header past end", "runs past the end", raw(`{}`, 0)[:9]},
		{"empty header", "is empty", make([]byte, 8)},
		{"not json", "not a JSON object", raw(`[1,2]`, 0)},
		{"trailing", "bytes after", raw(`{} x`, 0)},
		{"unknown dtype", `unknown dtype "F12"`, raw(`{"a":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}}`, 4)},
		{"size mismatch", "needs 8 bytes", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4)},
		{"past data", "run past", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4)},
		{"gap", "of no tensor", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8)},
		{"overlap", "overlap", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, 8)},
		{"trailing data", "ends at 4", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 8)},
		{"reversed offsets", "is not [begin, end]", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, 4)},
		{"overflow", "more than 2^64", raw(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, 8)},
		{"unknown field", "unknown field", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, 4)},
		{"no shape", "no shape", raw(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(bytes.NewReader(c.file), int64(len(c.file)))
			if !errors.Is(err, failure.InvalidEncoding) || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("got %v, want INVALID_ENCODING mentioning %q", err, c.mention)
			}
		})
	}
}

func FuzzOpen(f *testing.F) {
	var b bytes.Buffer
	Write(&b, []Tensor{F32Tensor("w", []uint64{2}, []float32{1, 2}), {Name: "i", DType: U8, Shape: []uint64{3}, Data: []byte{1, 2, 3}}}, map[string]string{"k": "v"})
	f.Add(b.Bytes())
	f.Add(raw(`{"a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}`, 4))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Open(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if failure.CodeOf(err) != failure.InvalidEncoding {
				t.Fatalf("not INVALID_ENCODING: %v", err)
			}
			return
		}
		// Decode, encode again, decode again: the same tensors and bytes.
		var ts []Tensor
		for _, i := range file.Tensors {
			d, err := file.Read(i)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, Tensor{Name: i.Name, DType: i.DType, Shape: i.Shape, Data: d})
		}
		var out bytes.Buffer
		if err := Write(&out, ts, file.Metadata); err != nil {
			t.Fatal(err)
		}
		again, err := Open(bytes.NewReader(out.Bytes()), int64(out.Len()))
		if err != nil {
			t.Fatalf("re-encoded file refused: %v", err)
		}
		if len(again.Tensors) != len(file.Tensors) {
			t.Fatalf("%d tensors, then %d", len(file.Tensors), len(again.Tensors))
		}
		for k, i := range again.Tensors {
			j := file.Tensors[k]
			a, _ := again.Read(i)
			b, _ := file.Read(j)
			if i.Name != j.Name || i.DType != j.DType || !slices.Equal(i.Shape, j.Shape) || !bytes.Equal(a, b) {
				t.Fatalf("tensor %q changed in the round trip", i.Name)
			}
		}
	})
}
