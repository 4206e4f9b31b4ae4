package shard

import (
	"testing"

	"github.com/tmmu/tmmu/ir"
)

// FuzzDecode: any bytes decode and resolve or fail with a code; a resolved
// spec survives a canonical CBOR round trip with its hash unchanged, and
// resolving it again changes nothing.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"world_size": 8, "data_parallel": {"zero_stage": 2}, "tensor_parallel": {"degree": 2}, "preset": "gpt2"}`))
	f.Add([]byte(`{"world_size": 4, "pipeline": {"stages": [[0, 2], [2, 4]]}, "overrides": [{"tensor": "wte", "zero": "replicate"}]}`))
	f.Add([]byte(`{"world_size": 2, "tensor_parallel": {"degree": 2, "rules": [{"match": "h*.w", "split": "row"}]}, "sequence_parallel": true, "padding": "ceil"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			return
		}
		r, err := s.Resolve()
		if err != nil {
			return
		}
		b, err := ir.CanonicalCBOR(r)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Decode(b)
		if err != nil {
			t.Fatalf("canonical CBOR of a resolved spec does not decode: %v", err)
		}
		r2, err := s2.Resolve()
		if err != nil {
			t.Fatalf("a resolved spec does not resolve again: %v", err)
		}
		if r.Hash() != r2.Hash() {
			t.Fatalf("hash changed in a round trip: %s → %s", r.Hash().Short(), r2.Hash().Short())
		}
	})
}
