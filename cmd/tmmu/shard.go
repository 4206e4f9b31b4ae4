package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/shard"
)

var shardCmd = &command{
	name:    "shard",
	summary: "Check a shard spec (data, tensor and pipeline parallelism) and print its shard_spec_hash, or write one rank's view of a graph.",
	usage: "shard validate SPEC [--ir IR] [-o text|json]\n" +
		"       tmmu shard view IR --shard-spec SPEC --rank R [-o json|cbor] [--out FILE]",
	run: runShard,
}

func runShard(c *command, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stderr, "Usage: tmmu %s\n\n%s\n", c.usage, c.summary)
		if len(args) == 0 {
			return usagef("shard needs a subcommand: validate or view")
		}
		return nil
	}
	switch args[0] {
	case "validate":
		return runShardValidate(e, args[1:])
	case "view":
		return runShardView(e, args[1:])
	}
	return usagef("shard: unknown subcommand %q (validate, view)", args[0])
}

func runShardValidate(e *env, args []string) error {
	c := &command{name: "shard validate", usage: "shard validate SPEC [--ir IR] [-o text|json]",
		summary: "Resolve a shard spec (defaults filled in, preset expanded), report every problem at once, and print shard_spec_hash. With --ir, also check that the spec fits the graph: rules and overrides name its tensors, stages cover its layers, splits divide."}
	fs := newFlags(e, c)
	irFile := fs.String("ir", "", "check the spec against this graph (JSON or CBOR)")
	out := fs.String("o", "text", "output: text or json (the resolved spec and its hash)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("shard validate takes one spec file, got %d arguments", len(pos))
	}
	spec, err := loadSpec(e, pos[0])
	if err != nil {
		return err
	}
	rs, err := spec.Resolve()
	if err != nil {
		return err
	}
	if *irFile != "" {
		m, err := loadModel(e, *irFile)
		if err != nil {
			return err
		}
		if _, err := shard.Check(m, rs); err != nil {
			return err
		}
	}
	if *out == "json" {
		return writeJSON(e.stdout, struct {
			ShardSpecHash ir.Hash     `json:"shard_spec_hash"`
			Spec          *shard.Spec `json:"spec"`
		}{rs.Hash(), rs})
	}
	w := e.stdout
	fmt.Fprintf(w, "shard spec %s: valid\n", pos[0])
	fmt.Fprintf(w, "shard_spec_hash %s\n\n", rs.Hash())
	fmt.Fprintf(w, "world_size       %d = data %d × tensor %d × pipeline %d (ranks: tensor fastest, then data, then stage)\n",
		rs.WorldSize, rs.DataParallel.Degree, rs.TensorParallel.Degree, rs.Stages())
	fmt.Fprintf(w, "zero_stage       %d\n", rs.DataParallel.ZeROStage)
	fmt.Fprintf(w, "tensor rules     %d", len(rs.TensorParallel.Rules))
	if len(rs.TensorParallel.Rules) > 0 {
		parts := make([]string, len(rs.TensorParallel.Rules))
		for i, r := range rs.TensorParallel.Rules {
			parts[i] = r.Match + "→" + string(r.Split)
		}
		fmt.Fprintf(w, ": %s", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "\nsequence_par.    %v\npadding          %s\n", rs.SequenceParallel, rs.Padding)
	if len(rs.Pipeline.Stages) > 0 {
		parts := make([]string, len(rs.Pipeline.Stages))
		for i, s := range rs.Pipeline.Stages {
			parts[i] = fmt.Sprintf("%d:[%d,%d)", i, s.First, s.End)
		}
		fmt.Fprintf(w, "pipeline stages  %s (layer_pattern %s)\n", strings.Join(parts, " "), rs.Pipeline.LayerPattern)
	}
	for _, o := range rs.Overrides {
		fmt.Fprintf(w, "override         %s tensor_parallel=%s zero=%s\n", o.Tensor, o.TensorParallel, o.ZeRO)
	}
	if *irFile != "" {
		fmt.Fprintf(w, "\nfits %s: every rule and override names its tensors, stages cover the layers, splits divide\n", *irFile)
	}
	return nil
}

func runShardView(e *env, args []string) error {
	c := &command{name: "shard view", usage: "shard view IR --shard-spec SPEC --rank R [-o json|cbor] [--out FILE]",
		summary: "Write the rank-local graph of one rank: local shapes, and the rank's collectives (tp.*, dp.*, pp.*) as nodes with their buffers."}
	fs := newFlags(e, c)
	specFile := fs.String("shard-spec", "", "shard spec file (JSON or CBOR)")
	rank := fs.Uint64("rank", 0, "the rank")
	out := fs.String("o", "json", "encoding: json or cbor")
	file := fs.String("out", "", "write to FILE instead of standard output")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "json", "cbor"); err != nil {
		return err
	}
	if len(pos) != 1 || *specFile == "" {
		return usagef("shard view takes one IR file and --shard-spec")
	}
	m, spec, err := loadModelAndSpec(e, pos[0], *specFile)
	if err != nil {
		return err
	}
	v, err := shard.RankView(m, spec, *rank)
	if err != nil {
		return err
	}
	return writeModel(e, v.Model, *out, *file)
}

