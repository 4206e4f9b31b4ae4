// Package runner defines the executor a worker runs steps with, and two
// executors that compute nothing.
//
// An Executor runs the steps of one rank's planned graph. The executors
// that compute — the cpu reference kernels and WebGPU — live in package
// engine; this package has:
//
//   - ArenaExecutor ("arena") allocates each arena of the plan as host
//     memory, places every tensor at its planned offset and, for each node
//     in execution order, reads a sample of every input and writes every
//     byte of every output at its planned address. It moves the plan's
//     real memory traffic and checks, per node, that no output overlaps a
//     live input it does not update in place; it runs no kernels (no
//     arithmetic on tensor values). It stands in where package engine
//     cannot run a graph yet (bf16 tensors, tensor or pipeline parallel
//     views).
//   - PlanOnly ("plan-only") allocates nothing and does no work: for
//     plans too large for the machine, where only agreement and progress
//     matter.
package runner

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// Executor runs steps of one rank's plan.
type Executor interface {
	// Name says what the executor does ("arena", "plan-only").
	Name() string
	// Step runs one step.
	Step(ctx context.Context, step uint64) (StepStats, error)
}

// StepStats summarises a step.
type StepStats struct {
	Nodes        int    `json:"nodes"`
	BytesWritten uint64 `json:"bytes_written"`
	// Checksum is a digest of the bytes the step wrote, deterministic for
	// a plan and a step number.
	Checksum uint64 `json:"checksum"`
	// HasLoss is set by executors that compute (engine's cpu and webgpu):
	// Loss is the step's training loss on this rank. (The state hash is
	// sealed when asked: StateCarrier.StateHash.)
	HasLoss bool    `json:"has_loss,omitempty"`
	Loss    float64 `json:"loss,omitempty"`
	// HasValLoss is set after a step the job validates at (a Validator's
	// loss).
	HasValLoss bool    `json:"has_val_loss,omitempty"`
	ValLoss    float64 `json:"val_loss,omitempty"`
	// DataFetched and DataFed are the training data's bytes fetched from
	// where it lives and fed to the graph so far (executors fed a
	// dataset).
	DataFetched uint64 `json:"data_fetched,omitempty"`
	DataFed     uint64 `json:"data_fed,omitempty"`
}

// MemoryReporter is implemented by executors that hold device memory:
// the plan's bytes beside the device's, and why they differ when they
// do. The worker logs it when it applies a plan.
type MemoryReporter interface {
	MemoryReport() string
}

// State is an executor's model state: its persistent tensors
// (parameters, optimizer state) by id, as 32-bit words, and the
// optimizer's step count for the next step.
type State struct {
	Tensors       map[string][]uint32
	OptimizerStep uint64
}

// StateCarrier is implemented by executors that hold model state. At a
// plan switch the worker moves the state from the old executor to the
// new one, so training continues across a replan in the same process;
// at a checkpoint it exports the state, and after a restore it imports
// it and checks that the executor seals the state it was given.
type StateCarrier interface {
	Export() (State, error)
	// Import overwrites the executor's state. Every persistent tensor
	// must be present with the executor's element count.
	Import(State) error
	// StateHash is the sealed state hash (CommitExecution_v1) of the
	// state the executor holds, as its last step sealed it; read back
	// from the device.
	StateHash() (string, error)
	// HashOf is the state hash the executor seals when it holds s.
	HashOf(s State) (string, error)
}

// Setup is what a worker tells an executor about the job before its
// first step.
type Setup struct {
	// DataMode is the job's data mode ("standard", "confidential",
	// "regulated"). In the last two, executors report no tensor-derived
	// values (HasLoss stays false) and refuse debug fills.
	DataMode ir.DataMode
	// Seed is the job's seed: the batch of a step and every random draw
	// derive from (Seed, step, rank).
	Seed uint64
	// Epoch is the plan epoch the executor runs: collectives are keyed
	// by it, so ranks of an abandoned timeline (a rollback) never mix
	// their data with the new one's.
	Epoch uint64
	// Data makes the job's sample streams for a graph's rows of seq
	// tokens and a global batch of batch rows (nil: the synthetic task);
	// val is nil without validation data. ValBatches is how many batches
	// a validation reads.
	Data       func(seq, batch uint64) (train, val *data.Stream, err error)
	ValBatches uint64
	// Weights are the initial weights, whole parameters by id (nil: the
	// executor's default initialisation).
	Weights map[string][]float32
	// AdamW is lr, β1, β2, ε and the weight decay (zero: the executor's
	// default).
	AdamW [5]float32
}

// Validator is implemented by executors that compute a validation loss
// (the mean over the validation data's first batches, forward only): ok
// is false when there is no validation data or the loss is not
// reported (confidential and regulated modes).
type Validator interface {
	Validate(ctx context.Context, step uint64) (loss float64, ok bool, err error)
}

// Configurer is implemented by executors that handle tensor data or
// exchange it: the worker configures them before their first step.
type Configurer interface {
	Configure(Setup) error
}

// Closer is implemented by executors that hold device memory; the worker
// closes an executor when a plan switch retires it.
type Closer interface {
	Close() error
}

// PlanOnly is an executor that does nothing.
type PlanOnly struct{}

// Name returns "plan-only".
func (PlanOnly) Name() string { return "plan-only" }

// Step does nothing.
func (PlanOnly) Step(context.Context, uint64) (StepStats, error) { return StepStats{}, nil }

// ArenaExecutor runs steps as memory traffic over a plan's arenas.
type ArenaExecutor struct {
	arenas map[string][]byte
	nodes  []node
}

