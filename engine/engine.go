package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// AdamW holds the optimizer's hyperparameters (the IR carries no floats).
type AdamW struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
}

// DefaultAdamW is lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
var DefaultAdamW = AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}

// Options configure an Engine.
type Options struct {
	Backend Backend
	// DataMode is the job's data-handling mode: debug fills are
	// refused in the sensitive ones (default standard).
	DataMode ir.DataMode
	AdamW    AdamW
	// Collectives is the data-parallel group, with this rank's place in
	// it (DataRank of DataSize; 0 of 1 when nil).
	Collectives        Collectives
	DataRank, DataSize uint64
	// SkipVerify executes a plan without planner.Verify. Only tests set
	// it, to show that a corrupted plan computes something else.
	SkipVerify bool
	// Unshared executes the plan's reference: every storage gets a
	// device buffer of its own, as an engine without a planner would
	// (the plan is still verified). Same kernels, same order: a correct
	// plan computes the same bits.
	Unshared bool
	// Seed picks the batches (Batch): the batch of a step derives from
	// (Seed, step, rank).
	Seed uint64
	// Weights, when set, are the parameters' initial values (whole
	// parameters by id, as weights.Load returns them): NewExecutor starts
	// from them instead of DefaultInit, a ZeRO-3 rank from its partition.
	Weights map[string][]float32
}

// Engine runs one rank's planned graph on a backend: the plan's arenas
// live in device regions, every tensor at its planned offset.
type Engine struct {
	opts    Options
	g       *ir.Graph
	p       *planner.Plan
	mem     *Memory
	loc     []location
	actions []action
	t       uint64 // optimizer steps taken
	watch   map[string]int32
	// keyPrefix starts every collective key (the epoch; see Configure).
	keyPrefix string
	// ws is the workspace region (0: none) and wsBytes its size.
	ws      int
	wsBytes uint64
	// watched holds the watched tensors' words, reused every step;
	// adam holds the AdamW bias corrections of the step.
	watched map[string][]uint32
	adam    [2]uint32
	rng     [4]uint32 // a dropout mask's seed and step
	// feed holds the inputs FeedLM and feedTokens write, reused every
	// step.
	feed struct {
		tokens, labels, positions []uint32
		i32tok, i32lab            []int32
		wide                      [2][]uint32 // int64 inputs' words
		pixels                    []float32
	}
}

