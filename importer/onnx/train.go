package onnx

import (
	"fmt"
	"slices"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// saves says what an op's backward reads besides its outputs' gradients:
// its inputs, its outputs, or nothing but shapes. Ops not listed read
// every input and output (the cautious choice: they stay live).
var saves = map[string]struct{ inputs, outputs bool }{
	// The derivative is a function of the output.
	"Relu": {false, true}, "Sigmoid": {false, true}, "Tanh": {false, true}, "Exp": {false, true},
	"Softmax": {false, true}, "LogSoftmax": {false, true}, "Sqrt": {false, true}, "HardSigmoid": {false, true},
	// Of the inputs.
	"Mul": {true, false}, "Div": {true, false}, "MatMul": {true, false}, "Gemm": {true, false}, "Conv": {true, false},
	"Gelu": {true, false}, "Erf": {true, false}, "HardSwish": {true, false}, "LeakyRelu": {true, false},
	"Pow": {true, false}, "Log": {true, false}, "Neg": {false, false}, "Abs": {true, false}, "Clip": {true, false},
	"BatchNormalization": {true, false}, "LayerNormalization": {true, true}, "InstanceNormalization": {true, false},
	"MaxPool": {true, true}, "ReduceMax": {true, true}, "ReduceMin": {true, true}, "Where": {true, false},
	"Gather": {true, false}, "Expand": {false, false},
	// Of shapes only.
	"Add": {false, false}, "Sub": {false, false}, "Sum": {false, false}, "Mean": {false, false},
	"Identity": {false, false}, "Reshape": {false, false}, "Flatten": {false, false}, "Transpose": {false, false},
	"Squeeze": {false, false}, "Unsqueeze": {false, false}, "Concat": {false, false}, "Split": {false, false},
	"Slice": {false, false}, "AveragePool": {false, false}, "GlobalAveragePool": {false, false},
	"ReduceMean": {false, false}, "ReduceSum": {false, false}, "Dropout": {false, true}, "Cast": {false, false},
}

// Train extends an imported inference graph into a training step, the way
// tmmu's generators build theirs: a loss node over the graph's outputs
// (a scalar, fp32, the new output), its seed, one backward node per
// forward node that a parameter's gradient flows through (OP_backward,
// reading the outputs' gradients and what saves lists, writing the
// gradients of its floating-point inputs), out-of-place adds where a
// tensor receives several contributions, and one in-place update per
// parameter: adamw with fp32 m and v, or sgd with a momentum buffer.
// Forward tensors a backward node reads are saved_for_backward.
//
// The backward nodes are opaque ops: they size the gradients and keep the
// right tensors live, which is what a plan needs; nothing executes them.
// An ONNX file exported for inference has its batch norms folded into
// convolutions and no dropout; export in training mode to keep them.
func Train(m *ir.Model, optimizer string) (*ir.Model, error) {
	if optimizer != "adamw" && optimizer != "sgd" {
		return nil, failure.Newf(failure.InvalidOptions, OpImport, "optimizer %q: want adamw or sgd", optimizer)
	}
	t := &trainer{m: m, index: map[string]int{}, grad: map[string][]string{}, ids: map[string]bool{}}
	for i := range m.Tensors {
		t.index[m.Tensors[i].ID] = i
		t.ids[m.Tensors[i].ID] = true
	}
	for _, n := range m.Nodes {
		t.ids[n.ID] = true
	}
	// Which tensors need a gradient: floating-point parameters and what
	// depends on them.
	needs := map[string]bool{}
	var params []string
	for _, tt := range m.Tensors {
		if tt.Role == ir.Parameter && floating(tt.DType) {
			needs[tt.ID] = true
			params = append(params, tt.ID)
		}
	}
	if len(params) == 0 {
		return nil, failure.New(failure.InvalidIRGraph, OpImport, "no floating-point parameter to train")
	}
	byID := map[string]*ir.Node{}
	for i := range m.Nodes {
		byID[m.Nodes[i].ID] = &m.Nodes[i]
	}
	var forward []*ir.Node
	for _, id := range m.ExecutionOrder {
		n := byID[id]
		n.Phase = ir.Forward
		forward = append(forward, n)
		if slices.ContainsFunc(n.Inputs, func(in string) bool { return needs[in] }) {
			for _, o := range n.Outputs {
				if floating(t.tensor(o).DType) {
					needs[o] = true
				}
			}
		}
	}
	// The loss reads every output; the outputs become activations.
	var outs []string
	for i := range m.Tensors {
		if tt := &m.Tensors[i]; tt.Role == ir.Output {
			tt.Role = ir.Activation
			if needs[tt.ID] {
				outs = append(outs, tt.ID)
			}
		}
	}
	if len(outs) == 0 {
		return nil, failure.New(failure.InvalidIRGraph, OpImport, "no graph output depends on a parameter: nothing to train")
	}
	loss := t.fresh("loss")
	t.add(ir.Tensor{ID: loss, Shape: []uint64{}, DType: ir.F32, Role: ir.Output})
	t.node("loss", "loss", outs, []string{loss}, ir.Forward)
	seed := t.fresh("grad/" + loss)
	t.add(ir.Tensor{ID: seed, Shape: []uint64{}, DType: ir.F32, Role: ir.Gradient})
	t.node("loss.seed", "ones", nil, []string{seed}, ir.Backward)
	var dy []string
	for _, o := range outs {
		dy = append(dy, t.gradOf(o))
	}
	t.node("loss_backward", "loss_backward", append([]string{seed}, outs...), dy, ir.Backward)
	t.saved(outs)
	for i, o := range outs {
		t.grad[o] = []string{dy[i]}
	}
	// Backward, in reverse.
	for k := len(forward) - 1; k >= 0; k-- {
		n := forward[k]
		var gys []string
		for _, o := range n.Outputs {
			if g := t.total(o); g != "" {
				gys = append(gys, g)
			}
		}
		if len(gys) == 0 {
			continue
		}
		var dxs, wants []string
		for _, in := range n.Inputs {
			if needs[in] && !slices.Contains(wants, in) {
				wants = append(wants, in)
			}
		}
		if len(wants) == 0 {
			continue
		}
		for _, in := range wants {
			g := t.gradOf(in)
			dxs = append(dxs, g)
			t.grad[in] = append(t.grad[in], g)
		}
		reads := slices.Clone(gys)
		s, known := saves[string(n.Op)]
		if !known {
			s.inputs, s.outputs = true, true
		}
		var keep []string
		if s.inputs {
			keep = append(keep, n.Inputs...)
		}
		if s.outputs {
			keep = append(keep, n.Outputs...)
		}
		for _, x := range keep {
			if !slices.Contains(reads, x) {
				reads = append(reads, x)
			}
		}
		t.saved(keep)
		t.node(n.ID+".backward", string(n.Op)+"_backward", reads, dxs, ir.Backward)
	}
	// The update, one node per parameter.
	for _, p := range params {
		g := t.total(p)
		if g == "" {
			continue // no output depends on it
		}
		pt := t.tensor(p)
		pt.InPlaceWrite = true
		state := func(name string) string {
			id := t.fresh(name + "/" + p)
			t.add(ir.Tensor{ID: id, Shape: slices.Clone(pt.Shape), DType: ir.F32, Role: ir.OptimizerState, InPlaceWrite: true})
			return id
		}
		ins, upd := []string{p, g}, []string{p}
		if optimizer == "adamw" {
			mm, vv := state("adam.m"), state("adam.v")
			ins, upd = append(ins, mm, vv), append(upd, mm, vv)
		} else {
			buf := state("sgd.momentum")
			ins, upd = append(ins, buf), append(upd, buf)
		}
		t.node("opt/"+p, optimizer, ins, upd, ir.Optimizer)
	}
	m.Name += "-train"
	return m, nil
}

type trainer struct {
	m     *ir.Model
	index map[string]int
	ids   map[string]bool     // tensor and node ids in use
	grad  map[string][]string // gradient contributions per tensor
}

func floating(d ir.DType) bool {
	switch d {
	case ir.F32, ir.F64, ir.F16, ir.BF16:
		return true
	}
	return false
}

func (t *trainer) tensor(id string) *ir.Tensor { return &t.m.Tensors[t.index[id]] }

// fresh returns id, or id with a suffix when it is taken.
func (t *trainer) fresh(id string) string {
	for k := 1; t.ids[id]; k++ {
		id = fmt.Sprintf("%s#%d", id, k)
	}
	t.ids[id] = true
	return id
}

func (t *trainer) add(tt ir.Tensor) {
	t.index[tt.ID] = len(t.m.Tensors)
	t.m.Tensors = append(t.m.Tensors, tt)
}

func (t *trainer) node(id, op string, ins, outs []string, ph ir.Phase) {
	id = t.fresh(id)
	t.m.Nodes = append(t.m.Nodes, ir.Node{ID: id, Op: ir.Op(op), Inputs: ins, Outputs: outs, Phase: ph})
	t.m.ExecutionOrder = append(t.m.ExecutionOrder, id)
}

// gradOf adds a new gradient tensor shaped like x.
func (t *trainer) gradOf(x string) string {
	xt := t.tensor(x)
	g := t.fresh("grad/" + x)
	t.add(ir.Tensor{ID: g, Shape: slices.Clone(xt.Shape), DType: xt.DType, Role: ir.Gradient, ShapeEnvelope: slices.Clone(xt.ShapeEnvelope)})
	return g
}

// total returns x's whole gradient, summing its contributions with add
// nodes, or "" when it has none.
func (t *trainer) total(x string) string {
	gs := t.grad[x]
	if len(gs) == 0 {
		return ""
	}
	sum := gs[0]
	for _, g := range gs[1:] {
		s := t.gradOf(x)
		t.node("sum/"+s, "add", []string{sum, g}, []string{s}, ir.Backward)
		sum = s
	}
	t.grad[x] = []string{sum}
	return sum
}

// saved marks the forward activations a backward node reads.
func (t *trainer) saved(ids []string) {
	for _, id := range ids {
		if tt := t.tensor(id); tt.Role == ir.Activation {
			tt.SavedForBackward = true
		}
	}
}
