package ir

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Hash is a SHA-256 digest. It prints and marshals as lowercase hex; in CBOR
// it is a 32-byte byte string.
type Hash [32]byte

// String returns the hex form.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Short returns the first 12 hex digits.
func (h Hash) Short() string { return h.String()[:12] }

// IsZero reports whether h is all zeros.
func (h Hash) IsZero() bool { return h == Hash{} }

// MarshalText implements encoding.TextMarshaler (used by JSON).
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText parses 64 hex digits.
func (h *Hash) UnmarshalText(b []byte) error {
	p, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = p
	return nil
}

// ParseHash parses 64 hex digits.
func ParseHash(s string) (Hash, error) {
	var h Hash
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return h, fmt.Errorf("not hex: %v", err)
	}
	if len(b) != len(h) {
		return h, fmt.Errorf("want %d bytes (%d hex digits), got %d bytes", len(h), 2*len(h), len(b))
	}
	copy(h[:], b)
	return h, nil
}

// Sum returns SHA-256 of the canonical CBOR encoding of v.
func Sum(v any) (Hash, error) {
	b, err := CanonicalCBOR(v)
	if err != nil {
		return Hash{}, err
	}
	return sha256.Sum256(b), nil
}

// Canonical returns a copy of m in the form ir_hash is taken over: tensors
// and nodes sorted by id, must_not_alias sorted and deduplicated, phases
// normalised ("" → forward), empty slices as nil, and no execution order
// (execution_order_hash covers it separately, spec II.K).
func (m *Model) Canonical() *Model {
	c := &Model{Name: m.Name}
	c.Tensors = make([]Tensor, len(m.Tensors))
	for i, j := range sortedBy(m.Tensors, func(t *Tensor) string { return t.ID }) {
		t := m.Tensors[j]
		if t.Shape == nil {
			t.Shape = []uint64{} // a scalar encodes as [] whichever way it was written
		}
		t.ShapeEnvelope = nilIfEmpty(t.ShapeEnvelope)
		if len(t.MustNotAlias) > 0 {
			t.MustNotAlias = slices.Compact(slices.Sorted(slices.Values(t.MustNotAlias)))
		} else {
			t.MustNotAlias = nil
		}
		if t.View != nil {
			v := *t.View
			v.Strides = nilIfEmpty(v.Strides)
			t.View = &v
		}
		c.Tensors[i] = t
	}
	c.Nodes = make([]Node, len(m.Nodes))
	for i, j := range sortedBy(m.Nodes, func(n *Node) string { return n.ID }) {
		n := m.Nodes[j]
		n.Phase = n.Phase.Norm()
		n.Inputs = nilIfEmpty(n.Inputs)
		n.Outputs = nilIfEmpty(n.Outputs)
		if len(n.Attrs) == 0 {
			n.Attrs = nil
		}
		c.Nodes[i] = n
	}
	return c
}

// sortedBy returns the indices of xs ordered by key, stably; it moves
// int32s, not the (large) elements.
func sortedBy[T any](xs []T, key func(*T) string) []int32 {
	idx := make([]int32, len(xs))
	sorted := true
	for i := range idx {
		idx[i] = int32(i)
		if i > 0 && key(&xs[i-1]) > key(&xs[i]) {
			sorted = false
		}
	}
	if !sorted {
		slices.SortStableFunc(idx, func(a, b int32) int { return strings.Compare(key(&xs[a]), key(&xs[b])) })
	}
	return idx
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// IRHash returns ir_hash: SHA-256 over the canonical CBOR of m.Canonical().
func (m *Model) IRHash() Hash { return hashCanonical(m.Canonical()) }

// ExecutionOrderHash returns SHA-256(CBOR_CANONICAL(order)) (spec II.K).
func ExecutionOrderHash(order []string) (Hash, error) {
	if order == nil {
		order = []string{}
	}
	return Sum(order)
}