type span struct {
	arena  string
	offset uint64
	size   uint64
}

type node struct {
	id      string
	ins     []span
	outs    []span
	inPlace []bool // per output: also an input
}

// DefaultMaxBytes bounds what NewArenaExecutor allocates.
const DefaultMaxBytes = 4 << 30

// Default is the executor for a plan when nothing else is chosen or
// can run it: the arena executor, or PlanOnly when the plan reserves more
// than DefaultMaxBytes.
func Default(g *ir.Graph, p *planner.Plan) (Executor, error) {
	if p.Metrics.ReservedBytes > DefaultMaxBytes {
		return PlanOnly{}, nil
	}
	return NewArenaExecutor(g, p, 0)
}

// NewArenaExecutor allocates p's arenas (their reserved bytes; an error
// above maxBytes, 0 meaning DefaultMaxBytes) and prepares g's executed
// nodes.
func NewArenaExecutor(g *ir.Graph, p *planner.Plan, maxBytes uint64) (*ArenaExecutor, error) {
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	if p.Metrics.ReservedBytes > maxBytes {
		return nil, fmt.Errorf("runtime: the plan reserves %s, above the executor's limit %s",
			planner.FormatBytes(p.Metrics.ReservedBytes), planner.FormatBytes(maxBytes))
	}
	live, err := planner.AnalyzeLiveness(g, p.Mode)
	if err != nil {
		return nil, err
	}
	x := &ArenaExecutor{arenas: map[string][]byte{}}
	for _, a := range p.Arenas {
		x.arenas[a.Name] = make([]byte, a.ReservedBytes)
	}
	place := func(id string) (span, error) {
		i, ok := slices.BinarySearchFunc(p.Tensors, id, func(t planner.TensorPlacement, id string) int { return strings.Compare(t.ID, id) })
		if !ok {
			return span{}, fmt.Errorf("runtime: tensor %q has no placement", id)
		}
		t := &p.Tensors[i]
		if t.Offset+t.Size > uint64(len(x.arenas[t.Arena])) {
			return span{}, fmt.Errorf("runtime: tensor %q [%d, %d) is outside arena %s (%d bytes)", id, t.Offset, t.Offset+t.Size, t.Arena, len(x.arenas[t.Arena]))
		}
		return span{t.Arena, t.Offset, t.Size}, nil
	}
	for _, ni := range live.Order {
		n := &g.Nodes[ni]
		nd := node{id: n.ID}
		for _, id := range n.Inputs {
			s, err := place(id)
			if err != nil {
				return nil, err
			}
			nd.ins = append(nd.ins, s)
		}
		for _, id := range n.Outputs {
			s, err := place(id)
			if err != nil {
				return nil, err
			}
			nd.outs = append(nd.outs, s)
			nd.inPlace = append(nd.inPlace, slices.Contains(n.Inputs, id))
		}
		for j, o := range nd.outs {
			for k, in := range nd.ins {
				if !nd.inPlace[j] && !sameStorage(g, n.Inputs[k], n.Outputs[j]) && overlaps(o, in) {
					return nil, fmt.Errorf("runtime: node %q writes %q over its input %q", n.ID, n.Outputs[j], n.Inputs[k])
				}
			}
		}
		x.nodes = append(x.nodes, nd)
	}
	return x, nil
}

// sameStorage reports whether two tensors share one storage by
// declaration (the same tensor, a view, or members of an alias group, as
// an imported in-place op writes a new version of its input): a node may
// write one over the other.
func sameStorage(g *ir.Graph, a, b string) bool {
	i, ok1 := g.TensorIndex(a)
	j, ok2 := g.TensorIndex(b)
	return ok1 && ok2 && g.Root[i] == g.Root[j]
}

func overlaps(a, b span) bool {
	return a.arena == b.arena && a.size > 0 && b.size > 0 && a.offset < b.offset+b.size && b.offset < a.offset+a.size
}

// Name returns "arena".
func (x *ArenaExecutor) Name() string { return "arena" }

// Step runs every node: it digests up to 64 bytes at each end of every
// input and fills every output with a pattern derived from that digest,
// the node and the step.
func (x *ArenaExecutor) Step(ctx context.Context, step uint64) (StepStats, error) {
	var st StepStats
	sum := fnv.New64a()
	var seed [8]byte
	for i := range x.nodes {
		if i%256 == 0 && ctx.Err() != nil {
			return st, ctx.Err()
		}
		n := &x.nodes[i]
		h := fnv.New64a()
		binary.LittleEndian.PutUint64(seed[:], step)
		h.Write(seed[:])
		h.Write([]byte(n.id))
		for _, in := range n.ins {
			b := x.arenas[in.arena][in.offset : in.offset+in.size]
			h.Write(b[:min(len(b), 64)])
			h.Write(b[max(len(b)-64, 0):])
		}
		v := h.Sum64()
		for _, o := range n.outs {
			b := x.arenas[o.arena][o.offset : o.offset+o.size]
			fill(b, v)
			st.BytesWritten += o.size
		}
		binary.LittleEndian.PutUint64(seed[:], v)
		sum.Write(seed[:])
		st.Nodes++
	}
	st.Checksum = sum.Sum64()
	return st, nil
}

// fill writes v's bytes over b, doubling copies.
func fill(b []byte, v uint64) {
	if len(b) == 0 {
		return
	}
	var pat [8]byte
	binary.LittleEndian.PutUint64(pat[:], v)
	n := copy(b, pat[:])
	for n < len(b) {
		n += copy(b[n:], b[:n])
	}
}
