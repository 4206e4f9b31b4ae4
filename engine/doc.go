// Package engine executes a rank's planned graph on a device, every tensor
// at the offset the plan gave it. It is the strongest check of a plan: if
// two live tensors ever shared bytes, the planned run would compute
// something other than a run in which every tensor has bytes of its own.
//
// # Pieces
//
//   - A Backend is a device that holds regions and runs kernels: CPU (host
//     memory, the reference kernels of kernels.go and groups.go, run on a
//     pool of GOMAXPROCS workers) or WebGPU (package gpu: one storage
//     buffer per region, the WGSL twins in wgsl.go). A launch binds each
//     slot to just the bytes its operands' storages span, however large
//     the region; only an operand larger than one binding (128 MiB on
//     llvmpipe) is bound as windows, so a tensor reaches up to
//     Windows().MaxSlotBytes (640 MiB on llvmpipe). Each WGSL module is
//     compiled for its binding shape, with every operand's slot a
//     constant. Open picks one; "auto" is WebGPU when the machine has an
//     adapter, else CPU, and says why it fell back.
//   - ApplyPlan (ApplyPlan_v1) cuts each arena at the device's region size
//     and packs the pieces first-fit decreasing into regions created
//     exactly as large as what they hold: the device bytes are the plan's
//     reserved bytes (MemoryStats, MemoryReport). Plans are made
//     executable by ExecutableArenas: every arena aligned to at least the
//     device's minStorageBufferOffsetAlignment, its reserved bytes a
//     multiple of it, and planned with region_bytes, so no tensor
//     straddles two buffers. PortableLimits are WebGPU's defaults, which
//     every device meets: a job planned for them runs on any rank's
//     device, so all ranks agree on one plan.
//   - New verifies the plan (planner.Verify), lowers each executed node
//     to kernel launches, or to a collective, and prepares every launch
//     once (on WebGPU a bind group each). Step runs them in execution
//     order and ends with the barrier of CommitExecution_v1; it reads
//     back only watched tensors (the loss) and on the cpu allocates
//     nothing (without collectives; an exchange among ranks allocates
//     its messages). The state hash over the persistent tensors is sealed when
//     asked (CommitExecution, Executor.StateHash: checkpoints, the end
//     of a run), since it reads the whole state back.
//     ZeroTensor and DebugFillTensor are the spec's ZeroTensor_v1 and
//     DebugFillTensor_v1; debug fill is refused in confidential and
//     regulated modes (MODE_VIOLATION).
//   - Collectives exchange bytes among the ranks of a data-parallel group:
//     Local for ranks in one process (the demo, tests), transport.Group
//     over NATS for ranks in separate processes. dp.all_reduce and
//     dp.reduce_scatter average (the gradient of the mean loss over the
//     global batch), dp.all_gather concatenates; every rank reduces the
//     same list in rank order, so replicas stay bit-identical.
//   - Executor adapts an Engine to a worker (runner.Executor): it feeds
//     the job's dataset (SetData: token streams for language models,
//     image sets for classifiers; package data) or a synthetic task
//     (Batch; random images), starts from loaded weights
//     (Options.Weights) or DefaultInit, reports each step's loss and the
//     validation loss (Validate: forward nodes only), seals the state
//     hash when asked (StateHash) and carries model state across plan
//     switches (Export, Import).
//   - Imported nodes (tmmu import torch) carry their aten call
//     (ir.Call); aten.go lowers a call to the kernels of atenkernels.go,
//     which read every tensor through the call's view (shape, strides,
//     offset), and to the tiled matmul (mm, bmm, addmm, convolutions by
//     im2col). atenwgsl.go holds their WGSL twins: imported graphs
//     run on both backends.
//
// # Kernels
//
// Ops: embedding, matmul (with transposes), add (with broadcast), mul,
// gelu, silu, layernorm, rmsnorm, rope, causal attention (grouped-query
// too, strided q/k/v views of a fused tensor), cross-entropy, their
// backward ops, reduce_sum, embedding_backward and the AdamW update (over
// a ZeRO partition of a whole parameter too). Element-wise kernels are
// SIMT, one invocation per output element. Reductions (layer and RMS
// norm, softmax and cross-entropy, attention) run one workgroup of 64
// lanes per row: each lane handles a bounded share and the lanes combine
// in a fixed tree that the cpu twins (groups.go) repeat. Matmul runs a
// workgroup per 32×32 output tile, each lane a 4×4 block, every output
// summed in the order of the inner dimension on both devices. Sums over
// rows (weight and bias gradients, reduce_sum, embedding_backward and
// matmul's inner dimension) run in launches of at most rowChunk rows,
// each continuing the sums the one before left in the output: the same
// bits as one launch, and no invocation loops over a dimension of
// unbounded size (attention's loops over the sequence end at its
// 2,048 tokens).
// Cross-entropy keeps per-row results in a small engine workspace
// beside the plan (WorkspaceBytes). No atomics: results are
// deterministic and independent of the layout.
// TestGradientsMatchFiniteDifferences checks every backward kernel
// against central differences of the loss.
//
// # Limits
//
// fp32, int32, int64 (values within 32 bits), bool and uint8 tensors
// only (bf16 graphs and fp32 master weights are refused with
// UNSUPPORTED_EXECUTION), no shape
// envelopes at run time, and
// data parallelism only: tensor- and pipeline-parallel collectives are
// planned by package shard but not executed. Every launch records how
// many loop iterations one invocation runs; on a device that silently
// ends long invocations (llvmpipe: 65,535) New refuses a launch above
// that with UNSUPPORTED_EXECUTION naming the node, instead of computing
// garbage. With row chunks, only rows of more than about a million
// elements (a layer norm over them, a vocabulary) and grouped-query
// attention with several query heads per key/value head at long
// sequences (8 over 2, heads 128 wide, 2,048 tokens) reach that bound.
// Attention runs sequences up to 2,048 and head dimensions up to 256.
// Beyond the register-blocked matmul (whose cpu blocks use AVX where the
// machine has it, with the Go blocks' bits) the kernels favour clarity
// over speed.
package engine
