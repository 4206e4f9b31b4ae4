// Package canon writes the few CBOR items tmmu hashes on hot paths (arrays,
// maps, integers, booleans, text and byte strings) directly into a hash, in the
// core deterministic encoding of RFC 8949 §4.2.1: shortest-form heads,
// definite lengths. Its output is checked byte-for-byte against
// fxamacker/cbor's CoreDetEncOptions in the tests, so a hash computed here
// equals SHA-256 over that library's encoding of the same value, without
// building the value or allocating per item.
package canon

import (
	"cmp"
	"crypto/sha256"
	"hash"
	"strings"
)

// CBOR major types.
const (
	majorUint   = 0 << 5
	majorNeg    = 1 << 5
	majorBytes  = 2 << 5
	majorText   = 3 << 5
	majorArray  = 4 << 5
	majorMap    = 5 << 5
	simpleFalse = 0xf4
	simpleTrue  = 0xf5
)

// bufSize is the buffer flushed into the hash: large enough to amortise
// hash calls, small enough to live inside the Writer.
const bufSize = 4 << 10

// Writer encodes CBOR items into a buffer that it flushes into a hash.
type Writer struct {
	h   hash.Hash
	n   int
	buf [bufSize]byte
}

// NewSHA256 returns a Writer that hashes with SHA-256.
func NewSHA256() *Writer { return &Writer{h: sha256.New()} }

func (w *Writer) head(major byte, v uint64) {
	if w.n > bufSize-9 {
		w.flush()
	}
	b := w.buf[w.n:]
	switch {
	case v < 24:
		b[0] = major | byte(v)
		w.n++
	case v <= 0xff:
		b[0], b[1] = major|24, byte(v)
		w.n += 2
	case v <= 0xffff:
		b[0], b[1], b[2] = major|25, byte(v>>8), byte(v)
		w.n += 3
	case v <= 0xffffffff:
		b[0], b[1], b[2], b[3], b[4] = major|26, byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
		w.n += 5
	default:
		b[0] = major | 27
		for i := 1; i <= 8; i++ {
			b[i] = byte(v >> (64 - 8*i))
		}
		w.n += 9
	}
}

func (w *Writer) flush() {
	w.h.Write(w.buf[:w.n])
	w.n = 0
}

// raw appends payload bytes, flushing as needed.
func (w *Writer) raw(p string) {
	for len(p) > 0 {
		if w.n == bufSize {
			w.flush()
		}
		k := copy(w.buf[w.n:], p)
		w.n += k
		p = p[k:]
	}
}

// Array writes the head of an array of n items; the items follow.
func (w *Writer) Array(n int) {
	if n < 24 && w.n < bufSize {
		w.buf[w.n] = majorArray | byte(n)
		w.n++
		return
	}
	w.head(majorArray, uint64(n))
}

// Map writes the head of a map of n pairs; keys and values follow, keys in
// canonical order (shorter first, then bytewise), which the caller ensures.
func (w *Writer) Map(n int) { w.head(majorMap, uint64(n)) }

// Bool writes true or false.
func (w *Writer) Bool(v bool) {
	if w.n == bufSize {
		w.flush()
	}
	w.buf[w.n] = simpleFalse
	if v {
		w.buf[w.n] = simpleTrue
	}
	w.n++
}

// Uint writes an unsigned integer.
func (w *Writer) Uint(v uint64) {
	if v < 24 && w.n < bufSize {
		w.buf[w.n] = byte(v)
		w.n++
		return
	}
	w.head(majorUint, v)
}

// Int writes a signed integer (major type 1 for negatives).
func (w *Writer) Int(v int64) {
	if v >= 0 && v < 24 && w.n < bufSize {
		w.buf[w.n] = byte(v)
		w.n++
		return
	}
	if v < 0 {
		w.head(majorNeg, uint64(-1-v))
		return
	}
	w.head(majorUint, uint64(v))
}

// Text writes a UTF-8 text string.
func (w *Writer) Text(s string) {
	// Fast path: a string under 256 bytes that fits the buffer.
	if n := len(s); n < 256 && w.n+2+n <= bufSize {
		b := w.buf[w.n:]
		if n < 24 {
			b[0] = majorText | byte(n)
			w.n += 1 + copy(b[1:], s)
		} else {
			b[0], b[1] = majorText|24, byte(n)
			w.n += 2 + copy(b[2:], s)
		}
		return
	}
	w.head(majorText, uint64(len(s)))
	w.raw(s)
}

// Bytes writes a byte string.
func (w *Writer) Bytes(b []byte) {
	w.head(majorBytes, uint64(len(b)))
	w.raw(string(b))
}

// CompareKeys orders text map keys as canonical CBOR does: shorter first,
// then bytewise. A map's keys must be written in this order.
func CompareKeys(a, b string) int {
	if c := cmp.Compare(len(a), len(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// Sum flushes and returns the digest.
func (w *Writer) Sum() [32]byte {
	w.flush()
	var out [32]byte
	w.h.Sum(out[:0])
	return out
}
