package planner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

const opDecodePlan = "UML_OS.TMMU.DecodePlan_v1"

// EncodeCBOR returns the plan's canonical CBOR: the checkpoint form (spec
// §10). Decoding it with DecodePlan restores an identical plan.
func (p *Plan) EncodeCBOR() ([]byte, error) { return ir.CanonicalCBOR(p) }

// DecodePlan parses a plan written as JSON (first non-space byte '{') or
// CBOR. Unknown fields are errors (INVALID_ENCODING). It checks the encoding
// only; Verify checks the plan against its IR.
func DecodePlan(data []byte) (*Plan, error) {
	var p Plan
	if ir.IsJSON(data) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return nil, planEncodingError("json", err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, planEncodingError("json", fmt.Errorf("trailing data after the plan"))
		}
	} else if err := ir.UnmarshalCBOR(data, &p); err != nil {
		return nil, planEncodingError("cbor", err)
	}
	return &p, nil
}

func planEncodingError(format string, err error) error {
	return failure.New(failure.InvalidEncoding, opDecodePlan, "cannot decode "+format+" plan: "+err.Error(), "format", format).Wrap(err)
}

// MarshalJSON writes {"id": {...}, ...} in id order.
func (m TensorMap) MarshalJSON() ([]byte, error) {
	return marshalKeyed(m, func(t *TensorPlacement) string { return t.ID })
}

// UnmarshalJSON reads {"id": {...}, ...} and sorts by id.
func (m *TensorMap) UnmarshalJSON(b []byte) error {
	return unmarshalKeyed(b, (*[]TensorPlacement)(m), func(t *TensorPlacement, id string) { t.ID = id }, func(t *TensorPlacement) string { return t.ID })
}

// MarshalJSON writes {"name": {...}, ...} in name order.
func (a Arenas) MarshalJSON() ([]byte, error) {
	return marshalKeyed(a, func(x *ArenaPlan) string { return x.Name })
}

// UnmarshalJSON reads {"name": {...}, ...} and sorts by name.
func (a *Arenas) UnmarshalJSON(b []byte) error {
	return unmarshalKeyed(b, (*[]ArenaPlan)(a), func(x *ArenaPlan, name string) { x.Name = name }, func(x *ArenaPlan) string { return x.Name })
}

func marshalKeyed[T any](items []T, key func(*T) string) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(key(&items[i]))
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(&items[i])
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func unmarshalKeyed[T any](b []byte, dst *[]T, setKey func(*T, string), key func(*T) string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil {
		return err
	}
	out := make([]T, 0, len(m))
	for k, raw := range m {
		var v T
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		setKey(&v, k)
		out = append(out, v)
	}
	slices.SortFunc(out, func(x, y T) int { return strings.Compare(key(&x), key(&y)) })
	*dst = out
	return nil
}
