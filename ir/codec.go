package ir

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/fxamacker/cbor/v2"

	"github.com/tmmu/tmmu/failure"
)

const opDecode = "UML_OS.Model.DecodeIR_v1"

// MaxItems bounds the number of elements in any one CBOR array or map the
// decoders accept (a 1M-tensor graph fits with room to spare).
const MaxItems = 1 << 26

var (
	canonicalEnc cbor.EncMode
	strictDec    cbor.DecMode
)

func init() {
	var err error
	canonicalEnc, err = cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	strictDec, err = cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
		MaxArrayElements:  MaxItems,
		MaxMapPairs:       MaxItems,
		MaxNestedLevels:   32,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// CanonicalCBOR encodes v with the core deterministic encoding of RFC 8949
// §4.2.1 (fxamacker/cbor CoreDetEncOptions). Every hash in tmmu is SHA-256
// over such bytes.
func CanonicalCBOR(v any) ([]byte, error) { return canonicalEnc.Marshal(v) }

// UnmarshalCBOR decodes strict CBOR (no duplicate or unknown keys, no
// indefinite lengths, no tags) into v.
func UnmarshalCBOR(data []byte, v any) error { return strictDec.Unmarshal(data, v) }

// MarshalJSON writes the model as indented JSON.
func (m *Model) MarshalIndentJSON() ([]byte, error) {
	return json.MarshalIndent(m, "", "  ")
}

// MarshalCBOR writes the model as canonical CBOR, preserving listing order.
func (m *Model) EncodeCBOR() ([]byte, error) { return CanonicalCBOR(m) }

// DecodeJSON parses a JSON model. Unknown fields and trailing data are
// errors (INVALID_IR_ENCODING).
func DecodeJSON(data []byte) (*Model, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Model
	if err := dec.Decode(&m); err != nil {
		return nil, encodingError("json", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, encodingError("json", fmt.Errorf("trailing data after the model"))
	}
	return &m, nil
}

// DecodeCBOR parses a CBOR model strictly (see UnmarshalCBOR).
func DecodeCBOR(data []byte) (*Model, error) {
	var m Model
	if err := strictDec.Unmarshal(data, &m); err != nil {
		return nil, encodingError("cbor", err)
	}
	return &m, nil
}

// Decode parses JSON when the first non-space byte is '{', else CBOR.
func Decode(data []byte) (*Model, error) {
	if IsJSON(data) {
		return DecodeJSON(data)
	}
	return DecodeCBOR(data)
}

// Load decodes data (JSON or CBOR, see Decode) and compiles it.
func Load(data []byte) (*Graph, error) {
	m, err := Decode(data)
	if err != nil {
		return nil, err
	}
	return Compile(m)
}

// IsJSON reports whether data looks like a JSON object.
func IsJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

func encodingError(format string, err error) error {
	return failure.New(failure.InvalidEncoding, opDecode, "cannot decode "+format+" IR: "+err.Error(), "format", format).Wrap(err)
}

// MarshalJSON encodes a DimRange as [min, max].
func (r DimRange) MarshalJSON() ([]byte, error) {
	return json.Marshal([2]uint64{r.Min, r.Max})
}

// UnmarshalJSON decodes [min, max].
func (r *DimRange) UnmarshalJSON(b []byte) error {
	var a [2]uint64
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) != 2 {
		return fmt.Errorf("shape_envelope entry must be [min, max], got %d values", len(raw))
	}
	for i := range raw {
		if err := json.Unmarshal(raw[i], &a[i]); err != nil {
			return err
		}
	}
	r.Min, r.Max = a[0], a[1]
	return nil
}
