package pack_test

import (
	"fmt"

	"github.com/tmmu/tmmu/planner/pack"
)

func ExamplePack() {
	p := &pack.Problem{Buffers: []pack.Buffer{
		{Start: 0, End: 2, Size: 8},
		{Start: 0, End: 4, Size: 2},
		{Start: 2, End: 4, Size: 4},
		{Start: 2, End: 4, Size: 4},
	}}
	r, err := pack.Pack(p, pack.Options{})
	if err != nil {
		panic(err)
	}
	g, _ := pack.GreedySize(p)
	fmt.Println("packed:", r.Offsets, "peak", r.Peak, "lower bound", r.LowerBound, "optimal", r.Optimal)
	fmt.Println("greedy-size peak", g.Peak)
	// Output:
	// packed: [2 0 2 6] peak 10 lower bound 10 optimal true
	// greedy-size peak 10
}
