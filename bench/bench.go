// Package bench runs planning strategies side by side on a suite of
// instances and reports, per instance and strategy, the peak bytes, how far
// they are above the lower bound and the planning time; every plan is
// checked by the planner's independent verifier.
//
// The default suite is embedded: the offline dynamic storage allocation
// instances under dsa/ (see dsa/README.md for their sources and licences)
// and generated graphs, GPT-2 small and Llama-2-7B, each in train_full and
// in inference.
package bench

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tmmu/tmmu/bench/families"
	"github.com/tmmu/tmmu/dsa"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/planner/pack"
)

//go:embed dsa/*.csv dsa/README.md
var embedded embed.FS

// Instance is one entry of a suite: a compiled graph with the mode and
// arena configuration it is planned with.
type Instance struct {
	Name   string
	Kind   string // "dsa" or "graph"
	Graph  *ir.Graph
	Mode   planner.Mode
	Arenas planner.ArenaConfig
	Times  []int64 // planner.Options.PositionTimes (a DSA instance's clock)
}

// Method is a strategy with its effort, written "packed", "packed:exact",
// "slots", "greedy-size".
type Method struct {
	Strategy planner.Strategy
	Effort   pack.Effort
	Budget   int64 // packed: the work budget, 0 for the effort's
}

func (m Method) String() string {
	if m.Effort != "" && m.Effort != pack.Fast {
		return string(m.Strategy) + ":" + string(m.Effort)
	}
	return string(m.Strategy)
}

// DefaultMethods are the methods a bench compares when none are named.
var DefaultMethods = []Method{{Strategy: planner.Slots}, {Strategy: planner.GreedySize}, {Strategy: planner.Packed, Effort: pack.Fast}}

// ParseMethods parses a comma-separated list such as
// "slots,greedy-size,packed,packed:exact".
func ParseMethods(list string) ([]Method, error) {
	var ms []Method
	for _, f := range splitList(list) {
		st, eff, _ := strings.Cut(f, ":")
		m := Method{Strategy: planner.Strategy(st), Effort: pack.Effort(eff)}
		if !slices.Contains(planner.Strategies, m.Strategy) {
			return nil, fmt.Errorf("unknown method %q (methods: slots, greedy-size, packed, packed:exact)", f)
		}
		if m.Effort != "" && (m.Strategy != planner.Packed || !slices.Contains(pack.Efforts, m.Effort)) {
			return nil, fmt.Errorf("%q: only packed takes an effort, fast or exact", f)
		}
		if m.Strategy == planner.Packed && m.Effort == "" {
			m.Effort = pack.Fast
		}
		ms = append(ms, m)
	}
	if len(ms) == 0 {
		return nil, errors.New("no strategies named")
	}
	return ms, nil
}

// splitList splits a comma-separated list, without the spaces around each
// name and without empty entries.
func splitList(list string) []string {
	var out []string
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Suite loads the instances of dir: every *.csv (DSA instances) and every
// *.json or *.cbor (IR graphs, planned in their default mode), in name
// order. An empty dir means the embedded suite: its DSA instances, then
// the generated graphs; FamiliesSuite, the generated families, and
// "families:" with a comma-separated list, those alone (see Selection),
// every instance generated before Suite returns: to hold one at a time,
// as tmmu bench does, list them with Selection and generate each with
// Family.
func Suite(dir string) ([]Instance, error) {
	if specs, ok, err := Selection(dir, nil, nil); ok {
		if err != nil {
			return nil, err
		}
		out := make([]Instance, 0, len(specs))
		for _, spec := range specs {
			in, err := Family(spec)
			if err != nil {
				return nil, err
			}
			out = append(out, in)
		}
		return out, nil
	}
	var fsys fs.FS = embedded
	root := "dsa"
	if dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return nil, err // names dir
		}
		fsys, root = os.DirFS(dir), "."
	}
	entries, err := fs.ReadDir(fsys, root)
	if err != nil {
		return nil, err
	}
	var out []Instance
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if e.IsDir() || (ext != ".csv" && ext != ".json" && ext != ".cbor") {
			continue
		}
		data, err := fs.ReadFile(fsys, path.Join(root, name))
		if err != nil {
			return nil, err
		}
		if ext == ".csv" {
			in, err := dsa.ParseBytes(name, data)
			if err != nil {
				return nil, failure.New(failure.InvalidEncoding, OpSuite, err.Error(), "file", filepath.Join(dir, name)).Wrap(err)
			}
			g, err := ir.Compile(in.Model())
			if err != nil {
				return nil, inFile(err, filepath.Join(dir, name))
			}
			opts := in.Options(g)
			out = append(out, Instance{Name: strings.TrimSuffix(name, filepath.Ext(name)), Kind: "dsa", Graph: g, Mode: opts.Mode, Arenas: opts.Arenas, Times: opts.PositionTimes})
			continue
		}
		g, err := ir.Load(data)
		if err != nil {
			return nil, inFile(err, filepath.Join(dir, name))
		}
		out = append(out, Instance{Name: strings.TrimSuffix(name, filepath.Ext(name)), Kind: "graph", Graph: g, Mode: planner.DefaultMode(g)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: no *.csv, *.json or *.cbor instances in %s", dir)
	}
	if dir == "" {
		gen, err := Generated()
		if err != nil {
			return nil, err
		}
		out = append(out, gen...)
	}
	return out, nil
}

