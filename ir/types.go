package ir

import (
	"fmt"
	"math/bits"
)

// Model is a UML_Model_IR graph as users write it: tensors, nodes and the
// order in which the nodes execute. It is the file format (JSON or CBOR with
// the same field names); Compile validates it into a Graph.
//
// Listing order of Tensors and Nodes carries no meaning: the IR hash and
// every plan are the same for any permutation of the two lists. The order of
// ExecutionOrder is meaningful; when it is empty, Compile derives a
// deterministic topological order (ready nodes by ascending id).
type Model struct {
	Name           string   `json:"name,omitempty" cbor:"name,omitempty"`
	Tensors        []Tensor `json:"tensors" cbor:"tensors"`
	Nodes          []Node   `json:"nodes" cbor:"nodes"`
	ExecutionOrder []string `json:"execution_order,omitempty" cbor:"execution_order,omitempty"`
}

// Tensor describes one tensor of the graph.
type Tensor struct {
	ID    string   `json:"id" cbor:"id"`
	Shape []uint64 `json:"shape" cbor:"shape"` // [] is a scalar
	DType DType    `json:"dtype" cbor:"dtype"`
	Role  Role     `json:"role" cbor:"role"`

	// AliasGroupID names a group of tensors that share one storage (sized
	// to the largest member, alive while any member is).
	AliasGroupID string `json:"alias_group_id,omitempty" cbor:"alias_group_id,omitempty"`
	// View, when set, makes this tensor a window into the storage of
	// View.BaseTensor; it gets no storage of its own.
	View *ViewDescriptor `json:"view_descriptor,omitempty" cbor:"view_descriptor,omitempty"`
	// SavedForBackward keeps the tensor alive through its last backward
	// consumer (and to the end of a forward-only plan).
	SavedForBackward bool `json:"saved_for_backward,omitempty" cbor:"saved_for_backward,omitempty"`
	// InPlaceWrite declares that nodes update this tensor in place: they
	// list it both as an input and as an output.
	InPlaceWrite bool `json:"in_place_write,omitempty" cbor:"in_place_write,omitempty"`
	// MustNotAlias lists tensors that may never share a byte with this one,
	// even when their lifetimes do not overlap.
	MustNotAlias []string `json:"must_not_alias,omitempty" cbor:"must_not_alias,omitempty"`
	// Alignment is a byte alignment hint (a power of two; 0 = none). The
	// planner uses max(Alignment, arena alignment).
	Alignment uint64 `json:"alignment,omitempty" cbor:"alignment,omitempty"`
	// ShapeEnvelope bounds each dimension of a dynamic shape, one [min, max]
	// pair per dimension. Plans size the tensor at the maxima.
	ShapeEnvelope []DimRange `json:"shape_envelope,omitempty" cbor:"shape_envelope,omitempty"`
}

// ViewDescriptor places a view inside its base tensor's storage. Strides are
// in elements of the view's dtype; empty means contiguous.
type ViewDescriptor struct {
	BaseTensor string   `json:"base_tensor" cbor:"base_tensor"`
	ByteOffset uint64   `json:"byte_offset" cbor:"byte_offset"`
	ByteLength uint64   `json:"byte_length" cbor:"byte_length"`
	Strides    []uint64 `json:"strides,omitempty" cbor:"strides,omitempty"`
}

// DimRange is the inclusive range [Min, Max] of one dynamic dimension. It
// encodes as a two-element array.
type DimRange struct {
	_   struct{} `cbor:",toarray"`
	Min uint64
	Max uint64
}

// Node is one operation. A node that lists a tensor among its outputs but not
// its inputs defines it (at most one node may); a node that lists a tensor as
// both input and output updates it in place.
type Node struct {
	ID      string           `json:"id" cbor:"id"`
	Op      Op               `json:"op" cbor:"op"`
	Inputs  []string         `json:"inputs,omitempty" cbor:"inputs,omitempty"`
	Outputs []string         `json:"outputs,omitempty" cbor:"outputs,omitempty"`
	Phase   Phase            `json:"phase,omitempty" cbor:"phase,omitempty"` // "" reads as forward
	Attrs   map[string]int64 `json:"attrs,omitempty" cbor:"attrs,omitempty"` // integer attributes (no floats in hashed data)
	// Call is how an imported node computes (nil for tmmu's own ops).
	Call *Call `json:"call,omitempty" cbor:"call,omitempty"`
}

// DType is a tensor element type.
type DType string

// Supported element types.
const (
	F64  DType = "fp64"
	F32  DType = "fp32"
	BF16 DType = "bf16"
	F16  DType = "fp16"
	F8E4 DType = "fp8_e4m3"
	F8E5 DType = "fp8_e5m2"
	I64  DType = "int64"
	I32  DType = "int32"
	I16  DType = "int16"
	I8   DType = "int8"
	U8   DType = "uint8"
	Bool DType = "bool"
)

