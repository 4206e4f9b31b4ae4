package ir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

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
		return nil, jsonError(data, err)
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

// Decode parses JSON when the first non-space byte is '{', CBOR when the
// first byte starts a CBOR map, and refuses anything else saying what it
// found.
func Decode(data []byte) (*Model, error) {
	if IsJSON(data) {
		return DecodeJSON(data)
	}
	if len(data) > 0 && data[0] >= 0xa0 && data[0] <= 0xbf {
		return DecodeCBOR(data)
	}
	return nil, failure.New(failure.InvalidEncoding, opDecode, "not a UML_Model_IR graph: expected JSON (an object, starting with '{') or CBOR (a map); found "+describe(data))
}

// describe says what bytes look like, for an error: empty, text (quoted,
// shortened) or binary (its first bytes in hex).
func describe(data []byte) string {
	if len(data) == 0 {
		return "nothing (0 bytes)"
	}
	head := data[:min(len(data), 32)]
	if utf8.Valid(head) && !bytes.ContainsFunc(head, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\r' && r != '\t' }) {
		return fmt.Sprintf("text starting %q (%d bytes)", strings.TrimSpace(string(head)), len(data))
	}
	return fmt.Sprintf("binary data starting % x (%d bytes)", head[:min(len(head), 8)], len(data))
}

// jsonError turns a JSON decoding error into a failure users can act on,
// without Go type names: a dimension that is not a positive integer is
// INVALID_IR_SHAPES naming the tensor; another value of the wrong kind
// names the field, what it takes and what was found.
func jsonError(data []byte, err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return encodingError("json", err)
	}
	if strings.HasSuffix(te.Field, "shape") || strings.HasSuffix(te.Field, "shape_envelope") {
		var loose struct {
			Tensors []struct {
				ID            string            `json:"id"`
				Shape         []json.RawMessage `json:"shape"`
				ShapeEnvelope []json.RawMessage `json:"shape_envelope"`
			} `json:"tensors"`
		}
		if json.Unmarshal(data, &loose) == nil {
			for _, t := range loose.Tensors {
				for i, d := range t.Shape {
					if _, perr := strconv.ParseUint(string(d), 10, 64); perr != nil {
						return failure.New(failure.InvalidIRShapes, opDecode, fmt.Sprintf("tensor %q: dimension %d of its shape is %s: dimensions are positive integers", t.ID, i, d), "tensor", t.ID)
					}
				}
				for i, r := range t.ShapeEnvelope {
					var v [2]uint64
					if json.Unmarshal(r, &v) != nil {
						return failure.New(failure.InvalidIRShapes, opDecode, fmt.Sprintf("tensor %q: shape_envelope entry %d is %s: each is [min, max] of positive integers", t.ID, i, r), "tensor", t.ID)
					}
				}
			}
		}
	}
	field := te.Field
	if field == "" {
		field = "the document"
	}
	return failure.New(failure.InvalidEncoding, opDecode, fmt.Sprintf("cannot decode json IR: %s takes %s, found %s (at byte %d)", field, kindWords(te.Type), te.Value, te.Offset), "field", te.Field)
}

// kindWords names what a Go type takes, in JSON's words.
func kindWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		return "an object"
	}
	return "another kind of value"
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