// OpSuite names Suite in its failures.
const OpSuite = "tmmu.bench"

// inFile returns err naming the file it came from: a failure with a file
// diagnostic, or else err with the file before it.
func inFile(err error, file string) error {
	if fe, ok := errors.AsType[*failure.Error](err); ok {
		return fe.With("file", file)
	}
	return fmt.Errorf("%s: %w", file, err)
}

// FamiliesSuite is the name Suite takes for the generated families;
// followed by a colon and a comma-separated list of families
// ("families:coarse,holed"), for those alone.
const FamiliesSuite = "families"

// Selection returns the family instances a suite names: FamiliesSuite,
// every family, or "families:" with a comma-separated list, those alone
// (see families.Select), at the given sizes and seeds (nil: the suite's);
// ok is false for any other suite. An unknown family or none named is an
// invalid option that names the suite, a size families.Select turns down
// one that names the sizes, and more instances than it lists one that
// names the sizes and how many seeds.
func Selection(suite string, sizes []int, seeds []uint64) (specs []families.Spec, ok bool, err error) {
	var names []string
	if suite != FamiliesSuite {
		list, ok := strings.CutPrefix(suite, FamiliesSuite+":")
		if !ok {
			return nil, false, nil
		}
		if names = splitList(list); len(names) == 0 {
			return nil, true, failure.New(failure.InvalidOptions, OpSuite, fmt.Sprintf("no families named after %q (families: %s)", FamiliesSuite+":", strings.Join(families.Names, ", ")), "suite", suite)
		}
	}
	specs, err = families.Select(names, sizes, seeds)
	switch {
	case errors.Is(err, families.ErrSize):
		return nil, true, failure.New(failure.InvalidOptions, OpSuite, err.Error(), "sizes", families.FormatSizes(sizes)).Wrap(err)
	case errors.Is(err, families.ErrCount):
		// The sizes times the seeds are the culprit; a seed list may
		// hold 100,000 numbers, so its length stands for it.
		sizesGiven, seedsGiven := "the suite's", "the suite's"
		if sizes != nil {
			sizesGiven = families.FormatSizes(sizes)
		}
		if seeds != nil {
			seedsGiven = fmt.Sprintf("%d seeds", len(seeds))
		}
		return nil, true, failure.New(failure.InvalidOptions, OpSuite, err.Error(), "sizes", sizesGiven, "seeds", seedsGiven).Wrap(err)
	case err != nil:
		return nil, true, failure.New(failure.InvalidOptions, OpSuite, err.Error(), "suite", suite).Wrap(err)
	}
	return specs, true, nil
}

// Family generates the instance spec names, planned as a DSA instance.
func Family(spec families.Spec) (Instance, error) {
	in, err := families.Generate(spec)
	if err != nil {
		return Instance{}, failure.New(failure.InvalidOptions, OpSuite, err.Error(), "family", spec.String())
	}
	g, err := ir.Compile(in.Model())
	if err != nil {
		return Instance{}, fmt.Errorf("%s: %w", in.Name, err)
	}
	opts := in.Options(g)
	return Instance{Name: in.Name, Kind: "family", Graph: g, Mode: opts.Mode, Arenas: opts.Arenas, Times: opts.PositionTimes}, nil
}

