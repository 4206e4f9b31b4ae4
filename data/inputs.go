package data

import "github.com/tmmu/tmmu/ir"

// Inputs is what a training graph takes from a dataset, by the names
// tmmu's generators and importer give its inputs:
//
//   - a language model reads "tokens" and "labels" [batch, seq] (integer)
//     and looks "tokens" up in a table of Limit rows (its vocabulary:
//     the generators' embedding op, or an imported aten::embedding);
//   - a classifier reads "images" [batch, ...] (fp32) and "labels"
//     [batch] (integer), and its nll loss reads log-probabilities of
//     Limit classes (imported models).
type Inputs struct {
	Kind   Kind
	Batch  uint64   // rows of one rank's step
	Seq    uint64   // tokens a row (Tokens)
	Sample []uint64 // one sample's shape (Images)
	Limit  uint64   // every token id or label is below it
}

// InputsOf finds g's data inputs, or reports false.
func InputsOf(g *ir.Graph) (Inputs, bool) {
	if ti, ok := g.TensorIndex("tokens"); ok {
		s := g.Tensors[ti].Shape
		li, ok := g.TensorIndex("labels")
		if len(s) != 2 || !ok || !equal(g.Tensors[li].Shape, s) {
			return Inputs{}, false
		}
		v := vocab(g)
		return Inputs{Kind: Tokens, Batch: s[0], Seq: s[1], Limit: v}, v > 0
	}
	ii, ok1 := g.TensorIndex("images")
	li, ok2 := g.TensorIndex("labels")
	if !ok1 || !ok2 {
		return Inputs{}, false
	}
	is, ls := g.Tensors[ii].Shape, g.Tensors[li].Shape
	if len(is) < 2 || len(ls) != 1 || ls[0] != is[0] || g.Tensors[ii].DType != ir.F32 {
		return Inputs{}, false
	}
	c := classes(g)
	return Inputs{Kind: Images, Batch: is[0], Sample: is[1:], Limit: c}, c > 0
}

// vocab is the rows of the table "tokens" is looked up in (0: none).
func vocab(g *ir.Graph) uint64 {
	for i := range g.Nodes {
		n := &g.Nodes[i]
		table := ""
		switch {
		case n.Op == ir.OpEmbedding && len(n.Inputs) == 2 && n.Inputs[1] == "tokens":
			table = n.Inputs[0]
		case n.Call != nil && n.Call.Target == "aten::embedding.default" && len(n.Call.Args) > 1 && n.Call.Args[1].T != nil && n.Call.Args[1].T.ID == "tokens" && n.Call.Args[0].T != nil:
			table = n.Call.Args[0].T.ID
		default:
			continue
		}
		ti, _ := g.TensorIndex(table)
		if s := g.Tensors[ti].Shape; len(s) == 2 {
			return s[0]
		}
	}
	return 0
}

// classes is the columns of the log-probabilities a classifier's nll
// loss reads (0: none).
func classes(g *ir.Graph) uint64 {
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.Call != nil && n.Call.Target == "aten::nll_loss_forward.default" && len(n.Call.Args) > 0 && n.Call.Args[0].T != nil {
			if s := n.Call.Args[0].T.Shape; len(s) == 2 {
				return s[1]
			}
		}
	}
	return 0
}
