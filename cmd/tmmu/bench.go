package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tmmu/tmmu/bench"
	"github.com/tmmu/tmmu/bench/families"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/planner"
)

var benchCmd = &command{
	name:    "bench",
	summary: "Compare placement strategies on a suite: peak bytes, % over the lower bound and planning time; every plan verified.",
	usage:   "bench [--suite DIR|families|families:LIST [--sizes LIST] [--seeds LIST]] [--strategies LIST] [--budget N] [-o text|json]",
	run:     runBench,
}

func runBench(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	suite := fs.String("suite", "", "directory of instances: *.csv (DSA: id,lower,upper,size) and *.json/*.cbor (IR graphs); \"families\": the generated families (perfect packings of 100 to 10,000 buffers, halving ones (power-of-two sizes), sliced ones (any piece cut, slivers), pinwheel ones (not guillotine), banded ones (nine cuts in ten in bytes), dense ones (half as many ticks as pieces), coarse ones (a tenth as many ticks as pieces) and holed ones (pieces missing) of 100 to 5,000, transformer training steps of 1 to 96 layers as a compiler's memory pass sees them, mixed training steps; see package bench/families); \"families:coarse,holed\": those families alone; default: the built-in suite (minimalloc A-F, somas-resnet50, iopddl G_1 and S_1, GPT-2 small and Llama-2-7B in train_full and inference)")
	sizes := fs.String("sizes", "", "with a families suite: the sizes to generate instead of the suite's, as numbers and ranges (\"1000,5000\", \"1-8\"), each once: the pieces cut of a tiling (1 to 65,536; holed leaves about 1 in 32 out), buffers of a mixed instance (10 to 65,536), layers of a transformer (1 to 96); a family takes the sizes in its range, and a size no family selected takes, or a named family that takes none, is an error")
	seeds := fs.String("seeds", "", "with a families suite: the seeds to generate instead of the suite's (0-1; transformers 0-3), as numbers and ranges (\"0-99\"), each once, for instances the suite does not hold; instances come family by family in the suite's order, then by size and seed as given")
	budget := fs.Int64("budget", 0, "work budget of the packed methods (0: each effort's own)")
	list := fs.String("strategies", "slots,greedy-size,packed", "comma-separated methods: slots, greedy-size, packed, packed:exact")
	out := fs.String("o", "text", "output: text or json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("bench takes no arguments (name a directory with --suite)")
	}
	methods, err := bench.ParseMethods(*list)
	if err != nil {
		return failure.New(failure.InvalidOptions, opIO, "--strategies: "+err.Error(), "strategies", *list)
	}
	if *budget < 0 {
		return usagef("--budget %d is negative", *budget)
	}
	for k := range methods {
		if methods[k].Strategy == planner.Packed {
			methods[k].Budget = *budget
		}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	count, instance, err := benchSource(*suite, *sizes, *seeds, given)
	var fe *failure.Error
	if errors.As(err, &fe) {
		return err // names the file, flag or family and what is wrong with it
	}
	if err != nil {
		return ioError(err, *suite)
	}
	progress := isTerminal(e.stderr)
	var results []bench.Result
	for k := range count {
		in, err := instance(k)
		if err != nil {
			return err
		}
		if progress {
			fmt.Fprintf(e.stderr, "\r\033[Kbench [%d/%d] %s", k+1, count, in.Name)
		}
		results = append(results, bench.Measure(in, methods))
	}
	if progress {
		fmt.Fprint(e.stderr, "\r\033[K")
	}
	if *out == "json" {
		return writeJSON(e.stdout, struct {
			Results []bench.Result  `json:"results"`
			Summary []bench.Summary `json:"summary"`
		}{results, bench.Summarize(results, methods)})
	}
	printBench(e.stdout, results, methods)
	for _, r := range results {
		for _, run := range r.Runs {
			if run.Error != "" {
				return fmt.Errorf("%s, %s: %s", r.Instance, run.Method, run.Error)
			}
		}
	}
	return nil
}

// benchSource returns how many instances a bench of suite runs and the
// function that gives the k-th: a families suite generates each when it
// is measured, so a held-out run of thousands holds one at a time; a
// directory or the built-in suite is loaded whole. --sizes and --seeds
// (given says which flags were set) take a families suite only.
func benchSource(suite, sizes, seeds string, given map[string]bool) (int, func(k int) (bench.Instance, error), error) {
	var sz []int
	var sd []uint64
	for _, f := range []struct {
		flag, list string
		into       func([]uint64) error
	}{
		{"sizes", sizes, func(v []uint64) error {
			for _, x := range v {
				if x > families.MaxBuffers {
					return fmt.Errorf("%d is larger than any family takes (at most %d)", x, families.MaxBuffers)
				}
				sz = append(sz, int(x))
			}
			return nil
		}},
		{"seeds", seeds, func(v []uint64) error { sd = v; return nil }},
	} {
		if !given[f.flag] {
			continue
		}
		v, err := bench.ParseCounts(f.list)
		if err == nil {
			err = f.into(v)
		}
		if err != nil {
			return 0, nil, failure.New(failure.InvalidOptions, opIO, "--"+f.flag+": "+err.Error(), f.flag, f.list)
		}
	}
	specs, ok, err := bench.Selection(suite, sz, sd)
	if !ok {
		if given["sizes"] || given["seeds"] {
			return 0, nil, failure.New(failure.InvalidOptions, opIO, "--sizes and --seeds take a families suite (--suite families or families:LIST)", "suite", suite)
		}
		insts, err := bench.Suite(suite)
		return len(insts), func(k int) (bench.Instance, error) { return insts[k], nil }, err
	}
	return len(specs), func(k int) (bench.Instance, error) { return bench.Family(specs[k]) }, err
}

func printBench(w io.Writer, results []bench.Result, methods []bench.Method) {
	t := &table{align: "lrrlrrlrl"}
	t.add("INSTANCE", "BUFFERS", "LOWER BOUND", "STRATEGY", "PEAK", "OVER LB", "PROVEN", "TIME", "VERIFIED")
	for _, r := range results {
		for k, run := range r.Runs {
			name, bufs, lb := r.Instance, fmt.Sprint(r.Buffers), planner.FormatBytes(r.LowerBound)
			if k > 0 {
				name, bufs, lb = "", "", ""
			}
			verified := "yes"
			if !run.Verified {
				verified = "NO: " + run.Error
			}
			proven := ""
			if run.Optimal {
				proven = "optimal"
			}
			t.add(name, bufs, lb, run.Method, planner.FormatBytes(run.Peak), fmt.Sprintf("%+.2f%%", 100*run.OverLB), proven, fmtDuration(run.TimeNs), verified)
		}
	}
	t.write(w)
	fmt.Fprintln(w)
	s := &table{align: "lrrrrr"}
	s.add("STRATEGY", "MEAN OVER LB", "MAX OVER LB", "AT LB", "VERIFIED", "TOTAL TIME")
	for _, sm := range bench.Summarize(results, methods) {
		s.add(sm.Method, fmt.Sprintf("%+.2f%%", 100*sm.MeanOverLB), fmt.Sprintf("%+.2f%%", 100*sm.MaxOverLB),
			fmt.Sprintf("%d/%d", sm.AtLowerBound, sm.Instances), fmt.Sprintf("%d/%d", sm.Verified, sm.Instances), fmtDuration(sm.TimeNs))
	}
	s.write(w)
}

func fmtDuration(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
