// Package ir is UML_Model_IR, the graph tmmu plans: tensors with shapes,
// dtypes and roles, nodes that read and write them, and the order in which
// the nodes execute.
//
// # The model
//
// A Model is what users write, as JSON or CBOR with the same snake_case
// field names:
//
//	{
//	  "name": "mlp",
//	  "tensors": [
//	    {"id": "x",  "shape": [64, 784], "dtype": "fp32", "role": "input"},
//	    {"id": "w1", "shape": [784, 1024], "dtype": "fp32", "role": "parameter"},
//	    {"id": "h",  "shape": [64, 1024], "dtype": "fp32", "role": "activation"},
//	    {"id": "y",  "shape": [64, 1024], "dtype": "fp32", "role": "output"}
//	  ],
//	  "nodes": [
//	    {"id": "fc1",  "op": "matmul", "inputs": ["x", "w1"], "outputs": ["h"]},
//	    {"id": "act1", "op": "gelu",   "inputs": ["h"],       "outputs": ["y"]}
//	  ],
//	  "execution_order": ["fc1", "act1"]
//	}
//
// Roles pick a tensor's arena and lifetime policy: parameter, optimizer_state
// and constant tensors are persistent; activation, input and output tensors
// share the activations arena; gradient tensors have their own. Activations,
// gradients and outputs must be produced by a node before they are read;
// the other roles exist before the step starts.
//
// A node defines the tensors it lists as outputs but not as inputs (at most
// one node defines a tensor). A node that lists a tensor both ways updates
// it in place, which the tensor must declare with in_place_write (an AdamW
// step updating its parameter, say). Storage sharing is declared, never
// guessed: view_descriptor places a view at a byte offset inside its base's
// storage, alias_group_id makes several tensors one storage, and
// must_not_alias forbids two tensors from ever sharing a byte. A tensor with
// a shape_envelope is planned at the envelope's maxima.
//
// # Compile
//
// Compile validates a Model and returns a Graph: tensors and nodes sorted
// by id, flat per-tensor facts (planned bytes, defining node, storage root)
// and the two hashes of spec II.K: ir_hash, SHA-256 over the canonical CBOR
// (RFC 8949 core deterministic encoding) of the model without its execution
// order, so that it does not depend on JSON key order, whitespace or the
// order in which tensors and nodes are listed; and execution_order_hash,
// over the order alone. Problems come back as *failure.Error with a code:
// INVALID_IR_SHAPES, INVALID_IR_GRAPH, INVALID_ALIAS, LIVENESS_CYCLE,
// INVALID_EXECUTION_ORDER, READ_BEFORE_WRITE, ALIGNMENT_VIOLATION or
// ALLOCATION_OVERFLOW, with the tensor or node named in the message and in
// the diagnostics.
//
// When execution_order is omitted Compile derives one: Kahn's algorithm,
// taking ready nodes by phase (forward, backward, optimizer) and then id. A
// model with in-place updates must give its order, because the order of
// readers and writers of an updated tensor cannot be derived from dataflow.
package ir
