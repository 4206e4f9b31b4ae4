package canon

import (
	"crypto/sha256"
	"slices"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// TestMatchesFxamacker encodes the same nested value with this package and
// with fxamacker/cbor's core deterministic mode and compares the digests,
// across every head size.
func TestMatchesFxamacker(t *testing.T) {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	uints := []uint64{0, 1, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1}
	texts := []string{"", "a", strings.Repeat("x", 23), strings.Repeat("y", 24), strings.Repeat("z", 300), strings.Repeat("é", 40000)}
	blob := make([]byte, 70000)
	for i := range blob {
		blob[i] = byte(i)
	}
	ints := []int64{-1, -24, -25, -256, -257, -65537, -1 << 63, 5}
	var want []any
	w := NewSHA256()
	w.Array(len(uints) + len(ints) + len(texts) + 3)
	for _, u := range uints {
		want = append(want, u)
		w.Uint(u)
	}
	for _, v := range ints {
		want = append(want, v)
		w.Int(v)
	}
	for _, s := range texts {
		want = append(want, s)
		w.Text(s)
	}
	want = append(want, blob[:32])
	w.Bytes(blob[:32])
	// A large array of small arrays forces buffer flushes mid-stream.
	inner := make([]any, 5000)
	w.Array(len(inner))
	for i := range inner {
		inner[i] = []any{"t" + strings.Repeat("0", i%30), uint64(i) * 977}
		w.Array(2)
		w.Text("t" + strings.Repeat("0", i%30))
		w.Uint(uint64(i) * 977)
	}
	want = append(want, inner)
	want = append(want, map[string]any{"a": true, "bb": false})
	w.Map(2)
	w.Text("a")
	w.Bool(true)
	w.Text("bb")
	w.Bool(false)
	b, err := em.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if got, exp := w.Sum(), sha256.Sum256(b); got != exp {
		t.Fatalf("digest mismatch: canon %x, fxamacker %x", got, exp)
	}
}

// CompareKeys agrees with the key order fxamacker's canonical mode writes.
func TestCompareKeysMatchesFxamacker(t *testing.T) {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"b", "a", "ab", "ba", "zzz", "", "aaaa", strings.Repeat("k", 30), strings.Repeat("j", 31)}
	m := map[string]int{}
	for i, k := range keys {
		m[k] = i
	}
	want, err := em.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(keys, CompareKeys)
	w := NewSHA256()
	w.Map(len(keys))
	for _, k := range keys {
		w.Text(k)
		w.Uint(uint64(m[k]))
	}
	if w.Sum() != sha256.Sum256(want) {
		t.Fatalf("CompareKeys order %q differs from the library's", keys)
	}
}
