package ir

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"

	"github.com/fxamacker/cbor/v2"

	"github.com/tmmu/tmmu/failure"
)

// Call is how a node imported from PyTorch computes (tmmu import torch
// records it): the aten overload it calls, every argument in the
// schema's order with defaults filled in, and where each of its results
// lands. Tensor arguments and results are views of the node's input and
// output tensors (TensorRef), so an executor reads exactly what PyTorch
// read: a transposed weight, a slice of a fused projection, a broadcast
// bias. Planning ignores it; the engine executes it.
//
// A Call encodes in CBOR (and so in ir_hash) as the text of its JSON,
// which is deterministic: floats stay exact decimal strings and no float
// enters a hashed structure.
type Call struct {
	// Target is the overload: "aten::convolution.default",
	// "aten::add.Tensor", "tmmu::adamw_.default".
	Target string `json:"target"`
	Args   []Arg  `json:"args,omitempty"`
	// Results are the op's results in order (a tuple flattened); nil for
	// a result no tensor holds (None, or of no elements).
	Results []*TensorRef `json:"results,omitempty"`
}

// Arg is one argument of a Call; K says which field holds it:
//
//	t   T, a tensor            tl  TL, a list of tensors (nil: None)
//	i   I, an int              il  IL, a list of ints (or bools)
//	f   F, a float (Python's repr: "0.1", "-inf", "nan")
//	fl  FL, a list of floats   b   B, a bool
//	s   S, a string (a dtype: "fp32"; a device, layout or memory format)
//	n   None
type Arg struct {
	K  string       `json:"k"`
	T  *TensorRef   `json:"t,omitempty"`
	TL []*TensorRef `json:"tl,omitempty"`
	I  int64        `json:"i,omitempty"`
	IL []int64      `json:"il,omitempty"`
	F  string       `json:"f,omitempty"`
	FL []string     `json:"fl,omitempty"`
	B  bool         `json:"b,omitempty"`
	S  string       `json:"s,omitempty"`
}

// TensorRef is a view of a tensor of the graph: element (i0, i1, …) is
// element Offset + Σ i_d·Strides[d] of the tensor's storage, counted from
// the tensor's first element.
type TensorRef struct {
	ID      string   `json:"id"`
	Shape   []uint64 `json:"shape"`
	Strides []uint64 `json:"strides"`
	Offset  uint64   `json:"offset"`
}

// Renamed returns a copy of c whose references to tensor old name new
// instead (a pass that makes a node read another tensor of the same
// elements: a gathered copy of a partitioned parameter).
func (c *Call) Renamed(old, new string) *Call {
	if c == nil {
		return nil
	}
	ref := func(r *TensorRef) *TensorRef {
		if r == nil {
			return nil
		}
		x := *r
		if x.ID == old {
			x.ID = new
		}
		return &x
	}
	out := &Call{Target: c.Target, Args: make([]Arg, len(c.Args)), Results: make([]*TensorRef, len(c.Results))}
	for i, a := range c.Args {
		a.T = ref(a.T)
		if a.TL != nil {
			tl := make([]*TensorRef, len(a.TL))
			for j, r := range a.TL {
				tl[j] = ref(r)
			}
			a.TL = tl
		}
		out.Args[i] = a
	}
	for i, r := range c.Results {
		out.Results[i] = ref(r)
	}
	return out
}

// MarshalCBOR encodes c as the CBOR text of its JSON.
func (c *Call) MarshalCBOR() ([]byte, error) {
	j, err := json.Marshal((*callJSON)(c))
	if err != nil {
		return nil, err
	}
	return cbor.Marshal(string(j))
}

// UnmarshalCBOR decodes what MarshalCBOR encodes.
func (c *Call) UnmarshalCBOR(b []byte) error {
	var s string
	if err := cbor.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("ir: a call is a CBOR text of JSON: %w", err)
	}
	return json.Unmarshal([]byte(s), (*callJSON)(c))
}

// callJSON is Call without its CBOR methods.
type callJSON Call

// jsonText is the JSON that MarshalCBOR and ir_hash take.
func (c *Call) jsonText() string {
	j, _ := json.Marshal((*callJSON)(c))
	return string(j)
}

// checkCalls refuses a call whose tensor references name tensors that
// are not the node's inputs or outputs, or reach outside their storage.
func (g *Graph) checkCalls() error {
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.Call == nil {
			continue
		}
		bad := func(format string, args ...any) error {
			return failure.New(failure.InvalidIRGraph, OpValidate, fmt.Sprintf("node %s: call %s: ", quote(n.ID), n.Call.Target)+fmt.Sprintf(format, args...), "node", n.ID)
		}
		check := func(r *TensorRef, ids []string, what string) error {
			if r == nil {
				return nil
			}
			if !slices.Contains(ids, r.ID) {
				return bad("%s tensor %s is not one of the node's %ss", what, quote(r.ID), what)
			}
			if len(r.Strides) != len(r.Shape) {
				return bad("tensor %s: %d strides for %d dimensions", quote(r.ID), len(r.Strides), len(r.Shape))
			}
			ti := g.tensorIndex[r.ID]
			size := g.Tensors[ti].DType.Size()
			if size == 0 {
				return bad("tensor %s has no element size", quote(r.ID))
			}
			elems := (g.StorageBytes[g.Root[ti]] - g.RootOffset[ti]) / size
			last, ok := r.Offset, true
			for d, n := range r.Shape {
				if n == 0 {
					return nil // no element
				}
				hi, lo := bits.Mul64(n-1, r.Strides[d])
				var carry uint64
				last, carry = bits.Add64(last, lo, 0)
				ok = ok && hi == 0 && carry == 0
			}
			if !ok || last >= elems {
				return bad("tensor %s viewed with shape %v, strides %v from element %d reaches past its %d elements", quote(r.ID), r.Shape, r.Strides, r.Offset, elems)
			}
			return nil
		}
		for _, a := range n.Call.Args {
			if err := check(a.T, n.Inputs, "input"); err != nil {
				return err
			}
			for _, t := range a.TL {
				if err := check(t, n.Inputs, "input"); err != nil {
					return err
				}
			}
		}
		for _, r := range n.Call.Results {
			if err := check(r, n.Outputs, "output"); err != nil {
				return err
			}
		}
	}
	return nil
}

// RenameTensor renames tensor old to new everywhere the model names it:
// the tensor, views of it, nodes' inputs and outputs and their calls'
// references. It refuses (INVALID_IR_GRAPH) a name the model lacks or
// one it already has.
func (m *Model) RenameTensor(old, new string) error {
	at := -1
	for i := range m.Tensors {
		switch m.Tensors[i].ID {
		case old:
			at = i
		case new:
			return failure.New(failure.InvalidIRGraph, OpValidate, fmt.Sprintf("renaming %s to %s: the graph already has a tensor %s", quote(old), quote(new), quote(new)), "tensor", new)
		}
	}
	if at < 0 {
		return failure.New(failure.InvalidIRGraph, OpValidate, fmt.Sprintf("renaming %s to %s: the graph has no tensor %s", quote(old), quote(new), quote(old)), "tensor", old)
	}
	if old == new {
		return nil
	}
	m.Tensors[at].ID = new
	for i := range m.Tensors {
		if v := m.Tensors[i].View; v != nil && v.BaseTensor == old {
			v.BaseTensor = new
		}
	}
	for i := range m.Nodes {
		n := &m.Nodes[i]
		for _, list := range [][]string{n.Inputs, n.Outputs} {
			for j := range list {
				if list[j] == old {
					list[j] = new
				}
			}
		}
		n.Call = n.Call.Renamed(old, new)
	}
	return nil
}
