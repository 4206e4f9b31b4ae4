package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tmmu/tmmu/dsa"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/planner/pack"
)

var planCmd = &command{
	name:    "plan",
	summary: "Plan tensor memory for a graph or a DSA instance (CSV): liveness, offsets per arena and the plan hash.",
	usage: "plan IR|-|CSV [--format auto|ir|dsa] [--mode MODE] [--strategy S] [--effort E] [--budget N] [--arena-config FILE] [--replay-token HEX] [-o text|json|cbor|csv] [--trace FILE] [--tensors]\n" +
		"       tmmu plan IR --shard-spec SPEC (--rank R | --all-ranks) [flags]",
	run: runPlan,
}

func runPlan(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	mode := fs.String("mode", "", "inference, forward, backward or train_full (default: train_full if the graph has backward nodes, else inference)")
	strategy := fs.String("strategy", string(planner.Packed), "placement strategy: "+strategyList()+" (packed aims at the lower bound; slots is the spec's layout; greedy-size the classic baseline)")
	effort := fs.String("effort", string(pack.Fast), "packed strategy effort: fast, or exact (starts with fast, then searches until it proves the peak optimal or spends its work budget, and never ends above fast at its default budget; reports the gap)")
	budget := fs.Int64("budget", 0, "packed strategy: work budget in deterministic units, instead of the effort's (exact: 4294967296, 15 to 50 s here); 0 keeps the effort's")
	arenaFile := fs.String("arena-config", "", "JSON file {arena: {capacity_bytes, alignment_bytes, page_size}}; sizes may be numbers or strings like \"80GiB\"")
	token := fs.String("replay-token", "", "replay token, 64 hex digits (default all zeros)")
	out := fs.String("o", "text", "output: text, json, cbor (the CBOR plan is the checkpoint form), or csv for a DSA instance (id,lower,upper,size,offset); JSON of a DSA instance lists offsets by buffer id")
	traceFile := fs.String("trace", "", "write the allocation trace (JSON lines) to FILE")
	listTensors := fs.Bool("tensors", false, "text output: list every tensor's placement")
	format := fs.String("format", "auto", "input: ir (UML_Model_IR JSON or CBOR), dsa (CSV id,lower,upper,size: one buffer a row, live over [lower, upper), planned with alignment 1), or auto (dsa for *.csv)")
	sf := shardFlags{
		spec:     fs.String("shard-spec", "", "plan a rank of a sharded job: shard spec file (JSON or CBOR; see tmmu shard validate)"),
		rank:     fs.Int64("rank", -1, "with --shard-spec: plan this rank's view"),
		allRanks: fs.Bool("all-ranks", false, "with --shard-spec: plan every rank and print a per-rank table (-o json: a summary with the global plan)"),
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json", "cbor", "csv"); err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("plan takes one IR or CSV file (or - for standard input), got %d arguments", len(pos))
	}
	if err := sf.check(); err != nil {
		return err
	}
	if sf.set() {
		if *out == "csv" || *format == "dsa" {
			return usagef("--shard-spec plans IR graphs; --format dsa and -o csv do not apply")
		}
		opts := planner.Options{Mode: planner.Mode(*mode), Strategy: planner.Strategy(*strategy), Effort: pack.Effort(*effort), Budget: *budget}
		if err := commonOptions(e, &opts, *token, *arenaFile); err != nil {
			return err
		}
		return planSharded(e, pos[0], *sf.spec, *sf.rank, *sf.allRanks, opts, *out, *listTensors, *traceFile)
	}
	in, err := loadInput(e, pos[0], *format)
	if err != nil {
		return err
	}
	if *out == "csv" && in.dsa == nil {
		return usagef("-o csv writes DSA instances (--format dsa) with their offsets")
	}
	g := in.g
	opts := planner.DefaultOptions(g)
	if in.dsa != nil {
		opts = in.dsa.Options(g)
	}
	if *mode != "" {
		opts.Mode = planner.Mode(*mode)
	}
	opts.Strategy, opts.Effort, opts.Budget = planner.Strategy(*strategy), pack.Effort(*effort), *budget
	if err := commonOptions(e, &opts, *token, *arenaFile); err != nil {
		return err
	}
	if in.dsa != nil && (*mode != "" && *mode != string(planner.Inference) || *arenaFile != "") {
		return usagef("--format dsa plans with mode inference and alignment 1; --mode and --arena-config do not apply")
	}
	start := time.Now()
	p, err := planner.PlanMemory(g, opts)
	if err != nil {
		return err
	}
	p.Metrics.AllocationTimeNs = time.Since(start).Nanoseconds()
	if *traceFile != "" {
		if err := writeFile(*traceFile, p.WriteTrace); err != nil {
			return err
		}
	}
	if in.dsa != nil && (*out == "json" || *out == "csv") {
		return writeDSA(e.stdout, in.dsa, p, *out)
	}
	switch *out {
	case "json":
		return writeJSON(e.stdout, p)
	case "cbor":
		b, err := p.EncodeCBOR()
		if err != nil {
			return err
		}
		_, err = e.stdout.Write(b)
		return err
	}
	printPlan(e.stdout, p, *listTensors)
	return nil
}

