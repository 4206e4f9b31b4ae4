// Package models generates realistic tmmu IR graphs: small reference
// networks, GPT-2, Llama-2 and a large random DAG for planner benchmarks.
//
// Every generator takes a config (with a Default…Config constructor and a
// Validate method that reports every problem at once) and returns an
// *ir.Model with tensors, nodes and a full execution order that passes
// ir.Compile. Generation is deterministic: the same config gives the same
// model, byte for byte once encoded.
//
// # Models
//
//   - Chain: x0 [B,H] → x1 = x0·W … → xL, bias-free square matmuls.
//   - Residual: blocks x' = x + gelu(x·W).
//   - MLP: linear (+bias) layers with gelu between them, In → Hidden → … →
//     Classes logits.
//   - GPT2: GPT-2 (default: small, 124,439,808 parameters). Token and
//     positional embeddings (wpe is looked up with the embedding op on the
//     positions input [Seq] and broadcast-added), pre-norm blocks with a
//     fused c_attn producing qkv [B,S,3H] of which q, k and v are strided
//     views, causal attention, a 4H gelu MLP, ln_f and an lm_head tied to
//     wte.
//   - Llama: Llama-2 (default: 7B, 6,738,415,616 parameters, bf16). rmsnorm,
//     bias-free q/k/v/o with rope, grouped-query attention when KVHeads <
//     Heads, a SwiGLU MLP, a final rmsnorm and an untied lm_head.
//   - Synthetic: a random DAG of about one activation per node, for planner
//     scale tests (default 1,000,000 tensors). Inference only.
//
// With Train false a generator emits the forward pass and the logits (or
// last activation) are the graph output. With Train true it emits the
// train_full step: forward, a cross-entropy loss (the graph output) against
// int32 labels, the backward pass in reverse layer order as autograd would
// run it, and one in-place AdamW node per parameter in parameter id order.
// Forward activations that a backward node reads are marked
// saved_for_backward.
//
// # Naming
//
// Tensor ids follow the module structure: parameters such as
// h0.attn.c_attn.w and h0.ln_1.b, activations such as h0.attn.qkv; the
// gradient of tensor x is grad/x (partial sums of a tensor with several
// readers are grad/x.part<k> and grad/x.sum<k>); optimizer state is
// adam.m/p, adam.v/p and, for bf16 or fp16 parameters, the fp32 master/p.
// Node ids are fwd/<op name>, bwd/<op name>[.dx|.dw|.db|…] and opt/<param>.
//
// # Dtypes and roles
//
// Parameters, activations and gradients take the config dtype (fp32, bf16
// or fp16); the normalisation and attention statistics (mean, rstd, lse),
// the loss and its gradient seed are fp32; token ids and labels are int32.
// Optimizer state is fp32, so a mixed-precision model holds 2 (weight) + 2
// (gradient) + 12 (master, m, v) = 16 bytes per parameter.
//
// # Ops
//
// The op vocabulary (embedding, matmul, add, mul, gelu, silu, layernorm,
// rmsnorm, rope, causal_attention, cross_entropy, their backward ops, and
// adamw) is documented with its inputs, outputs and integer attributes in
// package ir (ir.Op), which shard and engine use too.
package models
