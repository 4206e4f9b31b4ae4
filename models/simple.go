package models

import (
	"fmt"

	"github.com/tmmu/tmmu/ir"
)

func mode(train bool) string {
	if train {
		return "train_full"
	}
	return "inference"
}

// Chain returns a stack of bias-free matmuls: x0 [B,H] (input) →
// x<i+1> = matmul(x<i>, layer<i>.w) for i < Length. The last x is the
// inference output, or the logits of a cross-entropy loss against
// labels [B] when training.
func Chain(c ChainConfig) (*ir.Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b := newBuilder(fmt.Sprintf("chain-l%d-b%d-h%d-%s-%s", c.Length, c.Batch, c.Hidden, c.DType, mode(c.Train)), c.DType, c.Train)
	x := b.input("x0", c.DType, c.Batch, c.Hidden)
	for i := range c.Length {
		x = b.linear(fmt.Sprintf("layer%d", i), x, fmt.Sprintf("x%d", i+1), c.Hidden, c.Hidden, false)
	}
	return b.finish(b.loss(x, c.Batch)), nil
}

// loss adds, for a training graph, labels (int32, logits' leading shape)
// and loss = cross_entropy(logits, labels), returning the tensor that
// finish turns into the graph's result.
func (b *builder) loss(logits string, lead ...uint64) string {
	if !b.train {
		return logits
	}
	labels := b.input("labels", ir.I32, lead...)
	return b.crossEntropy("loss", logits, labels, "loss")
}

// Residual returns Blocks residual blocks over x0 [B,H] (input):
// block<i>.h = gelu(matmul(x<i>, block<i>.w)), x<i+1> = x<i> + block<i>.h.
// Training adds cross_entropy on the last x against labels [B].
func Residual(c ResidualConfig) (*ir.Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b := newBuilder(fmt.Sprintf("residual-l%d-b%d-h%d-%s-%s", c.Blocks, c.Batch, c.Hidden, c.DType, mode(c.Train)), c.DType, c.Train)
	x := b.input("x0", c.DType, c.Batch, c.Hidden)
	for i := range c.Blocks {
		p := fmt.Sprintf("block%d", i)
		mm := b.linear(p, x, p+".mm", c.Hidden, c.Hidden, false)
		h := b.unary(p+".gelu", ir.OpGelu, mm, p+".h")
		x = b.residual(p+".add", x, h, fmt.Sprintf("x%d", i+1))
	}
	return b.finish(b.loss(x, c.Batch)), nil
}

// MLP returns Layers linear layers (weight fc<i>.w, bias fc<i>.b) from
// x [B,In] (input) through Hidden-wide gelu layers to logits [B,Classes].
// Training adds cross_entropy against labels [B].
func MLP(c MLPConfig) (*ir.Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b := newBuilder(fmt.Sprintf("mlp-l%d-b%d-in%d-h%d-c%d-%s-%s", c.Layers, c.Batch, c.In, c.Hidden, c.Classes, c.DType, mode(c.Train)), c.DType, c.Train)
	x := b.input("x", c.DType, c.Batch, c.In)
	in := c.In
	for i := range c.Layers {
		p := fmt.Sprintf("fc%d", i)
		if i == c.Layers-1 {
			x = b.linear(p, x, "logits", in, c.Classes, true)
			break
		}
		y := b.linear(p, x, p+".y", in, c.Hidden, true)
		x = b.unary(p+".gelu", ir.OpGelu, y, p+".act")
		in = c.Hidden
	}
	return b.finish(b.loss(x, c.Batch)), nil
}

// ParamCount returns the number of parameter elements of m: the sum of the
// element counts of its parameter tensors that are not views.
func ParamCount(m *ir.Model) uint64 {
	var n uint64
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if t.Role == ir.Parameter && t.View == nil {
			k, _ := ir.Numel(t.Shape)
			n += k
		}
	}
	return n
}