// commonOptions sets the replay token and arena config from their flags,
// and lets the packed strategy run steps on goroutines (the plan is the
// same with or without them; see planner.Options.Spawn).
func commonOptions(e *env, opts *planner.Options, token, arenaFile string) error {
	opts.Spawn = planner.Goroutines
	var err error
	if token != "" {
		if opts.ReplayToken, err = ir.ParseHash(token); err != nil {
			return failure.New(failure.InvalidOptions, planner.OpPlan, "--replay-token: "+err.Error())
		}
	}
	if arenaFile != "" {
		if opts.Arenas, err = loadArenaConfig(e, arenaFile); err != nil {
			return err
		}
	}
	return nil
}

func strategyList() string {
	s := make([]string, len(planner.Strategies))
	for i, x := range planner.Strategies {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// loadGraph reads, decodes and compiles an IR file.
func loadGraph(e *env, name string) (*ir.Graph, error) {
	data, err := readInput(e, name)
	if err != nil {
		return nil, err
	}
	return ir.Load(data)
}

// input is a graph to plan, and the DSA instance it came from if any.
type input struct {
	g   *ir.Graph
	dsa *dsa.Instance
}

// loadInput reads an IR file or, with format dsa (or auto and a .csv
// name), a DSA instance and its graph.
func loadInput(e *env, name, format string) (*input, error) {
	switch format {
	case "auto":
		format = "ir"
		if isCSV(name) {
			format = "dsa"
		}
	case "ir", "dsa":
	default:
		return nil, usagef("--format %s: want auto, ir or dsa", format)
	}
	data, err := readInput(e, name)
	if err != nil {
		return nil, err
	}
	if format == "ir" {
		g, err := ir.Load(data)
		return &input{g: g}, err
	}
	inst, err := dsa.ParseBytes(filepath.Base(name), data)
	if err != nil {
		return nil, failure.New(failure.InvalidEncoding, opIO, err.Error(), "file", name).Wrap(err)
	}
	g, err := ir.Compile(inst.Model())
	if err != nil {
		return nil, err
	}
	return &input{g: g, dsa: inst}, nil
}

// isCSV reports whether a file name says it holds a DSA instance.
func isCSV(name string) bool { return strings.HasSuffix(strings.ToLower(name), ".csv") }

// dsaPlan is the JSON form of a planned DSA instance.
type dsaPlan struct {
	Format           string             `json:"format"`
	Name             string             `json:"name"`
	Strategy         planner.Strategy   `json:"strategy"`
	Effort           pack.Effort        `json:"effort,omitempty"`
	PlanHash         ir.Hash            `json:"plan_hash"`
	Buffers          int                `json:"buffers"`
	AllocationTimeNs int64              `json:"allocation_time_ns"`
	Arenas           planner.Arenas     `json:"arenas"`
	Tensors          map[string]dsa.Row `json:"tensors"`
}

// writeDSA writes a planned instance as JSON (tensors keyed by id with
// offset, size and lifetime [lower, upper)) or as CSV
// id,lower,upper,size,offset in file order.
func writeDSA(w io.Writer, inst *dsa.Instance, p *planner.Plan, format string) error {
	rows, err := inst.Rows(p)
	if err != nil {
		return err
	}
	if format == "csv" {
		offsets := make([]uint64, len(rows))
		for i, r := range rows {
			offsets[i] = r.Offset
		}
		return inst.WritePlaced(w, offsets)
	}
	out := dsaPlan{Format: "tmmu_dsa_plan_v1", Name: inst.Name, Strategy: p.Strategy, Effort: p.Effort, PlanHash: p.PlanHash,
		Buffers: len(rows), AllocationTimeNs: p.Metrics.AllocationTimeNs, Arenas: p.Arenas, Tensors: make(map[string]dsa.Row, len(rows))}
	for _, r := range rows {
		out.Tensors[r.ID] = r
	}
	return writeJSON(w, out)
}

func loadArenaConfig(e *env, name string) (planner.ArenaConfig, error) {
	data, err := readInput(e, name)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c planner.ArenaConfig
	if err := dec.Decode(&c); err != nil {
		return nil, failure.New(failure.InvalidEncoding, planner.OpPlan,
			fmt.Sprintf("arena config %s: %v", name, err), "file", name)
	}
	return c, nil
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return ioError(err, name)
	}
	if err := write(f); err != nil {
		f.Close()
		return ioError(err, name)
	}
	if err := f.Close(); err != nil {
		return ioError(err, name)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func overLB(peak, lb uint64) string {
	if lb == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*(float64(peak)/float64(lb)-1))
}

func printPlan(w io.Writer, p *planner.Plan, listTensors bool) {
	name := p.Name
	if name == "" {
		name = "(unnamed)"
	}
	fmt.Fprintf(w, "plan %s  mode=%s  strategy=%s  tensors=%d  positions=%d\n", name, p.Mode, p.Strategy, len(p.Tensors), p.Positions)
	fmt.Fprintf(w, "plan_hash %s\nir_hash   %s\n\n", p.PlanHash, p.IRHash)
	at := &table{align: "llrrrrrrr"}
	at.add("ARENA", "ROLE", "TENSORS", "SLOTS", "MAX LIVE", "PEAK", "LOWER BOUND", "OVER LB", "RESERVED")
	for _, a := range p.Arenas {
		at.add(a.Name, a.Role, a.Tensors, a.LogicalSlots, a.MaxLive, planner.FormatBytes(a.PeakBytes),
			planner.FormatBytes(a.LowerBoundBytes), overLB(a.PeakBytes, a.LowerBoundBytes), planner.FormatBytes(a.ReservedBytes))
	}
	m := p.Metrics
	at.add("total", "", m.Tensors, m.PeakLogicalSlots, m.MaxLive, planner.FormatBytes(m.PeakBytes),
		planner.FormatBytes(m.LowerBoundBytes), overLB(m.PeakBytes, m.LowerBoundBytes), planner.FormatBytes(m.ReservedBytes))
	at.write(w)
	for _, a := range p.Arenas {
		if k := a.Packing; k != nil && a.LowerBoundBytes > 0 && a.PeakBytes > 0 {
			proof := fmt.Sprintf("not proven optimal, gap ≤ %.2f%%", 100*k.Gap)
			if k.Optimal {
				proof = "proven optimal"
			}
			if k.Budget > 0 { // greedy-size has no budget
				proof += fmt.Sprintf(", work %d of budget %d", k.Work, k.Budget)
			}
			fmt.Fprintf(w, "%s: %s, %s\n", a.Name, k.Method, proof)
		}
	}
	fmt.Fprintf(w, "\nreuse %.1f%%  fragmentation %.1f%%  activation retention %.1f%%  planned in %s\n",
		100*m.MemoryReuseRatio, 100*m.InternalFragmentationRatio, 100*m.ActivationRetentionRatio, time.Duration(m.AllocationTimeNs))
	if !listTensors {
		return
	}
	fmt.Fprintln(w)
	tt := &table{align: "llrrrll"}
	tt.add("TENSOR", "ARENA", "SLOT", "OFFSET", "SIZE", "LIFETIME", "STORAGE")
	for _, t := range p.Tensors {
		tt.add(t.ID, t.Arena, t.LogicalSlot, t.Offset, planner.FormatBytes(t.Size), fmt.Sprintf("[%d,%d]", t.Lifetime[0], t.Lifetime[1]), t.Storage)
	}
	tt.write(w)
}