// DTypes lists the supported element types.
var DTypes = []DType{F64, F32, BF16, F16, F8E4, F8E5, I64, I32, I16, I8, U8, Bool}

// Size returns the element size in bytes, or 0 for an unknown dtype.
func (d DType) Size() uint64 {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case BF16, F16, I16:
		return 2
	case F8E4, F8E5, I8, U8, Bool:
		return 1
	}
	return 0
}

// Role is a tensor's role; it selects the tensor's arena and lifetime policy.
type Role string

// Tensor roles.
const (
	Parameter      Role = "parameter"       // persistent, updated only in place
	Activation     Role = "activation"      // produced by a node, reused by liveness
	Gradient       Role = "gradient"        // produced in backward, reused by liveness
	OptimizerState Role = "optimizer_state" // persistent, updated only in place
	Constant       Role = "constant"        // persistent, read-only
	Input          Role = "input"           // graph input, live from the start of the step
	Output         Role = "output"          // graph output, live to the end of the step
)

// Roles lists the roles.
var Roles = []Role{Parameter, Activation, Gradient, OptimizerState, Constant, Input, Output}

// Valid reports whether r is a known role.
func (r Role) Valid() bool {
	switch r {
	case Parameter, Activation, Gradient, OptimizerState, Constant, Input, Output:
		return true
	}
	return false
}

// NeedsProducer reports whether a tensor of this role must be defined by a
// node before it is read (activations, gradients and outputs); the others
// exist before the step starts.
func (r Role) NeedsProducer() bool {
	return r == Activation || r == Gradient || r == Output
}

// Phase is the training phase a node belongs to.
type Phase string

// Node phases.
const (
	Forward   Phase = "forward"
	Backward  Phase = "backward"
	Optimizer Phase = "optimizer"
)

// Valid reports whether p is a known phase ("" counts as forward).
func (p Phase) Valid() bool {
	switch p {
	case "", Forward, Backward, Optimizer:
		return true
	}
	return false
}

// Norm returns p with "" read as Forward.
func (p Phase) Norm() Phase {
	if p == "" {
		return Forward
	}
	return p
}

// Numel returns the product of dims and whether it fits in uint64. The empty
// shape is a scalar with one element.
func Numel(dims []uint64) (uint64, bool) {
	n := uint64(1)
	for _, d := range dims {
		hi, lo := bits.Mul64(n, d)
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// PlannedShape returns the shape the planner sizes the tensor at: the
// envelope maxima when an envelope is declared, else Shape.
func (t *Tensor) PlannedShape() []uint64 {
	if len(t.ShapeEnvelope) == 0 {
		return t.Shape
	}
	s := make([]uint64, len(t.ShapeEnvelope))
	for i, r := range t.ShapeEnvelope {
		s[i] = r.Max
	}
	return s
}

// Bytes returns the tensor's planned storage size in bytes: ByteLength for a
// view, else numel(PlannedShape) × dtype size. ok is false on overflow.
func (t *Tensor) Bytes() (n uint64, ok bool) {
	if t.View != nil {
		return t.View.ByteLength, true
	}
	numel, ok := Numel(t.PlannedShape())
	if !ok {
		return 0, false
	}
	hi, lo := bits.Mul64(numel, t.DType.Size())
	return lo, hi == 0
}

func (r DimRange) String() string { return fmt.Sprintf("[%d,%d]", r.Min, r.Max) }

// Arena names. Each role lives in one arena (spec §0.N): each arena has its
// own logical-slot space and address base.
const (
	ArenaParameters     = "parameters"
	ArenaActivations    = "activations"
	ArenaGradients      = "gradients"
	ArenaOptimizerState = "optimizer_state"
	ArenaConstants      = "constants"
)

// Arenas lists the arena names in their canonical (sorted) order.
var Arenas = []string{ArenaActivations, ArenaConstants, ArenaGradients, ArenaOptimizerState, ArenaParameters}

// ArenaIndex returns the index of the named arena in Arenas, or -1.
func ArenaIndex(name string) int {
	for i, a := range Arenas {
		if a == name {
			return i
		}
	}
	return -1
}

// Arena returns the arena that holds tensors of role r: parameters,
// optimizer_state and constants get their own; gradients theirs; activations,
// inputs and outputs share the activations arena.
func (r Role) Arena() string {
	switch r {
	case Parameter:
		return ArenaParameters
	case OptimizerState:
		return ArenaOptimizerState
	case Constant:
		return ArenaConstants
	case Gradient:
		return ArenaGradients
	}
	return ArenaActivations
}

// Persistent reports whether tensors of role r live for the whole step
// (parameters, optimizer state and constants).
func (r Role) Persistent() bool {
	return r == Parameter || r == OptimizerState || r == Constant
}
