package onnx_test

import (
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/importer/onnx"
	"github.com/tmmu/tmmu/ir"
)

// FuzzImport feeds arbitrary bytes to the ONNX decoder and importer: they
// never panic, fail only with a failure code, and whatever they accept
// compiles or is refused by Compile with a failure code.
func FuzzImport(f *testing.F) {
	for _, name := range []string{"tinycnn.onnx", "tinycnn-noinfo.onnx", "tinyattn.onnx", "tinygpt.onnx", "tinywin-noinfo.onnx"} {
		f.Add(read(f, name), uint8(2))
	}
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, batch uint8) {
		m, _, err := onnx.Import(data, onnx.Options{Batch: uint64(batch), Dims: map[string]onnx.Bound{"seq": {Min: 1, Max: 4}}})
		if err != nil {
			if m != nil || failure.CodeOf(err) == "" {
				t.Fatalf("failed without a code, or with a model: %v", err)
			}
			return
		}
		if _, err := ir.Compile(m); err != nil && failure.CodeOf(err) == "" {
			t.Fatalf("compile: %v", err)
		}
	})
}
