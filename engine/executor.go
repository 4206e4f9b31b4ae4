package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"

	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/failure"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
)

// Executor runs a worker's steps on an Engine (runner.Executor): each
// step feeds this rank's slice of the synthetic language-modelling batch
// (Batch) for that step number, runs forward, backward and the AdamW
// update, and reports the loss and the sealed state hash. It is built for
// a freshly planned epoch; its state starts from DefaultInit or from the
// previous epoch's executor (Import).
type Executor struct {
	e      *Engine
	vocab  uint64
	closes []func() error // run by Close
	quiet  bool           // confidential or regulated: no loss reported
	data   Data           // nil streams: the synthetic task
	// images, for an image classifier, are its inputs and classes the
	// number of its classes (vocab is 0).
	images  *imageInputs
	classes uint64
}

// Configure applies the job's setup (runner.Configurer): in
// confidential and regulated data modes the engine refuses debug fills
// and the executor reports only the state hash, not the loss; the seed
// picks the batches; collectives are keyed by the epoch; the job's
// optimizer, initial weights and datasets replace the defaults.
func (x *Executor) Configure(s runner.Setup) error {
	if err := s.DataMode.Check(); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	x.e.opts.DataMode, x.quiet = s.DataMode, s.DataMode.Sensitive()
	if s.DataMode == "" {
		x.e.opts.DataMode = ir.DataStandard
	}
	x.e.opts.Seed = s.Seed
	x.e.keyPrefix = fmt.Sprintf("e%d/", s.Epoch)
	if a := s.AdamW; a != [5]float32{} {
		if err := x.e.SetAdamW(AdamW{LR: a[0], Beta1: a[1], Beta2: a[2], Eps: a[3], WeightDecay: a[4]}); err != nil {
			return err
		}
	}
	if s.Weights != nil {
		x.e.opts.Weights = s.Weights
		if err := x.e.InitState(nil); err != nil {
			return err
		}
	}
	if s.Data != nil {
		in, ok := data.InputsOf(x.e.g)
		if !ok {
			return unsupported("feeding a dataset: the graph has no data inputs (tokens and labels of a language model, images and labels of a classifier)")
		}
		train, val, err := s.Data(in.Seq, in.Batch*x.e.opts.DataSize)
		if err != nil {
			return err
		}
		return x.SetData(Data{Train: train, Val: val, ValBatches: s.ValBatches})
	}
	return nil
}

// NewExecutor builds an executor over g planned by p. ownBackend makes
// Close close the backend too.
func NewExecutor(g *ir.Graph, p *planner.Plan, opts Options, ownBackend bool) (*Executor, error) {
	if err := CheckOps(g); err != nil {
		return nil, err
	}
	x := &Executor{}
	if in, ok := data.InputsOf(g); ok && in.Kind == data.Images {
		x.images, x.classes = &imageInputs{B: in.Batch, sample: in.Sample}, in.Limit
	} else {
		var err error
		if x.vocab, err = vocabOf(g); err != nil {
			return nil, err
		}
	}
	e, err := New(g, p, opts)
	if err != nil {
		return nil, err
	}
	if err := e.InitState(nil); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.Watch("loss"); err != nil {
		e.Close()
		return nil, unsupported("the graph has no tensor \"loss\": the executors run training graphs (the generators', or imported with --train)")
	}
	x.e = e
	if ownBackend {
		x.closes = append(x.closes, opts.Backend.Close)
	}
	return x, nil
}

