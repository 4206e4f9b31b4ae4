// Package failure defines the failure codes of UML_OS.TMMU (spec §0.K) and
// the structured error that carries them across every tmmu package, the CLI
// and, later, the wire.
//
// A Code is itself an error, so callers match failures by code with
// errors.Is:
//
//	if errors.Is(err, failure.LivenessCycle) { ... }
//
// and reach the details with errors.As:
//
//	var fe *failure.Error
//	if errors.As(err, &fe) { log(fe.Code, fe.Operator, fe.Diagnostics) }
package failure

import (
	"fmt"
	"sort"
	"strings"
)

// Code is a stable failure code. The first six are the spec's (§0.K); the
// rest are named extensions for problems the spec folds into "abort on
// malformed input" and that users need told apart.
type Code string

// Spec failure codes (UML_OS.TMMU.PrepareMemory_v2 §0.K).
const (
	InvalidIRShapes    Code = "INVALID_IR_SHAPES"   // shape, dtype, envelope or view extent is invalid
	LivenessCycle      Code = "LIVENESS_CYCLE"      // the dataflow graph has a cycle
	AddressCollision   Code = "ADDRESS_COLLISION"   // two live tensors share a byte (verifier)
	AllocationOverflow Code = "ALLOCATION_OVERFLOW" // uint64 overflow in size or offset arithmetic
	ArenaTooSmall      Code = "ARENA_TOO_SMALL"     // an arena's capacity is exceeded
	AlignmentViolation Code = "ALIGNMENT_VIOLATION" // alignment not a power of two, or not honoured
)

// Named extensions.
const (
	InvalidEncoding       Code = "INVALID_ENCODING"        // an IR, plan or config file cannot be decoded
	InvalidIRGraph        Code = "INVALID_IR_GRAPH"        // unknown or duplicate ids, producers, role rules
	ReadBeforeWrite       Code = "READ_BEFORE_WRITE"       // an activation or gradient is read before any node writes it
	InvalidAlias          Code = "INVALID_ALIAS"           // alias group, view, in-place or must_not_alias contract broken
	InvalidExecutionOrder Code = "INVALID_EXECUTION_ORDER" // execution_order is not a permutation of the nodes
	InvalidOptions        Code = "INVALID_OPTIONS"         // mode, strategy, replay token or arena config is invalid
	PlanMismatch          Code = "PLAN_MISMATCH"           // a plan does not match its IR, options or hashes (verifier)
	IOError               Code = "IO_ERROR"                // a file or stream cannot be read or written
	InvalidShardSpec      Code = "INVALID_SHARD_SPEC"      // a shard spec is malformed, inconsistent, or does not fit its IR
	UnsupportedExecution  Code = "UNSUPPORTED_EXECUTION"   // a graph, dtype or op the executors cannot run
	ModeViolation         Code = "MODE_VIOLATION"          // an operation the job's mode forbids (debug fill in confidential or regulated mode)
	DeviceError           Code = "DEVICE_ERROR"            // the device refused memory or failed a kernel or a transfer
	CheckpointCorrupt     Code = "CHECKPOINT_CORRUPT"      // a checkpoint object does not hash to its digest, or does not decode
	RestoreMismatch       Code = "RESTORE_MISMATCH"        // a restored state does not hash to the checkpoint's state hash
	CheckpointStoreFull   Code = "CHECKPOINT_STORE_FULL"   // the checkpoint store has no room for an object
	InvalidDataset        Code = "INVALID_DATASET"         // a dataset file is malformed, too short, or holds values the graph cannot take (a token id past the vocabulary)
	DatasetChanged        Code = "DATASET_CHANGED"         // a dataset's bytes no longer hash to the digest the job named
	InvalidWeights        Code = "INVALID_WEIGHTS"         // initial weights miss, add, mis-shape or mis-type tensors of the graph's parameters
)

// Codes lists every code in a fixed order.
var Codes = []Code{
	InvalidIRShapes, LivenessCycle, AddressCollision, AllocationOverflow,
	ArenaTooSmall, AlignmentViolation, InvalidEncoding, InvalidIRGraph,
	ReadBeforeWrite, InvalidAlias, InvalidExecutionOrder, InvalidOptions,
	PlanMismatch, IOError, InvalidShardSpec, UnsupportedExecution,
	ModeViolation, DeviceError, CheckpointCorrupt, RestoreMismatch,
	CheckpointStoreFull, InvalidDataset, DatasetChanged, InvalidWeights,
}

// Error implements error so that a Code can be the target of errors.Is.
func (c Code) Error() string { return string(c) }

// Error is a failure with its code, the operator that detected it (a spec
// operator name such as "UML_OS.Model.AnalyzeLiveness_v1"), a one-line
// message and machine-readable diagnostics (for example the tensor or node
// involved). Diagnostics values are strings so the error serializes the same
// way everywhere.
type Error struct {
	Code        Code              `json:"failure_code" cbor:"failure_code"`
	Operator    string            `json:"failure_operator" cbor:"failure_operator"`
	Message     string            `json:"message" cbor:"message"`
	Diagnostics map[string]string `json:"diagnostics,omitempty" cbor:"diagnostics,omitempty"`
	Err         error             `json:"-" cbor:"-"` // optional cause
}

// New returns an Error. kv lists diagnostics as alternating keys and values;
// values are formatted with %v.
func New(code Code, operator, message string, kv ...any) *Error {
	e := &Error{Code: code, Operator: operator, Message: message}
	if len(kv) > 0 {
		e.Diagnostics = make(map[string]string, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			e.Diagnostics[fmt.Sprint(kv[i])] = fmt.Sprint(kv[i+1])
		}
	}
	return e
}

// Newf is New with a formatted message and no diagnostics.
func Newf(code Code, operator, format string, args ...any) *Error {
	return &Error{Code: code, Operator: operator, Message: fmt.Sprintf(format, args...)}
}

// With returns e after adding a diagnostic key/value.
func (e *Error) With(key string, value any) *Error {
	if e.Diagnostics == nil {
		e.Diagnostics = map[string]string{}
	}
	e.Diagnostics[key] = fmt.Sprint(value)
	return e
}

// Wrap returns e with cause attached; errors.Is/As see through it.
func (e *Error) Wrap(cause error) *Error {
	e.Err = cause
	return e
}

// Error renders "CODE: message (k=v, ...)", diagnostics in key order,
// then ": cause" when there is a cause the message does not already
// spell out.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Code))
	b.WriteString(": ")
	b.WriteString(e.Message)
	if len(e.Diagnostics) > 0 {
		keys := make([]string, 0, len(e.Diagnostics))
		for k := range e.Diagnostics {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(" (")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k)
			b.WriteString("=")
			b.WriteString(e.Diagnostics[k])
		}
		b.WriteString(")")
	}
	if e.Err != nil && !strings.Contains(e.Message, e.Err.Error()) {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is this error's Code, or an *Error with the
// same code.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Code:
		return e.Code == t
	case *Error:
		return e.Code == t.Code
	}
	return false
}

// CodeOf returns the code of the first *Error in err's chain, or "" if none.
func CodeOf(err error) Code {
	for err != nil {
		if fe, ok := err.(*Error); ok {
			return fe.Code
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return ""
		}
		err = u.Unwrap()
	}
	return ""
}
