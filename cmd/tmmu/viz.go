package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/planner/pack"
	"github.com/tmmu/tmmu/viz"
)

var vizCmd = &command{
	name:    "viz",
	summary: "Draw a plan's memory timeline (time across, offset up, a box per tensor; for a graph, its forward, backward and optimizer phases) as SVG or HTML.",
	usage:   "viz IR|PLAN|CSV --out FILE.svg|FILE.html [--format auto|ir|plan|dsa] [--mode MODE] [--strategy S] [--effort E] [-o text|json]",
	run:     runViz,
}

func runViz(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	outFile := fs.String("out", "", "output file; .svg writes the picture, .html an interactive page around it")
	out := fs.String("o", "text", "what to print once the file is written: text or json")
	format := fs.String("format", "auto", "input: ir (a graph, planned here), plan (a plan from tmmu plan -o json|cbor), dsa (CSV id,lower,upper,size), or auto")
	mode := fs.String("mode", "", "for a graph: inference, forward, backward or train_full (default: the graph's)")
	strategy := fs.String("strategy", string(planner.Packed), "for a graph: "+strategyList())
	effort := fs.String("effort", string(pack.Fast), "for a graph planned packed: fast or exact")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("viz takes one IR, plan or CSV file, got %d arguments", len(pos))
	}
	ext := strings.ToLower(filepath.Ext(*outFile))
	if ext != ".svg" && ext != ".html" {
		return usagef("--out must name a .svg or .html file, got %q", *outFile)
	}
	var p *planner.Plan
	var vo viz.Options // phases: known when the input is a graph
	if *format == "plan" || *format == "auto" && !isCSV(pos[0]) {
		data, err := readInput(e, pos[0])
		if err != nil {
			return err
		}
		if q, derr := planner.DecodePlan(data); derr == nil && q.Format == planner.Format {
			p = q
		} else if *format == "plan" {
			return derr
		}
		e.stdin = strings.NewReader(string(data)) // read once: loadInput takes it from here
		pos[0] = "-"
	}
	if p == nil {
		in, err := loadInput(e, pos[0], *format)
		if err != nil {
			return err
		}
		opts := planner.DefaultOptions(in.g)
		if in.dsa != nil {
			opts = in.dsa.Options(in.g)
		}
		if *mode != "" {
			opts.Mode = planner.Mode(*mode)
		}
		opts.Strategy, opts.Effort = planner.Strategy(*strategy), pack.Effort(*effort)
		if p, err = planner.PlanMemory(in.g, opts); err != nil {
			return err
		}
		if in.dsa == nil {
			vo.Phases = viz.PhasesOf(in.g)
		}
	}
	write := viz.SVG
	if ext == ".html" {
		write = viz.HTML
	}
	if err := writeFile(*outFile, func(w io.Writer) error { return write(w, p, vo) }); err != nil {
		return err
	}
	if *out == "json" {
		return writeJSON(e.stdout, map[string]any{"file": *outFile, "plan_hash": p.PlanHash, "tensors": len(p.Tensors), "arenas": len(p.Arenas), "peak_bytes": p.Metrics.PeakBytes})
	}
	fmt.Fprintf(e.stdout, "wrote %s: plan %s, %d tensors in %d arenas, peak %s\n", *outFile, p.PlanHash.Short(), len(p.Tensors), len(p.Arenas), planner.FormatBytes(p.Metrics.PeakBytes))
	return nil
}