// CheckOps refuses a graph with an op the engine has no kernel for
// (imported graphs: aten or ONNX ops): UNSUPPORTED_EXECUTION naming the
// first such node in execution order and its op, and how many nodes of
// which ops there are.
// Planning does not need kernels; only execution does.
func CheckOps(g *ir.Graph) error {
	count := map[ir.Op]int{}
	first, total := -1, 0
	for _, i := range g.Order {
		n := &g.Nodes[i]
		if _, ok := lowerings[n.Op]; ok || n.Op.Collective() {
			continue
		}
		if n.Call != nil {
			if _, ok := atenLowerings[n.Call.Target]; ok {
				continue
			}
		}
		if first < 0 {
			first = int(i)
		}
		count[n.Op]++
		total++
	}
	if first < 0 {
		return nil
	}
	ops := make([]ir.Op, 0, len(count))
	for op := range count {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(a, b int) bool {
		return count[ops[a]] > count[ops[b]] || count[ops[a]] == count[ops[b]] && ops[a] < ops[b]
	})
	var list []string
	for k, op := range ops {
		if k == 5 {
			list = append(list, fmt.Sprintf("%d more", len(ops)-k))
			break
		}
		list = append(list, fmt.Sprintf("%s ×%d", op, count[op]))
	}
	n := &g.Nodes[first]
	return unsupported("node %q: op %q has no kernel; %d of %d nodes have ops the engine does not run (%s): it runs the ops of tmmu's model generators, and plans any graph",
		n.ID, n.Op, total, len(g.Nodes), strings.Join(list, ", "))
}

// vocabOf is the vocabulary of a language model (see data.InputsOf).
func vocabOf(g *ir.Graph) (uint64, error) {
	if in, ok := data.InputsOf(g); ok && in.Kind == data.Tokens {
		return in.Limit, nil
	}
	return 0, unsupported("the graph has no embedding of an input \"tokens\": the executors train language models (the generators', or imported ones whose token input the importer named tokens) and imported classifiers (images, labels); tmmu train and job submit --bind tokens=NAME,labels=NAME,loss=NAME name another graph's")
}

// Engine returns the engine.
func (x *Executor) Engine() *Engine { return x.e }

// Graph returns the graph the engine runs.
func (e *Engine) Graph() *ir.Graph { return e.g }

// MemoryReport says what the plan reserves and the device holds.
func (x *Executor) MemoryReport() string { return x.e.MemoryReport() }

// Name is the backend's name ("cpu" or "webgpu").
func (x *Executor) Name() string { return x.e.opts.Backend.Name() }

// Step runs one training step on the batch of step: the step-th batch
// of the training stream (SetData; steps are numbered from 1), or of the
// synthetic counting task.
func (x *Executor) Step(ctx context.Context, step uint64) (runner.StepStats, error) {
	var err error
	switch {
	case x.images != nil && x.data.Train != nil:
		err = x.e.feedImages(*x.images, x.data.Train, step-1)
	case x.images != nil:
		err = x.e.feedSyntheticImages(*x.images, step, x.classes)
	case x.data.Train != nil:
		err = x.e.feedTokens(x.data.Train, step-1)
	default:
		err = x.e.FeedLM(step, x.vocab)
	}
	if err != nil {
		return runner.StepStats{}, err
	}
	res, err := x.e.StepAt(ctx, step)
	if err != nil {
		return runner.StepStats{}, err
	}
	loss := res.Watched["loss"]
	if len(loss) != 1 {
		return runner.StepStats{}, fmt.Errorf("engine: loss has %d elements", len(loss))
	}
	// The state is sealed when asked (StateHash), not every step.
	st := runner.StepStats{Nodes: len(x.e.actions)}
	if d := x.data.Train; d != nil {
		st.DataFetched, st.DataFed = d.D.BytesFetched(), d.D.BytesFed()
	}
	if !x.quiet {
		st.HasLoss, st.Loss = true, float64(math.Float32frombits(loss[0]))
	}
	return st, nil
}

// Export returns the persistent tensors (parameters, optimizer state)
// and the optimizer's step count.
func (x *Executor) Export() (runner.State, error) {
	out := runner.State{Tensors: map[string][]uint32{}, OptimizerStep: x.e.t}
	for _, id := range x.e.persistent() {
		w, err := x.e.ReadTensor(id)
		if err != nil {
			return runner.State{}, err
		}
		out.Tensors[id] = w
	}
	return out, nil
}

