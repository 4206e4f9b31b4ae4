package ir

import (
	"slices"

	"github.com/tmmu/tmmu/internal/canon"
)

// hashCanonical returns SHA-256 over the canonical CBOR of c (a model from
// Canonical), writing the encoding straight into the hash instead of
// building it with reflection: the same bytes CanonicalCBOR(c) produces,
// which TestCanonicalHashMatchesLibrary checks on random and generated
// models. Map keys are written in core deterministic order (shorter first,
// then bytewise), and fields tagged omitempty are left out when empty, as
// the struct tags of Model, Tensor, ViewDescriptor and Node say.
func hashCanonical(c *Model) Hash {
	w := canon.NewSHA256()
	pairs := 2
	if c.Name != "" {
		pairs++
	}
	w.Map(pairs)
	if c.Name != "" {
		w.Text("name")
		w.Text(c.Name)
	}
	w.Text("nodes")
	w.Array(len(c.Nodes))
	for i := range c.Nodes {
		encodeNode(w, &c.Nodes[i])
	}
	w.Text("tensors")
	w.Array(len(c.Tensors))
	for i := range c.Tensors {
		encodeTensor(w, &c.Tensors[i])
	}
	return w.Sum()
}

func encodeTensor(w *canon.Writer, t *Tensor) {
	n := 4 // id, role, dtype, shape
	for _, set := range []bool{t.Alignment != 0, t.AliasGroupID != "", t.InPlaceWrite, len(t.MustNotAlias) > 0,
		len(t.ShapeEnvelope) > 0, t.View != nil, t.SavedForBackward} {
		if set {
			n++
		}
	}
	w.Map(n)
	w.Text("id")
	w.Text(t.ID)
	w.Text("role")
	w.Text(string(t.Role))
	w.Text("dtype")
	w.Text(string(t.DType))
	w.Text("shape")
	uints(w, t.Shape)
	if t.Alignment != 0 {
		w.Text("alignment")
		w.Uint(t.Alignment)
	}
	if t.AliasGroupID != "" {
		w.Text("alias_group_id")
		w.Text(t.AliasGroupID)
	}
	if t.InPlaceWrite {
		w.Text("in_place_write")
		w.Bool(true)
	}
	if len(t.MustNotAlias) > 0 {
		w.Text("must_not_alias")
		w.Array(len(t.MustNotAlias))
		for _, s := range t.MustNotAlias {
			w.Text(s)
		}
	}
	if len(t.ShapeEnvelope) > 0 {
		w.Text("shape_envelope")
		w.Array(len(t.ShapeEnvelope))
		for _, r := range t.ShapeEnvelope {
			w.Array(2)
			w.Uint(r.Min)
			w.Uint(r.Max)
		}
	}
	if v := t.View; v != nil {
		w.Text("view_descriptor")
		if len(v.Strides) > 0 {
			w.Map(4)
			w.Text("strides")
			uints(w, v.Strides)
		} else {
			w.Map(3)
		}
		w.Text("base_tensor")
		w.Text(v.BaseTensor)
		w.Text("byte_length")
		w.Uint(v.ByteLength)
		w.Text("byte_offset")
		w.Uint(v.ByteOffset)
	}
	if t.SavedForBackward {
		w.Text("saved_for_backward")
		w.Bool(true)
	}
}

func encodeNode(w *canon.Writer, n *Node) {
	pairs := 2 // id, op
	for _, set := range []bool{len(n.Attrs) > 0, n.Phase != "", len(n.Inputs) > 0, len(n.Outputs) > 0, n.Call != nil} {
		if set {
			pairs++
		}
	}
	w.Map(pairs)
	w.Text("id")
	w.Text(n.ID)
	w.Text("op")
	w.Text(string(n.Op))
	if n.Call != nil {
		w.Text("call")
		w.Text(n.Call.jsonText())
	}
	if len(n.Attrs) > 0 {
		w.Text("attrs")
		keys := make([]string, 0, len(n.Attrs))
		for k := range n.Attrs {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, canon.CompareKeys)
		w.Map(len(keys))
		for _, k := range keys {
			w.Text(k)
			w.Int(n.Attrs[k])
		}
	}
	if n.Phase != "" {
		w.Text("phase")
		w.Text(string(n.Phase))
	}
	if len(n.Inputs) > 0 {
		w.Text("inputs")
		texts(w, n.Inputs)
	}
	if len(n.Outputs) > 0 {
		w.Text("outputs")
		texts(w, n.Outputs)
	}
}

func uints(w *canon.Writer, xs []uint64) {
	w.Array(len(xs))
	for _, x := range xs {
		w.Uint(x)
	}
}

func texts(w *canon.Writer, xs []string) {
	w.Array(len(xs))
	for _, x := range xs {
		w.Text(x)
	}
}
