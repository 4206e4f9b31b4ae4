module github.com/tmmu/tmmu

go 1.26.8

require (
	github.com/fxamacker/cbor/v2 v2.9.6 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