// Import overwrites the persistent tensors and the optimizer's step
// count. Every persistent tensor must be present with the same element
// count: a state cut for another world is recut first (package
// checkpoint), never silently re-initialised.
func (x *Executor) Import(s runner.State) error {
	if err := x.check(s); err != nil {
		return err
	}
	for _, id := range x.e.persistent() {
		if err := x.e.WriteTensor(id, s.Tensors[id]); err != nil {
			return err
		}
	}
	if s.OptimizerStep > 0 {
		x.e.t = s.OptimizerStep
	}
	return nil
}

func (x *Executor) check(s runner.State) error {
	for _, id := range x.e.persistent() {
		w, ok := s.Tensors[id]
		ti, _ := x.e.g.TensorIndex(id)
		n := x.e.wordsOf(ti)
		if !ok || uint64(len(w)) != n {
			return unsupported("importing model state: tensor %q has %d elements here and %d in the state", id, n, len(w))
		}
	}
	return nil
}

// StateHash seals the state the device holds, as the last step sealed it
// (the optimizer's count before the next step).
func (x *Executor) StateHash() (string, error) {
	h, err := x.e.seal(x.e.t-1, x.e.ReadTensor)
	return h.String(), err
}

// HashOf is the state hash the executor seals holding s.
func (x *Executor) HashOf(s runner.State) (string, error) {
	if err := x.check(s); err != nil {
		return "", err
	}
	h, err := x.e.seal(s.OptimizerStep-1, func(id string) ([]uint32, error) { return s.Tensors[id], nil })
	return h.String(), err
}

// Close releases the device memory (and the backend when owned).
func (x *Executor) Close() error {
	errs := []error{x.e.Close()}
	for _, f := range x.closes {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

// FactoryOptions configure Factory.
type FactoryOptions struct {
	// Backend is "webgpu", "cpu" or "auto" (webgpu when an adapter
	// exists, else cpu, said once in the log).
	Backend string
	// Group returns this rank's data-parallel group for a plan whose
	// world has more than one rank, and a function that leaves it. Nil:
	// data-parallel views are refused (UNSUPPORTED_EXECUTION).
	Group func(p *planner.Plan) (Collectives, func() error, error)
	// Fallback builds the executor used in "auto" mode when the engine
	// cannot run a graph (bf16, tensor or pipeline parallel); nil makes
	// that an error.
	Fallback func(g *ir.Graph, p *planner.Plan) (runner.Executor, error)
	Log      *slog.Logger
}

// Factory returns a worker's executor constructor (worker.Config.Executor):
// an Executor for each planned epoch, on one backend opened on first use
// and kept for the worker's life. The data-parallel coordinates are the
// plan's rank and world size (views with tensor or pipeline parallelism
// are refused by the engine).
func Factory(o FactoryOptions) func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var be Backend
	return func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
		if be == nil {
			name := o.Backend
			b, reason, err := Open(name)
			if err != nil {
				return nil, err
			}
			if reason != "" {
				log.Warn("falling back to the cpu executor", "reason", reason)
			}
			log.Info("executor", "backend", b.Name(), "device", b.Describe())
			be = b
		}
		opts := Options{Backend: be, DataRank: p.Rank, DataSize: max(p.WorldSize, 1)}
		var leave func() error
		if p.WorldSize > 1 && o.Group != nil {
			c, l, err := o.Group(p)
			if err != nil {
				return nil, err
			}
			opts.Collectives, leave = c, l
		}
		x, err := NewExecutor(g, p, opts, false)
		if err != nil {
			if leave != nil {
				leave()
			}
			switch code := failure.CodeOf(err); {
			case o.Fallback == nil || (o.Backend != "auto" && o.Backend != ""):
			case code == failure.UnsupportedExecution, code == failure.AlignmentViolation, code == failure.ArenaTooSmall:
				log.Warn("the engine cannot run this plan; running the memory-traffic executor instead", "reason", err)
				return o.Fallback(g, p)
			}
			return nil, err
		}
		if leave != nil {
			x.closes = append(x.closes, leave)
		}
		return x, nil
	}
}
