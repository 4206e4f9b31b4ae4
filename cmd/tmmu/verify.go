package main

import (
	"fmt"

	"github.com/tmmu/tmmu/planner"
)

var verifyCmd = &command{
	name:    "verify",
	summary: "Check a plan (JSON or CBOR) against its graph with the independent verifier; exit 1 on the first violation.",
	usage:   "verify IR PLAN [-o text|json]",
	run:     runVerify,
}

func runVerify(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	out := fs.String("o", "text", "output: text or json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("verify takes an IR file and a plan file, got %d arguments", len(pos))
	}
	g, err := loadGraph(e, pos[0])
	if err != nil {
		return err
	}
	data, err := readInput(e, pos[1])
	if err != nil {
		return err
	}
	p, err := planner.DecodePlan(data)
	if err != nil {
		return err
	}
	if err := planner.Verify(g, p); err != nil {
		return err
	}
	if *out == "json" {
		return writeJSON(e.stdout, map[string]any{"ok": true, "plan_hash": p.PlanHash, "tensors": len(p.Tensors), "arenas": len(p.Arenas)})
	}
	fmt.Fprintf(e.stdout, "ok: plan %s verified: %d tensors in %d arenas, mode %s, strategy %s\n",
		p.PlanHash.Short(), len(p.Tensors), len(p.Arenas), p.Mode, p.Strategy)
	return nil
}
