// Package canon writes the few CBOR items tmmu hashes on hot paths (arrays,
// unsigned integers, text and byte strings) directly into a hash, in the
// core deterministic encoding of RFC 8949 §4.2.1: shortest-form heads,
// definite lengths. Its output is checked byte-for-byte against
// fxamacker/cbor's CoreDetEncOptions in the tests, so a hash computed here
// equals SHA-256 over that library's encoding of the same value, without
// building the value or allocating per item.
package canon

import (
	"crypto/sha256"
	"hash"
)

// CBOR major types.
const (
	majorUint  = 0 << 5
	majorNeg   = 1 << 5
	majorBytes = 2 << 5
	majorText  = 3 << 5
	majorArray = 4 << 5
)

// Writer accumulates CBOR into a buffer that it flushes into a hash.
type Writer struct {
	h   hash.Hash
	buf []byte
}

// NewSHA256 returns a Writer that hashes with SHA-256.
func NewSHA256() *Writer {
	return &Writer{h: sha256.New(), buf: make([]byte, 0, 64<<10)}
}

func (w *Writer) head(major byte, n uint64) {
	switch {
	case n < 24:
		w.buf = append(w.buf, major|byte(n))
	case n <= 0xff:
		w.buf = append(w.buf, major|24, byte(n))
	case n <= 0xffff:
		w.buf = append(w.buf, major|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		w.buf = append(w.buf, major|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	default:
		w.buf = append(w.buf, major|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
			byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	if len(w.buf) >= 60<<10 {
		w.flush()
	}
}

func (w *Writer) flush() {
	w.h.Write(w.buf)
	w.buf = w.buf[:0]
}

// Array writes the head of an array of n items; the items follow.
func (w *Writer) Array(n int) { w.head(majorArray, uint64(n)) }

// Uint writes an unsigned integer.
func (w *Writer) Uint(v uint64) { w.head(majorUint, v) }

// Int writes a signed integer (major type 1 for negatives).
func (w *Writer) Int(v int64) {
	if v < 0 {
		w.head(majorNeg, uint64(-1-v))
		return
	}
	w.head(majorUint, uint64(v))
}

// Text writes a UTF-8 text string.
func (w *Writer) Text(s string) {
	w.head(majorText, uint64(len(s)))
	w.buf = append(w.buf, s...)
}

// Bytes writes a byte string.
func (w *Writer) Bytes(b []byte) {
	w.head(majorBytes, uint64(len(b)))
	w.buf = append(w.buf, b...)
}

// Sum flushes and returns the digest.
func (w *Writer) Sum() [32]byte {
	w.flush()
	var out [32]byte
	w.h.Sum(out[:0])
	return out
}
