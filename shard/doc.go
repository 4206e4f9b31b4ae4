// Package shard splits a job's graph over its ranks: data parallelism with
// DeepSpeed's ZeRO stages, Megatron-style tensor parallelism (with optional
// sequence parallelism) and pipeline stages. It is pure like the planner:
// values in, values out.
//
// A Spec says how the world of ranks is organised; Resolve validates it and
// fills in defaults, and Hash is shard_spec_hash, SHA-256 over the resolved
// spec's canonical CBOR (spec II.K). RankView derives one rank's IR, which
// the planner plans like any other graph; PlanRanks plans every rank and
// ties the rank plan hashes together in a GlobalPlan.
//
// # Specs
//
//	{
//	  "world_size": 16,
//	  "data_parallel":   {"degree": 4, "zero_stage": 2},
//	  "tensor_parallel": {"degree": 2},
//	  "pipeline":        {"stages": [[0, 6], [6, 12]]},
//	  "preset": "gpt2",
//	  "padding": "ceil"
//	}
//
// Ranks are numbered tensor-parallel fastest, then data-parallel, then
// pipeline stage: rank = (stage × dp + data) × tp + tensor. The degrees must
// multiply to world_size.
//
// # Rank views
//
// A view is built in three passes over the compiled graph.
//
// Tensor parallelism. Rules (first match wins; a preset appends the
// Megatron-LM rules for tmmu's GPT-2 or Llama graphs) split parameters by
// column (last dimension) or row (first dimension). Every other tensor's
// split follows from the operator that defines it, walking the nodes in
// execution order: a matmul with a column-split weight yields an
// activation split along its last dimension; one with a row-split weight
// yields a partial sum that a tp.all_reduce completes (in place when the
// tensor owns its storage alone); attention, rope and elementwise
// operators keep splits and divide their heads attributes; a
// vocabulary-split embedding yields a partial sum too; layer norms need
// their last dimension whole. An operator that gets an input in a state it
// cannot use gets a tp.all_gather copy first; operators the pass does not
// know get every input whole. Gradients follow the same rules through the
// backward nodes, so a column-parallel layer's input gradient is
// all-reduced and its weight gradient comes out split like the weight.
// With sequence_parallel, partial sums of [B,S,…] activations are
// reduce-scattered along the sequence instead and stay split through
// norms and residual adds until a column-parallel matmul gathers them.
// Finally every split tensor takes its local shape (ceil(d/tp) under
// padding "ceil"), and views of a split fused tensor (GPT-2's q, k, v of
// qkv) get their local offsets and strides.
//
// Pipeline. Each node runs on the stage that holds its layer (read from
// its id by pipeline.layer_pattern); embedding work before the layers runs
// on the first stage, the head and loss after them on the last; an
// optimizer node runs on every stage that holds its parameter (a tied
// embedding is held by the first and the last). An activation or gradient
// defined on one stage and used on another gets a pp.send after its last
// writer and a pp.recv before its first reader.
//
// ZeRO over the data-parallel group, per tensor: gradients read by an
// update node are all-reduced in place after their last writer (stages 0
// and 1) or reduce-scattered into a gradient shard of ceil(numel/dp)
// elements (stages 2 and 3); optimizer state is partitioned from stage 1,
// with the updated parameter all-gathered in place after its update
// (stages 1 and 2); at stage 3 the parameter is partitioned too and a
// dp.all_gather writes a whole temporary copy before its first reader in
// each phase, which the planner frees after the phase's last reader.
//
// A view's ModelState counts what the rank keeps, so for mixed-precision
// Adam (2-byte parameters and gradients, fp32 master, m and v: 16 bytes a
// parameter) over Ψ parameters and N data-parallel ranks it is 16Ψ at
// stage 0, 4Ψ + 12Ψ/N at stage 1, 2Ψ + 14Ψ/N at stage 2 and 16Ψ/N at stage
// 3, up to the padding of each partition to whole elements.
//
// # Limits
//
// Views plan one micro-batch: a pipeline schedule that keeps several
// micro-batches in flight multiplies the activations, which the plan does
// not model. Gradient reductions are per tensor, not bucketed. The tensor
// parallel rules know the op vocabulary of package models; graphs with
// other operators still get valid views, with those operators' inputs
// gathered whole.
package shard
