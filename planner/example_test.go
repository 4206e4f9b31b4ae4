package planner_test

import (
	"fmt"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// A chain of three out-of-place ops over 1 KiB tensors needs two slots.
func ExamplePlanMemory() {
	t := func(id string, role ir.Role) ir.Tensor {
		return ir.Tensor{ID: id, Shape: []uint64{256}, DType: ir.F32, Role: role}
	}
	m := &ir.Model{
		Tensors: []ir.Tensor{t("x", ir.Input), t("a", ir.Activation), t("b", ir.Activation), t("c", ir.Output)},
		Nodes: []ir.Node{
			{ID: "n1", Op: "relu", Inputs: []string{"x"}, Outputs: []string{"a"}},
			{ID: "n2", Op: "relu", Inputs: []string{"a"}, Outputs: []string{"b"}},
			{ID: "n3", Op: "relu", Inputs: []string{"b"}, Outputs: []string{"c"}},
		},
	}
	g, err := ir.Compile(m)
	if err != nil {
		panic(err)
	}
	p, err := planner.PlanMemory(g, planner.DefaultOptions(g))
	if err != nil {
		panic(err)
	}
	for _, tp := range p.Tensors {
		fmt.Printf("%s slot %d offset %4d lifetime %v\n", tp.ID, tp.LogicalSlot, tp.Offset, tp.Lifetime)
	}
	a := p.Arenas[0]
	fmt.Printf("%s: %d slots, peak %d bytes, lower bound %d bytes\n", a.Name, a.LogicalSlots, a.PeakBytes, a.LowerBoundBytes)
	fmt.Println(planner.Verify(g, p))
	// Output:
	// a slot 0 offset    0 lifetime [0 1]
	// b slot 1 offset 1024 lifetime [1 2]
	// c slot 0 offset    0 lifetime [2 2]
	// x slot 1 offset 1024 lifetime [0 0]
	// activations: 2 slots, peak 2048 bytes, lower bound 2048 bytes
	// <nil>
}
