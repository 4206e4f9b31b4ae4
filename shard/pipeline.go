package shard

import (
	"maps"
	"regexp"
	"slices"
	"strconv"

	"github.com/tmmu/tmmu/ir"
)

// assignStages records, for every node of g, the pipeline stages that run
// it (see Pipeline.LayerPattern).
func assignStages(g *graph, spec *Spec, probs *problems) {
	stages := spec.Stages()
	if stages == 1 {
		for _, n := range g.nodes {
			g.stages[n.ID] = []uint64{0}
		}
		return
	}
	re := regexp.MustCompile(spec.Pipeline.LayerPattern) // Resolve compiled it
	last := stages - 1
	layerOf := func(id string) (uint64, bool) {
		m := re.FindStringSubmatch(id)
		if m == nil || m[1] == "" {
			return 0, false
		}
		l, err := strconv.ParseUint(m[1], 10, 64)
		return l, err == nil
	}
	stageOf := func(l uint64) (uint64, bool) {
		for i, r := range spec.Pipeline.Stages {
			if l >= r.First && l < r.End {
				return uint64(i), true
			}
		}
		return 0, false
	}
	var maxLayer uint64
	layered := false
	seen := map[ir.Phase]bool{}
	var deferred []*ir.Node
	for _, n := range g.nodes {
		ph := phaseOf(n)
		if ph == ir.Optimizer {
			deferred = append(deferred, n)
			continue
		}
		if l, ok := layerOf(n.ID); ok {
			layered = true
			maxLayer = max(maxLayer, l)
			s, ok := stageOf(l)
			if !ok {
				probs.add("node %q is in layer %d, which no pipeline stage holds (stages end at layer %d)", n.ID, l, spec.Pipeline.Stages[last].End)
			}
			g.stages[n.ID] = []uint64{s}
			seen[ph] = true
			continue
		}
		// Unlayered: before the layers of its phase, forward work runs
		// on the first stage and backward work on the last; after them,
		// the other way round.
		first := ph == ir.Forward
		if seen[ph] {
			first = !first
		}
		if first {
			g.stages[n.ID] = []uint64{0}
		} else {
			g.stages[n.ID] = []uint64{last}
		}
	}
	if !layered {
		probs.add("pipeline.layer_pattern %q matches no node id, so no node has a layer", spec.Pipeline.LayerPattern)
		return
	}
	if end := spec.Pipeline.Stages[last].End; end != maxLayer+1 {
		probs.add("pipeline stages cover layers [0, %d) but the IR has layers [0, %d)", end, maxLayer+1)
	}
	// Optimizer nodes run wherever their parameters are held.
	holders := map[string][]uint64{}
	for _, n := range g.nodes {
		if phaseOf(n) == ir.Optimizer {
			continue
		}
		for _, id := range slices.Concat(n.Inputs, n.Outputs) {
			holders[id] = addStages(holders[id], g.stages[n.ID])
		}
	}
	for _, n := range deferred {
		var s []uint64
		for _, in := range n.Inputs {
			if g.tensors[in].Role == ir.Parameter {
				s = addStages(s, holders[in])
			}
		}
		if len(s) == 0 {
			s = []uint64{0}
			if l, ok := layerOf(n.ID); ok {
				if st, ok := stageOf(l); ok {
					s = []uint64{st}
				}
			}
		}
		g.stages[n.ID] = s
	}
}

func addStages(dst, src []uint64) []uint64 {
	for _, s := range src {
		if i, found := slices.BinarySearch(dst, s); !found {
			dst = slices.Insert(dst, i, s)
		}
	}
	return dst
}