// ParseCounts parses a comma-separated list of numbers and ranges, such
// as "0-99,120": each range from its first to its last, inclusive, each
// number once, in the order first given. It reports a malformed entry, a
// number past 2^64-1, a range that runs backwards, or more than
// families.MaxSelected numbers written, naming it.
func ParseCounts(list string) ([]uint64, error) {
	var out []uint64
	seen := map[uint64]bool{}
	written := 0
	for _, f := range splitList(list) {
		a, b, isRange := strings.Cut(f, "-")
		lo, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 64)
		hi, err2 := lo, error(nil)
		if isRange {
			hi, err2 = strconv.ParseUint(strings.TrimSpace(b), 10, 64)
		}
		switch {
		case errors.Is(err1, strconv.ErrRange) || errors.Is(err2, strconv.ErrRange):
			return nil, fmt.Errorf("%q is past 2^64-1", f)
		case err1 != nil || err2 != nil:
			return nil, fmt.Errorf("%q is not a number or a range such as 0-99", f)
		case hi < lo:
			return nil, fmt.Errorf("range %q runs backwards", f)
		case hi-lo >= families.MaxSelected || written+int(hi-lo+1) > families.MaxSelected:
			return nil, fmt.Errorf("more than %d numbers", families.MaxSelected)
		}
		written += int(hi - lo + 1)
		for v := lo; ; v++ {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
			if v == hi {
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no numbers named")
	}
	return out, nil
}

// Generated returns the suite's generated graphs: GPT-2 small and
// Llama-2-7B (bf16, sequence 2048), each in train_full and inference.
func Generated() ([]Instance, error) {
	var out []Instance
	for _, train := range []bool{true, false} {
		gc := models.DefaultGPT2Config()
		gc.Train = train
		lc := models.DefaultLlamaConfig()
		lc.Train = train
		for _, mk := range []struct {
			name  string
			model func() (*ir.Model, error)
		}{
			{"gpt2-small", func() (*ir.Model, error) { return models.GPT2(gc) }},
			{"llama-7b", func() (*ir.Model, error) { return models.Llama(lc) }},
		} {
			m, err := mk.model()
			if err != nil {
				return nil, err
			}
			g, err := ir.Compile(m)
			if err != nil {
				return nil, err
			}
			mode := planner.Inference
			if train {
				mode = planner.TrainFull
			}
			out = append(out, Instance{Name: mk.name + "-" + string(mode), Kind: "graph", Graph: g, Mode: mode})
		}
	}
	return out, nil
}

// Run is one method on one instance.
type Run struct {
	Method string `json:"method"`
	// Peak and LowerBound sum over the plan's arenas (for a DSA instance,
	// its one arena).
	Peak       uint64  `json:"peak_bytes"`
	LowerBound uint64  `json:"lower_bound_bytes"`
	OverLB     float64 `json:"over_lower_bound"` // peak / lower bound - 1
	// TimeNs is the wall time of planner.PlanMemory (liveness, placement,
	// metrics and plan hash) on the compiled graph.
	TimeNs   int64 `json:"plan_time_ns"`
	Verified bool  `json:"verified"`
	// Optimal: every arena's peak is proven optimal.
	Optimal bool   `json:"proven_optimal"`
	Error   string `json:"error,omitempty"`
}

// Result is every method on one instance.
type Result struct {
	Instance   string `json:"instance"`
	Kind       string `json:"kind"`
	Buffers    int    `json:"buffers"` // storages planned
	LowerBound uint64 `json:"lower_bound_bytes"`
	Runs       []Run  `json:"runs"`
}

// Measure plans in with every method, verifies each plan and returns the
// results. A method that fails is reported in its Run, not as an error.
// The packed methods may run two steps at once on goroutines Measure
// lends them (planner.Options.Spawn): their plans are the same as on one
// core, and their times are wall times.
func Measure(in Instance, methods []Method) Result {
	res := Result{Instance: in.Name, Kind: in.Kind}
	for _, m := range methods {
		opts := planner.DefaultOptions(in.Graph)
		opts.Mode, opts.Arenas, opts.Strategy, opts.Effort, opts.Budget, opts.PositionTimes = in.Mode, in.Arenas, m.Strategy, m.Effort, m.Budget, in.Times
		opts.Spawn = planner.Goroutines // same plan, some steps at once
		start := time.Now()
		p, err := planner.PlanMemory(in.Graph, opts)
		el := time.Since(start)
		run := Run{Method: m.String(), TimeNs: el.Nanoseconds()}
		if err == nil {
			err = planner.Verify(in.Graph, p)
			run.Verified = err == nil
			run.Optimal = true
			for _, a := range p.Arenas {
				run.Optimal = run.Optimal && (a.PeakBytes <= a.LowerBoundBytes || a.Packing != nil && a.Packing.Optimal)
			}
			run.Peak, run.LowerBound = p.Metrics.PeakBytes, p.Metrics.LowerBoundBytes
			if run.LowerBound > 0 {
				run.OverLB = float64(run.Peak)/float64(run.LowerBound) - 1
			}
			res.Buffers, res.LowerBound = p.Metrics.Storages, p.Metrics.LowerBoundBytes
		}
		if err != nil {
			run.Error = err.Error()
		}
		res.Runs = append(res.Runs, run)
	}
	return res
}

// Summary aggregates one method over a suite.
type Summary struct {
	Method       string  `json:"method"`
	Instances    int     `json:"instances"`
	MeanOverLB   float64 `json:"mean_over_lower_bound"`
	MaxOverLB    float64 `json:"max_over_lower_bound"`
	AtLowerBound int     `json:"at_lower_bound"`
	Verified     int     `json:"verified"`
	TimeNs       int64   `json:"plan_time_ns"`
}

// Summarize returns a Summary per method, in the order of methods.
func Summarize(results []Result, methods []Method) []Summary {
	out := make([]Summary, len(methods))
	for k, m := range methods {
		s := &out[k]
		s.Method = m.String()
		for _, r := range results {
			run := r.Runs[k]
			s.Instances++
			s.MeanOverLB += run.OverLB
			s.MaxOverLB = max(s.MaxOverLB, run.OverLB)
			s.TimeNs += run.TimeNs
			if run.Verified {
				s.Verified++
				if run.Peak == run.LowerBound {
					s.AtLowerBound++
				}
			}
		}
		if s.Instances > 0 {
			s.MeanOverLB /= float64(s.Instances)
		}
	}
	return out
}
