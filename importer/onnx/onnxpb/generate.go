// Package onnxpb is the Go code protoc-gen-go generates from onnx.proto,
// the ONNX model format (ONNX 1.12, IR version 8; Apache-2.0, copied
// unchanged from Debian's python3-onnx). Newer files decode too: fields
// this version does not know are skipped.
//
// To regenerate (Debian's protobuf-compiler, and protoc-gen-go from the
// module proxy: go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12):
//
//	go generate ./importer/onnx/onnxpb
package onnxpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go_opt=Monnx.proto=github.com/tmmu/tmmu/importer/onnx/onnxpb onnx.proto
