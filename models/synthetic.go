package models

import (
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/tmmu/tmmu/ir"
)

// Synthetic returns a large random but deterministic inference DAG for
// planner benchmarks, drawn from a PCG generator seeded with Seed.
//
// It has exactly Tensors tensors: the input "in", P = max(1, Tensors/1000)
// parameters "p/<i>", and one tensor "a/<i>" written by each node "n/<i>"
// (op ir.OpSynthetic), i = 0, 1, …. Node i reads the latest activation (the
// input for node 0), up to two more chosen uniformly among the last Window
// activations, and with probability 1/100 a random parameter. About 1 in 200
// activations is a graph output, and the last one always is. Every tensor is
// a 1-D fp32 vector of 256 B to 4 MiB, log-uniformly distributed. The
// execution order is the creation order. Generation is linear in Tensors.
func Synthetic(c SyntheticConfig) (*ir.Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x9e3779b97f4a7c15))
	n := int(c.Tensors)
	nParams := max(1, n/1000)
	nNodes := n - 1 - nParams
	window := int(min(c.Window, uint64(nNodes)))

	// Slab allocations: one backing array for all shapes and one for all
	// node inputs, sliced with capped capacity.
	dims := make([]uint64, n)
	size := func(i int) []uint64 {
		// 2^e ≤ bytes < 2^(e+1), e in [8, 21], in whole fp32 elements;
		// capped at 4 MiB.
		e := 8 + r.IntN(14)
		lo := uint64(1) << e
		bytes := min(lo+r.Uint64N(lo+1), 4<<20)
		dims[i] = max(bytes/4, 64)
		return dims[i : i+1 : i+1]
	}

	m := &ir.Model{
		Name:           fmt.Sprintf("synthetic-n%d-seed%d-w%d", c.Tensors, c.Seed, c.Window),
		Tensors:        make([]ir.Tensor, 0, n),
		Nodes:          make([]ir.Node, 0, nNodes),
		ExecutionOrder: make([]string, 0, nNodes),
	}
	m.Tensors = append(m.Tensors, ir.Tensor{ID: "in", Shape: size(0), DType: ir.F32, Role: ir.Input})
	params := make([]string, nParams)
	for i := range params {
		params[i] = "p/" + strconv.Itoa(i)
		m.Tensors = append(m.Tensors, ir.Tensor{ID: params[i], Shape: size(1 + i), DType: ir.F32, Role: ir.Parameter})
	}

	acts := make([]string, nNodes) // activation ids; recent ones are read
	ins := make([]string, 0, 4*nNodes)
	for i := range nNodes {
		start := len(ins)
		if i == 0 {
			ins = append(ins, "in")
		} else {
			ins = append(ins, acts[i-1])
			lo := max(0, i-window)
			for range r.IntN(3) {
				id := acts[lo+r.IntN(i-lo)]
				dup := false
				for _, x := range ins[start:] {
					dup = dup || x == id
				}
				if !dup {
					ins = append(ins, id)
				}
			}
		}
		if r.IntN(100) == 0 {
			ins = append(ins, params[r.IntN(nParams)])
		}
		role := ir.Activation
		if r.IntN(200) == 0 || i == nNodes-1 {
			role = ir.Output
		}
		suffix := strconv.Itoa(i)
		acts[i] = "a/" + suffix
		m.Tensors = append(m.Tensors, ir.Tensor{ID: acts[i], Shape: size(1 + nParams + i), DType: ir.F32, Role: role})
		node := "n/" + suffix
		m.Nodes = append(m.Nodes, ir.Node{
			ID: node, Op: ir.OpSynthetic, Phase: ir.Forward,
			Inputs: ins[start:len(ins):len(ins)], Outputs: acts[i : i+1 : i+1],
		})
		m.ExecutionOrder = append(m.ExecutionOrder, node)
	}
	return m, nil
}
