package models

import (
	"fmt"

	"github.com/tmmu/tmmu/ir"
)

// Llama returns a Llama-2 graph (see the package documentation for its
// tensors): rmsnorm, bias-free q/k/v/o projections with rope on q and k,
// causal attention (grouped-query when KVHeads < Heads), a SwiGLU MLP, a
// final rmsnorm and an untied lm_head [H,V].
func Llama(c LlamaConfig) (*ir.Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	B, S, H, V, I := c.Batch, c.Seq, c.Hidden, c.Vocab, c.Intermediate
	kv := c.KVHeads * (H / c.Heads)
	name := fmt.Sprintf("llama-l%d-h%d-a%d-kv%d-i%d-s%d-b%d-%s-%s", c.Layers, H, c.Heads, c.KVHeads, I, S, B, c.DType, mode(c.Train))
	b := newBuilder(name, c.DType, c.Train)

	tokens := b.input("tokens", ir.I32, B, S)
	embed := b.param("embed_tokens.w", V, H)
	x := b.embedding("embed_tokens", embed, tokens, "embed_tokens.out")

	for i := range c.Layers {
		p := fmt.Sprintf("l%d.", i)
		xn := b.rmsnorm(p+"attn_norm", x)
		q := b.linear(p+"attn.q_proj", xn, p+"attn.q", H, H, false)
		k := b.linear(p+"attn.k_proj", xn, p+"attn.k", H, kv, false)
		v := b.linear(p+"attn.v_proj", xn, p+"attn.v", H, kv, false)
		qr := b.rope(p+"attn.rope_q", q, p+"attn.q_rot", c.Heads)
		kr := b.rope(p+"attn.rope_k", k, p+"attn.k_rot", c.KVHeads)
		y := b.attention(p+"attn.causal", qr, kr, v, "", c.Heads, c.KVHeads)
		o := b.linear(p+"attn.o_proj", y, p+"attn.out", H, H, false)
		x1 := b.residual(p+"attn.resid", x, o, p+"attn.resid")
		xn2 := b.rmsnorm(p+"mlp_norm", x1)
		gate := b.linear(p+"mlp.gate_proj", xn2, p+"mlp.gate", H, I, false)
		up := b.linear(p+"mlp.up_proj", xn2, p+"mlp.up", H, I, false)
		sg := b.unary(p+"mlp.silu", ir.OpSilu, gate, p+"mlp.silu")
		h := b.mul(p+"mlp.mul", sg, up, p+"mlp.h")
		down := b.linear(p+"mlp.down_proj", h, p+"mlp.down", I, H, false)
		x = b.residual(p+"mlp.resid", x1, down, p+"out")
	}
	xn := b.rmsnorm("norm", x)
	logits := b.linear("lm_head", xn, "logits", H, V, false)
	return b.finish(b.loss(logits, B, S)), nil
}