func loadSpec(e *env, name string) (*shard.Spec, error) {
	data, err := readInput(e, name)
	if err != nil {
		return nil, err
	}
	return shard.Decode(data)
}

func loadModel(e *env, name string) (*ir.Model, error) {
	data, err := readInput(e, name)
	if err != nil {
		return nil, err
	}
	return ir.Decode(data)
}

func loadModelAndSpec(e *env, irFile, specFile string) (*ir.Model, *shard.Spec, error) {
	if isCSV(irFile) {
		return nil, nil, usagef("--shard-spec plans IR graphs, not DSA instances")
	}
	m, err := loadModel(e, irFile)
	if err != nil {
		return nil, nil, err
	}
	spec, err := loadSpec(e, specFile)
	if err != nil {
		return nil, nil, err
	}
	return m, spec, nil
}

// planSharded is plan --shard-spec: one rank's plan, or every rank's.
func planSharded(e *env, irFile, specFile string, rank int64, allRanks bool, opts planner.Options, out string, listTensors bool, traceFile string) error {
	if allRanks == (rank >= 0) {
		return usagef("--shard-spec needs exactly one of --rank R and --all-ranks")
	}
	if allRanks && (out == "cbor" || listTensors || traceFile != "") {
		return usagef("--all-ranks prints a per-rank table (-o text) or summary (-o json); use --rank R for -o cbor, --tensors or --trace")
	}
	m, spec, err := loadModelAndSpec(e, irFile, specFile)
	if err != nil {
		return err
	}
	if !allRanks {
		start := time.Now()
		rp, err := shard.PlanRank(m, spec, uint64(rank), opts)
		if err != nil {
			return err
		}
		rp.Plan.Metrics.AllocationTimeNs = time.Since(start).Nanoseconds()
		if traceFile != "" {
			if err := writeFile(traceFile, rp.Plan.WriteTrace); err != nil {
				return err
			}
		}
		switch out {
		case "json":
			return writeJSON(e.stdout, rp)
		case "cbor":
			b, err := rp.Plan.EncodeCBOR()
			if err != nil {
				return err
			}
			_, err = e.stdout.Write(b)
			return err
		}
		fmt.Fprintf(e.stdout, "rank %d of %d  stage %d  data %d  tensor %d  shard_spec_hash %s\n", rp.Rank, rp.Plan.WorldSize,
			rp.Coord.Stage, rp.Coord.Data, rp.Coord.Tensor, rp.Plan.ShardSpecHash.Short())
		ms := rp.ModelState
		fmt.Fprintf(e.stdout, "model state %s (parameters %s, gradients %s, optimizer state %s)  collective peak %s\n\n",
			planner.FormatBytes(ms.Total()), planner.FormatBytes(ms.Parameters), planner.FormatBytes(ms.Gradients),
			planner.FormatBytes(ms.OptimizerState), planner.FormatBytes(rp.CollectivePeakBytes))
		printPlan(e.stdout, rp.Plan, listTensors)
		return nil
	}
	start := time.Now()
	gp, plans, err := shard.PlanRanks(m, spec, opts)
	if err != nil {
		return err
	}
	took := time.Since(start)
	if out == "json" {
		return writeJSON(e.stdout, rankSummaries(gp, plans))
	}
	printRanks(e.stdout, gp, plans, took)
	return nil
}

