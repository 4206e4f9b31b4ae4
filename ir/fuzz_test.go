package ir_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/tmmu/tmmu/ir"
)

// seedModels returns the planner's hand-checked cases and the CLI's bad
// inputs as fuzz seeds.
func seedModels(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, pat := range []string{"../planner/testdata/cases/*.json", "../cmd/tmmu/testdata/bad/*.json"} {
		files, _ := filepath.Glob(pat)
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			seeds = append(seeds, b)
		}
	}
	return seeds
}

var equateEmpty = cmpopts.EquateEmpty()

// FuzzDecodeJSON: decoding never panics; a decoded model re-encodes and
// decodes to the same model; compiling it never panics.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range seedModels(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ir.DecodeJSON(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-encoding a decoded model: %v", err)
		}
		m2, err := ir.DecodeJSON(b)
		if err != nil {
			t.Fatalf("decoding a re-encoded model: %v\n%s", err, b)
		}
		if d := cmp.Diff(m, m2, equateEmpty); d != "" {
			t.Fatalf("JSON round trip changed the model (-first +second):\n%s", d)
		}
		_, _ = ir.Compile(m)
	})
}

// FuzzDecodeCBOR: as FuzzDecodeJSON for CBOR; canonical re-encoding is
// also a fixed point.
func FuzzDecodeCBOR(f *testing.F) {
	for _, s := range seedModels(f) {
		if m, err := ir.DecodeJSON(s); err == nil {
			b, err := m.EncodeCBOR()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ir.DecodeCBOR(data)
		if err != nil {
			return
		}
		b, err := m.EncodeCBOR()
		if err != nil {
			t.Fatalf("re-encoding a decoded model: %v", err)
		}
		m2, err := ir.DecodeCBOR(b)
		if err != nil {
			t.Fatalf("decoding a re-encoded model: %v", err)
		}
		if d := cmp.Diff(m, m2, equateEmpty); d != "" {
			t.Fatalf("CBOR round trip changed the model (-first +second):\n%s", d)
		}
		b2, err := m2.EncodeCBOR()
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("canonical CBOR is not a fixed point")
		}
		_, _ = ir.Compile(m)
	})
}