// New applies p to the backend's memory (ApplyPlan_v1) and prepares the
// kernels of every executed node. p is verified against g first.
func New(g *ir.Graph, p *planner.Plan, opts Options) (*Engine, error) {
	if opts.Backend == nil {
		return nil, errors.New("engine: no backend")
	}
	if opts.DataMode == "" {
		opts.DataMode = ir.DataStandard
	}
	if opts.AdamW == (AdamW{}) {
		opts.AdamW = DefaultAdamW
	}
	if opts.DataSize == 0 {
		opts.DataSize = 1
	}
	if !opts.SkipVerify {
		if err := planner.Verify(g, p); err != nil {
			return nil, err
		}
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if _, ok := dtCode(t.DType); !ok {
			return nil, unsupported("tensor %q is %s: the executors run fp32, int32, int64, bool and uint8 tensors (bf16 and fp16 are not built yet)", t.ID, t.DType)
		}
		if len(t.ShapeEnvelope) > 0 {
			return nil, unsupported("tensor %q has a shape envelope: executing dynamic shapes is not built yet", t.ID)
		}
	}
	if err := checkExecutable(p, opts.Backend.Limits()); err != nil {
		return nil, err
	}
	e := &Engine{opts: opts, g: g, p: p, t: 1, watch: map[string]int32{}, watched: map[string][]uint32{}}
	apply := func() (*Memory, error) { return ApplyPlan(opts.Backend, p) }
	if opts.Unshared {
		apply = func() (*Memory, error) { return applyUnshared(opts.Backend, g) }
	}
	mem, err := apply()
	if err != nil {
		return nil, err
	}
	e.mem = mem
	if e.loc, err = mem.locate(g, p); err != nil {
		mem.Release()
		return nil, err
	}
	live, err := planner.AnalyzeLiveness(g, p.Mode)
	if err != nil {
		mem.Release()
		return nil, err
	}
	l := &lowerer{e: e}
	for _, ni := range live.Order {
		n := &g.Nodes[ni]
		a := action{node: n.ID, outputs: n.Outputs, forward: n.Phase == "" || n.Phase == ir.Forward}
		if n.Op.Collective() {
			a.coll, err = l.collective(n)
		} else {
			a.launches, err = l.lower(n)
		}
		if err != nil {
			mem.Release()
			return nil, err
		}
		e.actions = append(e.actions, a)
	}
	if err := e.checkKernels(); err != nil {
		mem.Release()
		return nil, err
	}
	if err := e.placeWorkspace(l.ws); err != nil {
		mem.Release()
		return nil, err
	}
	if err := e.checkLoops(); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.prepare(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// prepare binds every launch once, so a step creates nothing.
func (e *Engine) prepare() error {
	for i := range e.actions {
		a := &e.actions[i]
		for _, l := range a.launches {
			p, err := e.opts.Backend.Prepare(l)
			if err != nil {
				return fmt.Errorf("engine: node %s: %w", a.node, deviceError(err))
			}
			a.prepared = append(a.prepared, p)
		}
	}
	return nil
}

// placeWorkspace allocates the workspace the launches asked for and
// points their workspace slots at it.
func (e *Engine) placeWorkspace(words uint64) error {
	if words == 0 {
		return nil
	}
	align := max(e.opts.Backend.Limits().MinStorageBufferOffsetAlignment, 4)
	size := (4*words + align - 1) / align * align
	id, err := e.opts.Backend.NewRegion(size)
	if err != nil {
		return failure.New(failure.DeviceError, OpApplyPlan, fmt.Sprintf("workspace of %d bytes: %v", size, err))
	}
	e.ws, e.wsBytes = id, size
	for i := range e.actions {
		for j := range e.actions[i].launches {
			slots := e.actions[i].launches[j].Slots
			for k := range slots {
				if slots[k] == wsRegion {
					slots[k] = id
				}
			}
		}
	}
	return nil
}

// checkKernels refuses, naming the node, a launch the backend has no
// kernel for. Every kernel has a cpu body and a WGSL twin
// (TestWGSLTwins); this is the guard for a kernel added to one
// side only.
func (e *Engine) checkKernels() error {
	if e.opts.Backend.Name() != "webgpu" {
		return nil
	}
	for _, a := range e.actions {
		for _, l := range a.launches {
			twins := wgslKernels
			if l.Groups {
				twins = wgslGroupKernels
			}
			if _, ok := twins[l.Kernel]; !ok {
				return unsupported("node %q: kernel %s has no WebGPU twin: run it on the cpu executor (--executor cpu)", a.node, l.Kernel)
			}
		}
	}
	return nil
}

// loopLimiter is a backend whose device ends an invocation after a
// number of loop iterations (llvmpipe: 65,535), silently.
type loopLimiter interface {
	MaxLoopIterations() uint64
}

// checkLoops refuses a plan with a launch whose invocations would loop
// longer than the device lets them: its result would be garbage.
func (e *Engine) checkLoops() error {
	ll, ok := e.opts.Backend.(loopLimiter)
	if !ok || ll.MaxLoopIterations() == 0 {
		return nil
	}
	limit := ll.MaxLoopIterations()
	for _, a := range e.actions {
		for _, l := range a.launches {
			if l.Iters > limit {
				return unsupported("node %q: kernel %s loops up to %d times in one invocation; the device (%s) ends an invocation after %d iterations",
					a.node, l.Kernel, l.Iters, e.opts.Backend.Describe(), limit)
			}
		}
	}
	return nil
}

// WorkspaceBytes is the device memory the engine holds beside the plan's
// arenas: per-row partial results of reductions (0 when none), one more
// region.
func (e *Engine) WorkspaceBytes() uint64 { return e.wsBytes }

// Close releases the device memory.
func (e *Engine) Close() error {
	for i := range e.actions {
		for _, p := range e.actions[i].prepared {
			p.Release()
		}
		e.actions[i].prepared = nil
	}
	err := e.mem.Release()
	if e.ws != 0 {
		err = errors.Join(err, e.opts.Backend.FreeRegion(e.ws))
		e.ws = 0
	}
	return err
}

// MemoryReport is Memory().Stats() in words, with the workspace.
func (e *Engine) MemoryReport() string {
	s := e.mem.Stats().String()
	if e.wsBytes > 0 {
		s += fmt.Sprintf("; engine workspace %s beside the plan (reduction partials)", planner.FormatBytes(e.wsBytes))
	}
	return s
}

// Memory returns the device memory the plan was applied to.
func (e *Engine) Memory() *Memory { return e.mem }

func deviceError(err error) error {
	var fe *failure.Error
	if errors.As(err, &fe) {
		return err
	}
	return failure.New(failure.DeviceError, OpExecute, err.Error())
}

// wordsOf is the words tensor ti's elements take: one a float32 or
// int32 element, two an int64 one, a quarter of one a byte.
func (e *Engine) wordsOf(ti int32) uint64 {
	n, _ := ir.Numel(e.g.Tensors[ti].Shape)
	switch size := e.g.Tensors[ti].DType.Size(); size {
	case 1, 2:
		return (n*size + 3) / 4
	default:
		return n * size / 4
	}
}

// tensor returns the index and location of id.
func (e *Engine) tensor(id string) (int32, location, error) {
	ti, ok := e.g.TensorIndex(id)
	if !ok {
		return 0, location{}, fmt.Errorf("engine: no tensor %q", id)
	}
	return ti, e.loc[ti], nil
}

// ZeroTensor writes zeros over the tensor's bytes (ZeroTensor_v1).
func (e *Engine) ZeroTensor(id string) error {
	ti, loc, err := e.tensor(id)
	if err != nil {
		return err
	}
	return e.write(loc, make([]byte, e.g.Bytes[ti]))
}

// DebugFillTensor writes a deterministic pattern derived from seed over
// the tensor's bytes (DebugFillTensor_v1). It is refused in confidential
// and regulated modes.
func (e *Engine) DebugFillTensor(id string, seed uint64) error {
	if m := e.opts.DataMode; m.Sensitive() {
		return failure.New(failure.ModeViolation, "UML_OS.TMMU.DebugFillTensor_v1",
			fmt.Sprintf("debug fill of %q is forbidden in %s mode", id, m), "tensor", id, "mode", string(m))
	}
	ti, loc, err := e.tensor(id)
	if err != nil {
		return err
	}
	b := make([]byte, e.g.Bytes[ti])
	x := seed ^ 0x9e3779b97f4a7c15
	for i := 0; i+4 <= len(b); i += 4 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		put32(b[i:], uint32(x))
	}
	return e.write(loc, b)
}

func (e *Engine) write(loc location, b []byte) error {
	if err := e.opts.Backend.Write(loc.region, loc.offset, b); err != nil {
		return deviceError(err)
	}
	return nil
}

// WriteTensor writes a tensor's words: its elements as 4-byte
// little-endian words (float32 and int32: one word an element; int64:
// two; bool and uint8: four elements a word). On the cpu it allocates
// nothing.
func (e *Engine) WriteTensor(id string, words []uint32) error {
	ti, loc, err := e.tensor(id)
	if err != nil {
		return err
	}
	n := e.wordsOf(ti)
	if uint64(len(words)) != n || e.g.Tensors[ti].View != nil {
		return fmt.Errorf("engine: %d words for tensor %q of %d words", len(words), id, n)
	}
	if ww, ok := e.opts.Backend.(wordWriter); ok {
		if err := ww.WriteWords(loc.region, loc.offset, words); err != nil {
			return deviceError(err)
		}
		return nil
	}
	b := make([]byte, 4*len(words))
	for i, w := range words {
		put32(b[4*i:], w)
	}
	return e.write(loc, b)
}

// ReadTensor returns a contiguous tensor's words (see WriteTensor).
func (e *Engine) ReadTensor(id string) ([]uint32, error) {
	ti, loc, err := e.tensor(id)
	if err != nil {
		return nil, err
	}
	if e.g.Tensors[ti].View != nil {
		return nil, fmt.Errorf("engine: %q is a view", id)
	}
	w := make([]uint32, e.wordsOf(ti))
	return w, e.readInto(loc, w)
}

// readInto waits for the device and reads len(dst) words at loc.
func (e *Engine) readInto(loc location, dst []uint32) error {
	be := e.opts.Backend
	if err := be.Wait(); err != nil {
		return deviceError(err)
	}
	if r, ok := be.(wordReader); ok {
		if err := r.ReadWords(loc.region, loc.offset, dst); err != nil {
			return deviceError(err)
		}
		return nil
	}
	b, err := be.Read(loc.region, loc.offset, 4*uint64(len(dst)))
	if err != nil {
		return deviceError(err)
	}
	for i := range dst {
		dst[i] = le32(b[4*i:])
	}
	return nil
}

// Watch asks Step to read tensor id right after the node that writes it
// (a scratch tensor such as the loss is overwritten later in the step).
func (e *Engine) Watch(id string) error {
	ti, ok := e.g.TensorIndex(id)
	if !ok {
		return fmt.Errorf("engine: no tensor %q", id)
	}
	if e.g.Tensors[ti].View != nil {
		return fmt.Errorf("engine: %q is a view", id)
	}
	e.watch[id] = ti
	e.watched[id] = make([]uint32, e.wordsOf(ti))
	return nil
}

// StepResult is what one step produced.
type StepResult struct {
	// Watched holds the watched tensors' words, read after their writer.
	// The engine reuses them: they are valid until the next step.
	Watched map[string][]uint32
}

// Step runs every executed node once, in execution order, then commits.
// Collectives are keyed by the optimizer's step count.
func (e *Engine) Step(ctx context.Context) (StepResult, error) { return e.StepAt(ctx, e.t) }

// StepAt is Step with collectives keyed by step, the job's step number
// (which every rank agrees on, even one that joined late).
//
// A step runs the launches bound when the engine was built, reads
// nothing but the watched tensors and ends with the barrier of
// CommitExecution_v1 (the device has finished the step). It does not
// hash the state: CommitExecution, StateHash and Executor.StateHash do,
// when a caller (a checkpoint, the end of a run) asks. On the cpu
// backend a step without collectives allocates nothing.
func (e *Engine) StepAt(ctx context.Context, step uint64) (StepResult, error) {
	e.adam[0] = f32(1 - pow32(e.opts.AdamW.Beta1, float32(e.t)))
	e.adam[1] = f32(1 - pow32(e.opts.AdamW.Beta2, float32(e.t)))
	if err := e.run(ctx, step, "", false); err != nil {
		return StepResult{}, err
	}
	e.t++
	return StepResult{Watched: e.watched}, nil
}

// Evaluate runs the forward nodes only (no backward, no update) and
// returns the watched tensors, as Step does. The state is left as it
// was: the persistent tensors forward nodes update in place (an
// imported batch norm's running statistics) are saved before and
// written back after. An imported training graph is evaluated as it
// trains (batch statistics, dropout drawn for step 0), not as PyTorch's
// eval mode. key tells its collectives apart from a step's; every rank
// of the group must evaluate with the same key.
func (e *Engine) Evaluate(ctx context.Context, key string) (StepResult, error) {
	saved := map[string][]uint32{}
	for _, id := range e.forwardWrites() {
		w, err := e.ReadTensor(id)
		if err != nil {
			return StepResult{}, err
		}
		saved[id] = w
	}
	if err := e.run(ctx, 0, key, true); err != nil {
		return StepResult{}, err
	}
	for id, w := range saved {
		if err := e.WriteTensor(id, w); err != nil {
			return StepResult{}, err
		}
	}
	return StepResult{Watched: e.watched}, nil
}

// forwardWrites are the persistent tensors that forward nodes write (in
// place: they are inputs too), sorted.
func (e *Engine) forwardWrites() []string {
	var ids []string
	for i := range e.actions {
		if a := &e.actions[i]; a.forward {
			for _, id := range a.outputs {
				if ti, ok := e.g.TensorIndex(id); ok && e.g.Tensors[ti].Role.Persistent() && !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// run runs the actions in order (only the forward ones when forward is
// set), then waits for the device. Collectives are keyed by the epoch,
// then key (or the step when key is empty), then the node.
func (e *Engine) run(ctx context.Context, step uint64, key string, forward bool) error {
	for i := range e.actions {
		a := &e.actions[i]
		if forward && !a.forward {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if a.coll != nil {
			k := fmt.Sprintf("%s%d/%s", e.keyPrefix, step, a.node)
			if key != "" {
				k = e.keyPrefix + key + "/" + a.node
			}
			if err := a.coll.run(ctx, e, k); err != nil {
				return fmt.Errorf("engine: collective %s: %w", a.node, err)
			}
		}
		for j, p := range a.prepared {
			switch a.launches[j].Kernel {
			case "adamw":
				if err := p.SetParams(adamCorrections, e.adam[:]); err != nil {
					return fmt.Errorf("engine: node %s: %w", a.node, deviceError(err))
				}
			case "a_bernoulli":
				// The mask of this step: (seed, step) in its last words.
				e.rng = [4]uint32{uint32(e.opts.Seed), uint32(e.opts.Seed >> 32), uint32(step), uint32(step >> 32)}
				if err := p.SetParams(len(a.launches[j].Params)-4, e.rng[:]); err != nil {
					return fmt.Errorf("engine: node %s: %w", a.node, deviceError(err))
				}
			}
			if err := p.Run(); err != nil {
				return fmt.Errorf("engine: node %s: %w", a.node, deviceError(err))
			}
		}
		if len(e.watch) > 0 {
			for _, id := range a.outputs {
				if ti, ok := e.watch[id]; ok {
					if err := e.readInto(e.loc[ti], e.watched[id]); err != nil {
						return err
					}
				}
			}
		}
	}
	if err := e.opts.Backend.Wait(); err != nil {
		return deviceError(err)
	}
	return nil
}

// adamCorrections is where the adamw kernel's params hold the step's
// bias corrections 1 − β1^t and 1 − β2^t, adamHyper its lr, β1, β2, ε
// and weight decay.
const (
	adamCorrections = 16
	adamHyper       = 11
)

// SetAdamW replaces the optimizer's hyper-parameters from the next step
// on (every prepared update takes them).
func (e *Engine) SetAdamW(a AdamW) error {
	e.opts.AdamW = a
	words := []uint32{f32(a.LR), f32(a.Beta1), f32(a.Beta2), f32(a.Eps), f32(a.WeightDecay)}
	for i := range e.actions {
		act := &e.actions[i]
		for j, p := range act.prepared {
			if act.launches[j].Kernel != "adamw" {
				continue
			}
			if err := p.SetParams(adamHyper, words); err != nil {
				return fmt.Errorf("engine: node %s: %w", act.node, deviceError(err))
			}
		}
	}
	return nil
}

// StateHash seals the persistent state after a step.
type StateHash [32]byte

func (h StateHash) String() string { return fmt.Sprintf("%x", h[:]) }

// CommitExecution waits for all queued work and seals the state
// (CommitExecution_v1): SHA-256 over the optimizer step the next step
// will take and the bytes of the persistent tensors (parameters,
// optimizer state), in id order. Two runs with the same inputs and plan
// layout-independent kernels give the same hash. It reads every
// persistent tensor back: Step does not call it.
func (e *Engine) CommitExecution() (StateHash, error) {
	if err := e.opts.Backend.Wait(); err != nil {
		return StateHash{}, deviceError(err)
	}
	return e.seal(e.t, e.ReadTensor)
}

// seal hashes the persistent tensors as read returns them, for optimizer
// step t (CommitExecution_v1's preimage).
func (e *Engine) seal(t uint64, read func(id string) ([]uint32, error)) (StateHash, error) {
	h := sha256.New()
	fmt.Fprintf(h, "tmmu-state-v1 step %d\n", t)
	for _, id := range e.persistent() {
		w, err := read(id)
		if err != nil {
			return StateHash{}, err
		}
		fmt.Fprintf(h, "%s %d\n", id, len(w))
		b := make([]byte, 4*len(w))
		for i, x := range w {
			put32(b[4*i:], x)
		}
		h.Write(b)
	}
	var s StateHash
	copy(s[:], h.Sum(nil))
	return s, nil
}

// persistent lists the persistent tensors (parameters and optimizer
// state) that own their storage, by id: the state a step leaves behind.
func (e *Engine) persistent() []string {
	var ids []string
	for i := range e.g.Tensors {
		t := &e.g.Tensors[i]
		if t.Role.Persistent() && t.View == nil && e.g.Root[i] == int32(i) {
			ids = append(ids, t.ID)
		}
	}
	return ids
}

// Float32s converts words to floats.
func Float32s(w []uint32) []float32 {
	f := make([]float32, len(w))
	for i, x := range w {
		f[i] = math.Float32frombits(x)
	}
	return f
}

// Words converts floats to words.
func Words(f []float32) []uint32 {
	w := make([]uint32, len(f))
	for i, x := range f {
		w[i] = math.Float32bits(x)
	}
	return w
}