// selectStage returns the part of g that pipeline stage s runs: its nodes,
// the tensors they use, and point-to-point transfers for the activations
// and gradients that cross stages: a pp.send after the last node on the
// producing stage that writes the tensor, a pp.recv before the first
// reader on the consuming stage. Persistent tensors and graph inputs that
// several stages use are replicated on each (a tied embedding lives on the
// first and the last stage).
func selectStage(g *graph, s uint64, probs *problems) *graph {
	stages := uint64(0)
	for _, st := range g.stages {
		stages = max(stages, st[len(st)-1]+1)
	}
	// need[stage] = storage roots the stage's nodes use.
	need := make([]map[string]bool, stages)
	for i := range need {
		need[i] = map[string]bool{}
	}
	// def maps a root to the stages of its defining node (a node that
	// runs on several stages, say a gather for a replicated optimizer
	// update, defines the tensor on each of them).
	def := map[string][]uint64{}
	for _, n := range g.nodes {
		for _, st := range g.stages[n.ID] {
			for _, id := range slices.Concat(n.Inputs, n.Outputs) {
				need[st][g.root(id)] = true
			}
		}
		for _, o := range n.Outputs {
			if _, ok := def[o]; !ok && !slices.Contains(n.Inputs, o) && g.tensors[o].View == nil {
				def[o] = g.stages[n.ID]
			}
		}
	}
	transfers := func(id string) bool {
		t := g.tensors[id]
		return t.Role.NeedsProducer() && t.View == nil
	}
	out := &graph{name: g.name, tensors: map[string]*ir.Tensor{}, stages: map[string][]uint64{}, coll: map[string]bool{}}
	use := func(id string) {
		for {
			if _, ok := out.tensors[id]; ok {
				return
			}
			t := cloneTensor(g.tensors[id])
			out.tensors[id] = t
			if g.coll[id] {
				out.coll[id] = true
			}
			if t.View == nil {
				return
			}
			id = t.View.BaseTensor
		}
	}
	// Sends go after the last writer on this stage.
	lastWriter := map[string]int{}
	for i, n := range g.nodes {
		if slices.Contains(g.stages[n.ID], s) {
			for _, o := range n.Outputs {
				lastWriter[g.root(o)] = i
			}
		}
	}
	received, sent := map[string]bool{}, map[string]bool{}
	for i, n := range g.nodes {
		if !slices.Contains(g.stages[n.ID], s) {
			continue
		}
		for _, id := range n.Inputs {
			r := g.root(id)
			use(id)
			if ds, ok := def[r]; ok && !slices.Contains(ds, s) && transfers(r) && !received[r] {
				d := ds[0]
				if g.tensors[r].AliasGroupID != "" {
					probs.add("tensor %q of alias group %q crosses pipeline stages (%d → %d); alias groups must stay within a stage", r, g.tensors[r].AliasGroupID, d, s)
				}
				received[r] = true
				out.coll[r] = true
				out.nodes = append(out.nodes, out.collective(ir.OpPPRecv, phaseOf(n), nil, []string{r}, map[string]int64{"peer": int64(d)}, []uint64{s}))
			}
		}
		for _, id := range n.Outputs {
			use(id)
		}
		nn := *n
		nn.Inputs, nn.Outputs, nn.Attrs = slices.Clone(n.Inputs), slices.Clone(n.Outputs), maps.Clone(n.Attrs)
		out.nodes = append(out.nodes, &nn)
		out.stages[n.ID] = []uint64{s}
		for _, o := range n.Outputs {
			r := g.root(o)
			// The first stage that defines it sends it to the stages that
			// use it without defining it.
			ds := def[r]
			if lastWriter[r] != i || len(ds) == 0 || ds[0] != s || !transfers(r) || sent[r] {
				continue
			}
			sent[r] = true
			for peer := range stages {
				if !slices.Contains(ds, peer) && need[peer][r] {
					out.nodes = append(out.nodes, out.collective(ir.OpPPSend, phaseOf(n), []string{r}, nil, map[string]int64{"peer": int64(peer)}, []uint64{s}))
				}
			}
		}
	}
	// must_not_alias may name tensors of other stages.
	for _, t := range out.tensors {
		t.MustNotAlias = slices.DeleteFunc(t.MustNotAlias, func(id string) bool { return !out.hasTensor(id) })
		if len(t.MustNotAlias) == 0 {
			t.MustNotAlias = nil
		}
	}
	return out
}
