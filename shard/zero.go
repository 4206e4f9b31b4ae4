package shard

import (
	"slices"

	"github.com/tmmu/tmmu/ir"
)

// zeroPass partitions model state over the data-parallel group the way
// DeepSpeed's ZeRO stages do, one tensor at a time: a partitioned tensor is
// flattened and each rank holds ceil(numel/degree) elements of it.
//
//   - Every stage: each gradient an update node reads is reduced over the
//     group right after its last writer: all-reduced in place (stages 0
//     and 1), or reduce-scattered into a gradient shard that the update
//     reads while the full gradient dies (stages 2 and 3).
//   - Stage ≥ 1: the update's optimizer state (fp32 master, m, v) is
//     partitioned; stages 1 and 2 all-gather the updated parameter in place
//     after the update.
//   - Stage 3: the parameter itself is partitioned; before its first reader
//     in each phase an all-gather writes a whole temporary copy, which dies
//     after the phase's last reader.
//
// Parameters with a ZeROReplicate override keep everything whole and only
// all-reduce their gradients.
func zeroPass(g *graph, spec *Spec, probs *problems) {
	deg := spec.DataParallel.Degree
	stage := spec.DataParallel.ZeROStage
	if deg == 1 {
		return
	}
	whole := map[string]bool{}
	for _, o := range spec.Overrides {
		if o.ZeRO == ZeROReplicate {
			whole[o.Tensor] = true
		}
	}
	views := g.viewsOf()
	group := map[string]int64{"group_size": int64(deg)}
	before := map[int][]*ir.Node{}
	after := map[int][]*ir.Node{}
	lastWriter := map[string]int{}
	stages := func(i int) []uint64 { return g.stages[g.nodes[i].ID] }
	flat := func(t *ir.Tensor) {
		if t.View != nil || t.AliasGroupID != "" || len(views[t.ID]) > 0 {
			probs.add("ZeRO cannot partition %q: it shares storage with other tensors (a view or an alias group)", t.ID)
			return
		}
		t.Shape, t.ShapeEnvelope = partition(numel(t), deg), nil
	}
	updates := map[string]bool{}
	for i, n := range g.nodes {
		param, ok := g.updateOf(n)
		if !ok {
			for _, o := range n.Outputs {
				lastWriter[o] = i
			}
			continue
		}
		updates[n.ID] = true
		part := !whole[param]
		for k, in := range n.Inputs {
			t := g.tensors[in]
			switch {
			case t.Role == ir.OptimizerState && slices.Contains(n.Outputs, in):
				if stage >= 1 && part {
					flat(t)
				}
			case t.Role == ir.Gradient && !slices.Contains(n.Outputs, in):
				w, ok := lastWriter[in]
				if !ok {
					continue
				}
				ph := phaseOf(g.nodes[w])
				switch {
				case stage >= 2 && part:
					shard := &ir.Tensor{ID: freshID(in+"@dp.shard", g.hasTensor), DType: t.DType, Role: ir.Gradient,
						Shape: partition(numel(t), deg)}
					g.tensors[shard.ID] = shard
					after[w] = append(after[w], g.collective(ir.OpDPReduceScatter, ph, []string{in}, []string{shard.ID}, group, stages(w)))
					replaceInput(n, k, shard.ID)
				case canUpdateInPlace(t, views):
					t.InPlaceWrite = true
					after[w] = append(after[w], g.collective(ir.OpDPAllReduce, ph, []string{in}, []string{in}, group, stages(w)))
				default:
					red := g.derived(freshID(in+"@dp.reduced", g.hasTensor), t)
					after[w] = append(after[w], g.collective(ir.OpDPAllReduce, ph, []string{in}, []string{red.ID}, group, stages(w)))
					replaceInput(n, k, red.ID)
				}
			}
		}
		if part && (stage == 1 || stage == 2) {
			after[i] = append(after[i], g.collective(ir.OpDPAllGather, ir.Optimizer, []string{param}, []string{param}, group, stages(i)))
		}
	}
	if stage == 3 {
		for _, id := range sortedIDs(g.tensors) {
			t := g.tensors[id]
			if t.Role != ir.Parameter || whole[id] || writtenOutsideUpdates(g, id, updates) {
				continue // a node other than its update writes it: keep it whole
			}
			full := cloneTensor(t)
			gathered := map[ir.Phase]string{}
			for i, n := range g.nodes {
				if updates[n.ID] || !slices.Contains(n.Inputs, id) {
					continue
				}
				ph := phaseOf(n)
				c, ok := gathered[ph]
				if !ok {
					c = g.derived(freshID(id+"@dp.gather."+string(ph), g.hasTensor), full).ID
					gathered[ph] = c
					before[i] = append(before[i], g.collective(ir.OpDPAllGather, ph, []string{id}, []string{c}, group, stages(i)))
				}
				for k, in := range n.Inputs {
					if in == id {
						replaceInput(n, k, c)
					}
				}
			}
			flat(t)
		}
	}
	nodes := make([]*ir.Node, 0, len(g.nodes)+len(before)+len(after))
	for i, n := range g.nodes {
		nodes = append(nodes, before[i]...)
		nodes = append(nodes, n)
		nodes = append(nodes, after[i]...)
	}
	g.nodes = nodes
}

// replaceInput makes node n read tensor id as its k-th input, and its
// call (an imported node's) refer to id where it referred to the input
// replaced: the same elements, in another tensor.
func replaceInput(n *ir.Node, k int, id string) {
	n.Call = n.Call.Renamed(n.Inputs[k], id)
	n.Inputs[k] = id
}

func writtenOutsideUpdates(g *graph, id string, updates map[string]bool) bool {
	for _, n := range g.nodes {
		if !updates[n.ID] && slices.Contains(n.Outputs, id) {
			return true
		}
	}
	return false
}
