package models

import (
	"fmt"

	"github.com/tmmu/tmmu/ir"
)

// GPT2 returns a GPT-2 graph (see the package documentation for its tensors).
// Positions are a graph input positions [Seq] (int32, 0…Seq-1) looked up in
// wpe [Context,H] with the embedding op and added to the token embedding
// with a broadcasting add. The lm_head is tied: logits = matmul(h, wte,
// transpose_b=1).
func GPT2(c GPT2Config) (*ir.Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	B, S, H, V := c.Batch, c.Seq, c.Hidden, c.Vocab
	b := newBuilder(fmt.Sprintf("gpt2-l%d-h%d-a%d-s%d-b%d-%s-%s", c.Layers, H, c.Heads, S, B, c.DType, mode(c.Train)), c.DType, c.Train)
	elem := c.DType.Size()

	tokens := b.input("tokens", ir.I32, B, S)
	positions := b.input("positions", ir.I32, S)
	wte := b.param("wte", V, H)
	wpe := b.param("wpe", c.Context, H)
	tok := b.embedding("emb.tok", wte, tokens, "emb.tok")
	pos := b.embedding("emb.pos", wpe, positions, "emb.pos")
	x := b.add("emb.add", "bwd/emb.add.dpos", tok, pos, "emb.out")

	for i := range c.Layers {
		p := fmt.Sprintf("h%d.", i)
		ln1 := b.layernorm(p+"ln_1", x)
		qkv := b.linear(p+"attn.c_attn", ln1, p+"attn.qkv", H, 3*H, true)
		view := func(name string, k uint64) string {
			// Rows of qkv are [q | k | v]; the view starts k·H elements
			// in and ends at the last element it touches.
			off := k * H * elem
			extent := ((B*S-1)*3*H + H) * elem
			return b.tensor(ir.Tensor{
				ID: p + "attn." + name, Shape: []uint64{B, S, H}, DType: c.DType, Role: ir.Activation,
				View: &ir.ViewDescriptor{BaseTensor: qkv, ByteOffset: off, ByteLength: extent, Strides: []uint64{S * 3 * H, 3 * H, 1}},
			})
		}
		q, k, v := view("q", 0), view("k", 1), view("v", 2)
		y := b.attention(p+"attn.causal", q, k, v, qkv, c.Heads, c.Heads)
		proj := b.linear(p+"attn.c_proj", y, p+"attn.proj", H, H, true)
		x1 := b.residual(p+"attn.resid", x, proj, p+"attn.resid")
		ln2 := b.layernorm(p+"ln_2", x1)
		fc := b.linear(p+"mlp.c_fc", ln2, p+"mlp.fc", H, 4*H, true)
		g := b.unary(p+"mlp.gelu", ir.OpGelu, fc, p+"mlp.gelu")
		proj2 := b.linear(p+"mlp.c_proj", g, p+"mlp.proj", 4*H, H, true)
		x = b.residual(p+"mlp.resid", x1, proj2, p+"out")
	}
	lnf := b.layernorm("ln_f", x)
	logits := b.matmul("lm_head", lnf, wte, "logits", true)
	return b.finish(b.loss(logits, B, S)), nil
}
