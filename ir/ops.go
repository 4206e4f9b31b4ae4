package ir

import "strings"

// Op names what a node computes. Graphs may carry any op (an imported
// model's aten or ONNX ops plan like any other); the constants below are
// the ones tmmu itself produces and executes.
type Op string

// The ops below are the set the model generators emit, package shard adds
// (the collectives) and package engine has kernels for. Every node
// attribute is an integer (map[string]int64); attributes that are 0 are
// omitted.
//
// Shapes below use B = batch, S = sequence, H = hidden, V = vocabulary,
// K and N for matmul's inner and output dimensions, and "[..]" for any
// number of leading dimensions. "like x" means same shape and dtype as x.
// Activations and gradients take the config dtype; the statistics lse, mean
// and rstd, the loss and its seed are fp32; token ids and labels are int32.
//
// Forward ops (phase "forward"):
//
//	op                inputs                  outputs                      attrs
//	embedding         table [V,H], ids [..]   y [..,H]                     -
//	matmul            a [..,K], b [K,N]       y [..,N]                     transpose_a, transpose_b
//	add               a [..,N], b           y like a                     -
//	mul               a, b (same shape)       y like a                     -
//	gelu              x                       y like x                     -
//	silu              x                       y like x                     -
//	layernorm         x [B,S,H], w [H], b [H] y, mean [B,S], rstd [B,S]    -
//	rmsnorm           x [B,S,H], w [H]        y, rstd [B,S]                -
//	rope              x [B,S,heads*D]         y like x                     heads
//	causal_attention  q, k, v                 y like q, lse [B,heads,S]    heads, kv_heads
//	cross_entropy     logits [..,V], labels   loss [] (fp32 scalar)        -
//
// matmul flattens a to 2-D over its leading dimensions; with transpose_b = 1
// b is [N,K] and used transposed (the tied GPT-2 lm_head). With transpose_a
// = 1 (backward only) both operands are flattened over their leading
// dimensions and a is transposed: a [..,K], b [..,N] → y [K,N] (a weight
// gradient). add broadcasts b over a's leading dimensions when b has fewer
// dimensions (a bias [N], or positions [S,H] against [B,S,H]); otherwise the
// shapes are equal (a residual). causal_attention takes q [B,S,heads*D] and
// k, v [B,S,kv_heads*D] (grouped-query attention when kv_heads < heads); in
// GPT-2 q, k and v are strided views of the fused qkv [B,S,3H].
//
// Backward ops (phase "backward"):
//
//	op                         inputs                        outputs                 attrs
//	ones                       -                             dloss [] (fp32 seed)    -
//	cross_entropy_backward     logits, labels, dloss         dlogits like logits     -
//	matmul                     dy, b  (dx = dy·bᵀ)           dx like a               transpose_b (or none when b was transposed)
//	matmul                     a, dy  (db = aᵀ·dy)           db like b               transpose_a (dy, a for a transposed b)
//	reduce_sum                 dy [..,N]                     db (b's shape)          -
//	gelu_backward              x, dy                         dx                      -
//	silu_backward              x, dy                         dx                      -
//	mul                        dy, b / dy, a                 da / db                 -
//	layernorm_backward         x, w, mean, rstd, dy          dx, dw, db              -
//	rmsnorm_backward           x, w, rstd, dy                dx, dw                  -
//	rope_backward              dy                            dx                      heads
//	causal_attention_backward  q, k, v, y, lse, dy           dq, dk, dv or dqkv      heads, kv_heads
//	embedding_backward         ids, dy                       dtable [V,H]            vocab
//	add                        g1, g2                        g (gradient sum)        -
//
// reduce_sum sums dy over its leading dimensions down to the shape of its
// output. causal_attention_backward writes a single dqkv [B,S,3H] when q, k
// and v are views of one fused tensor (GPT-2), else dq, dk, dv. Outputs of a
// backward op whose forward input needs no gradient (an input tensor such as
// token ids or a first-layer x) are not produced: matmul's dx node is left
// out, and layernorm_backward/rmsnorm_backward then list only the weight
// gradients. Gradients that are the incoming gradient unchanged (both
// operands of a residual add, the first operand of a bias add) reuse that
// tensor with no node; a tensor read by several forward nodes gets one
// gradient contribution per reader, summed by out-of-place add nodes as the
// contributions arrive.
//
// Optimizer op (phase "optimizer"), one node per parameter:
//
//	op     inputs                  outputs              attrs
//	adamw  p, g, [master], m, v    p, [master], m, v    -
//
// adamw updates p, master, m and v in place (they are marked in_place_write
// and listed as both input and output). master is the fp32 copy of a bf16 or
// fp16 parameter; m and v are fp32; g has the parameter's dtype.
const (
	OpEmbedding       Op = "embedding"
	OpMatmul          Op = "matmul"
	OpAdd             Op = "add"
	OpMul             Op = "mul"
	OpGelu            Op = "gelu"
	OpSilu            Op = "silu"
	OpLayerNorm       Op = "layernorm"
	OpRMSNorm         Op = "rmsnorm"
	OpRope            Op = "rope"
	OpCausalAttention Op = "causal_attention"
	OpCrossEntropy    Op = "cross_entropy"

	OpOnes                    Op = "ones"
	OpCrossEntropyBackward    Op = "cross_entropy_backward"
	OpReduceSum               Op = "reduce_sum"
	OpGeluBackward            Op = "gelu_backward"
	OpSiluBackward            Op = "silu_backward"
	OpLayerNormBackward       Op = "layernorm_backward"
	OpRMSNormBackward         Op = "rmsnorm_backward"
	OpRopeBackward            Op = "rope_backward"
	OpCausalAttentionBackward Op = "causal_attention_backward"
	OpEmbeddingBackward       Op = "embedding_backward"

	OpAdamW Op = "adamw"

	// OpSynthetic is the op of every node of a models.Synthetic graph.
	OpSynthetic Op = "synthetic"

	// Collectives, which package shard inserts: "<group>.<kind>", the
	// group tp (tensor parallel), dp (data parallel) or pp (pipeline).
	OpTPAllGather     Op = "tp.all_gather"
	OpTPAllReduce     Op = "tp.all_reduce"
	OpTPReduceScatter Op = "tp.reduce_scatter"
	OpDPAllGather     Op = "dp.all_gather"
	OpDPAllReduce     Op = "dp.all_reduce"
	OpDPReduceScatter Op = "dp.reduce_scatter"
	OpPPSend          Op = "pp.send"
	OpPPRecv          Op = "pp.recv"
)

// Collective reports whether o is a collective: tp.*, dp.* or pp.*.
func (o Op) Collective() bool {
	s := string(o)
	return strings.HasPrefix(s, "dp.") || strings.HasPrefix(s, "tp.") || strings.HasPrefix(s, "pp.")
}