// rankSummary is one rank's line of plan --all-ranks -o json.
type rankSummary struct {
	Rank                uint64                    `json:"rank"`
	Coord               shard.Coord               `json:"coord"`
	ViewHash            ir.Hash                   `json:"view_ir_hash"`
	PlanHash            ir.Hash                   `json:"plan_hash"`
	ModelState          shard.ModelState          `json:"model_state"`
	CollectivePeakBytes uint64                    `json:"collective_peak_bytes"`
	Arenas              map[string]arenaBytesJSON `json:"arenas"`
}

type arenaBytesJSON struct {
	PeakBytes       uint64 `json:"peak_bytes"`
	ReservedBytes   uint64 `json:"reserved_bytes"`
	LowerBoundBytes uint64 `json:"lower_bound_bytes"`
}

func rankSummaries(gp *shard.GlobalPlan, plans []*shard.RankPlan) any {
	ranks := make([]rankSummary, len(plans))
	for i, rp := range plans {
		s := rankSummary{Rank: rp.Rank, Coord: rp.Coord, ViewHash: rp.ViewHash, PlanHash: rp.Plan.PlanHash,
			ModelState: rp.ModelState, CollectivePeakBytes: rp.CollectivePeakBytes, Arenas: map[string]arenaBytesJSON{}}
		for _, a := range rp.Plan.Arenas {
			s.Arenas[a.Name] = arenaBytesJSON{a.PeakBytes, a.ReservedBytes, a.LowerBoundBytes}
		}
		ranks[i] = s
	}
	return struct {
		GlobalPlan *shard.GlobalPlan `json:"global_plan"`
		Ranks      []rankSummary     `json:"ranks"`
	}{gp, ranks}
}

func printRanks(w io.Writer, gp *shard.GlobalPlan, plans []*shard.RankPlan, took time.Duration) {
	arena := func(p *planner.Plan, name string, reserved bool) string {
		for _, a := range p.Arenas {
			if a.Name == name {
				if reserved {
					return planner.FormatBytes(a.ReservedBytes)
				}
				return planner.FormatBytes(a.PeakBytes)
			}
		}
		return "-"
	}
	t := &table{align: "rrrrrrrrrrll"}
	t.add("RANK", "STAGE", "DATA", "TENSOR", "PARAMETERS", "OPTIMIZER", "GRADIENTS", "ACTIVATIONS", "COLLECTIVE", "MODEL STATE", "VIEW", "PLAN HASH")
	views := map[ir.Hash]bool{}
	for _, rp := range plans {
		p := rp.Plan
		views[rp.ViewHash] = true
		t.add(rp.Rank, rp.Coord.Stage, rp.Coord.Data, rp.Coord.Tensor,
			arena(p, ir.ArenaParameters, true), arena(p, ir.ArenaOptimizerState, true),
			arena(p, ir.ArenaGradients, false), arena(p, ir.ArenaActivations, false),
			planner.FormatBytes(rp.CollectivePeakBytes), planner.FormatBytes(rp.ModelState.Total()),
			rp.ViewHash.Short(), p.PlanHash.Short())
	}
	t.write(w)
	fmt.Fprintf(w, "\nPARAMETERS and OPTIMIZER are the persistent arenas' reserved bytes; GRADIENTS, ACTIVATIONS and COLLECTIVE are peaks (COLLECTIVE: gathered copies, partial sums and received activations, inside ACTIVATIONS and GRADIENTS).\n")
	fmt.Fprintf(w, "%d ranks, %d distinct views, planned in %s\n", len(plans), len(views), took.Round(time.Millisecond))
	fmt.Fprintf(w, "global_plan_hash %s\nshard_spec_hash  %s\nir_hash          %s\n", gp.Hash, gp.ShardSpecHash, gp.IRHash)
}

// shardFlags are plan's sharding flags.
type shardFlags struct {
	spec     *string
	rank     *int64
	allRanks *bool
}

func (s shardFlags) set() bool { return *s.spec != "" || *s.rank >= 0 || *s.allRanks }

func (s shardFlags) check() error {
	if *s.spec == "" && (*s.rank >= 0 || *s.allRanks) {
		return usagef("--rank and --all-ranks need --shard-spec")
	}
	return nil
}
