// Package engine executes a rank's planned graph on a device, every tensor
// at the offset the plan gave it. It is the strongest check of a plan: if
// two live tensors ever shared bytes, the planned run would compute
// something other than a run in which every tensor has bytes of its own.
//
// # Pieces
//
//   - A Backend is a device that holds regions and runs kernels: CPU (host
//     memory, the reference kernels of kernels.go) or WebGPU (package gpu:
//     one storage buffer per region, the WGSL twins in wgsl.go). Open
//     picks one; "auto" is WebGPU when the machine has an adapter, else
//     CPU, and says why it fell back.
//   - ApplyPlan (ApplyPlan_v1) cuts each arena at the device's region size
//     and places the pieces as blocks of the region allocator (package
//     alloc). Plans are made executable by ExecutableArenas: every arena
//     aligned to at least the device's minStorageBufferOffsetAlignment and
//     planned with region_bytes, so no tensor straddles two buffers.
//     PortableLimits are WebGPU's defaults, which every device meets: a
//     job planned for them runs on any rank's device, so all ranks agree
//     on one plan.
//   - New verifies the plan (planner.Verify) and lowers each executed node
//     to kernel launches, or to a collective. Step runs them in execution
//     order, then CommitExecution (CommitExecution_v1) waits for the
//     device and seals a state hash over the persistent tensors.
//     ZeroTensor and DebugFillTensor are the spec's ZeroTensor_v1 and
//     DebugFillTensor_v1; debug fill is refused in confidential and
//     regulated modes (MODE_VIOLATION).
//   - Collectives exchange bytes among the ranks of a data-parallel group:
//     Local for ranks in one process (the demo, tests), transport.Group
//     over NATS for ranks in separate processes. dp.all_reduce and
//     dp.reduce_scatter average (the gradient of the mean loss over the
//     global batch), dp.all_gather concatenates; every rank reduces the
//     same list in rank order, so replicas stay bit-identical.
//   - Executor adapts an Engine to a worker (runtime.Executor): it feeds a
//     synthetic counting task (Batch), reports the loss and state hash, and
//     carries model state across plan switches (Export, Import).
//
// # Kernels
//
// Ops: embedding, matmul (with transposes), add (with broadcast), mul,
// gelu, silu, layernorm, rmsnorm, rope, causal attention (grouped-query
// too, strided q/k/v views of a fused tensor), cross-entropy, their
// backward ops, reduce_sum, embedding_backward and the AdamW update (over
// a ZeRO partition of a whole parameter too). Every kernel is SIMT: one
// invocation per output element or row, sequential loops inside, no
// atomics, so results are deterministic and independent of the layout.
// TestGradientsMatchFiniteDifferences checks every backward kernel
// against central differences of the loss.
//
// # Limits
//
// fp32 and int32 tensors only (bf16 graphs and fp32 master weights are
// refused with UNSUPPORTED_EXECUTION), no shape envelopes at run time, and
// data parallelism only: tensor- and pipeline-parallel collectives are
// planned by package shard but not executed. The cross-entropy loss is
// summed by one invocation and the kernels favour clarity over speed.
// Model state is not checkpointed: a replacement worker starts from the
// initial parameters.
package engine
