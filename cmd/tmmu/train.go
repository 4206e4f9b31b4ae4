package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/planner"
)

var trainCmd = &command{
	name: "train",
	summary: "Plan a training graph for one device and run its steps there: forward, backward and AdamW on WebGPU or the cpu kernels, " +
		"every tensor at its planned offset, on a synthetic counting task. Prints each step's loss and sealed state hash.",
	usage: "train IR [--executor auto|webgpu|cpu] [--steps N] [--strategy S] [--lr X] [--unshared] [--mode standard|confidential|regulated] [--debug-fill TENSOR] [--device-memory BYTES] [-o text|json]",
	run:   runTrain,
}

type trainStep struct {
	Step  uint64  `json:"step"`
	Loss  float32 `json:"loss"`
	State string  `json:"state_hash"`
}

type trainResult struct {
	Backend     string      `json:"backend"`
	Device      string      `json:"device"`
	PlanHash    string      `json:"plan_hash"`
	Unshared    bool        `json:"unshared"`
	DeviceBytes uint64      `json:"device_bytes"`
	ArenaBytes  uint64      `json:"arena_bytes"`
	Steps       []trainStep `json:"steps"`
	StepsPerSec float64     `json:"steps_per_second"`
}

func runTrain(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	backend := fs.String("executor", "auto", "auto (webgpu when an adapter exists, else cpu), webgpu or cpu")
	steps := fs.Uint64("steps", 20, "steps to run")
	strategy := fs.String("strategy", string(planner.Packed), "planning strategy: "+strategyList())
	lr := fs.Float64("lr", float64(engine.DefaultAdamW.LR), "AdamW learning rate")
	unshared := fs.Bool("unshared", false, "give every tensor its own bytes (the reference the plan must reproduce)")
	mode := fs.String("mode", string(engine.Standard), "data-handling mode: standard, confidential or regulated (the last two forbid --debug-fill)")
	debugFill := fs.String("debug-fill", "", "fill this tensor with a debug pattern before the first step (DebugFillTensor_v1)")
	capacity := fs.String("device-memory", "", "bound the cpu device's memory (e.g. 64KiB), to see how running out is reported")
	out := fs.String("o", "text", "output: text or json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("train takes one IR file")
	}
	switch engine.Mode(*mode) {
	case engine.Standard, engine.Confidential, engine.Regulated:
	default:
		return usagef("--mode %q: want standard, confidential or regulated", *mode)
	}
	g, err := loadGraph(e, pos[0])
	if err != nil {
		return err
	}
	be, reason, err := engine.Open(*backend)
	if err != nil {
		return err
	}
	defer be.Close()
	if reason != "" {
		fmt.Fprintf(e.stderr, "tmmu: %s\n", reason)
	}
	if *capacity != "" {
		n, err := planner.ParseByteSize(*capacity)
		if err != nil {
			return usagef("--device-memory: %v", err)
		}
		cpu, ok := be.(*engine.CPU)
		if !ok {
			return usagef("--device-memory applies to the cpu executor")
		}
		cpu.SetCapacity(uint64(n))
	}
	opts := planner.DefaultOptions(g)
	opts.Strategy = planner.Strategy(*strategy)
	opts.Arenas = engine.ExecutableArenas(be.Limits(), nil)
	p, err := planner.PlanMemory(g, opts)
	if err != nil {
		return err
	}
	eopts := engine.Options{Backend: be, Mode: engine.Mode(*mode), Unshared: *unshared, AdamW: engine.DefaultAdamW}
	eopts.AdamW.LR = float32(*lr)
	x, err := engine.NewExecutor(g, p, eopts, false)
	if err != nil {
		return err
	}
	defer x.Close()
	if *debugFill != "" {
		if err := x.Engine().DebugFillTensor(*debugFill, 1); err != nil {
			return err
		}
	}
	res := trainResult{Backend: be.Name(), Device: be.Describe(), PlanHash: p.PlanHash.String(), Unshared: *unshared}
	st := x.Engine().Memory().Stats()
	res.DeviceBytes = st.AllocatedBytes
	for _, a := range p.Arenas {
		res.ArenaBytes += a.ReservedBytes
	}
	if *out == "text" {
		fmt.Fprintf(e.stdout, "%s on %s: plan %s, %s of arenas in %s of device memory\n", g.Name, res.Device, p.PlanHash.Short(),
			planner.FormatBytes(res.ArenaBytes), planner.FormatBytes(res.DeviceBytes))
	}
	start := time.Now()
	for s := range *steps {
		stats, err := x.Step(context.Background(), s)
		if err != nil {
			return err
		}
		res.Steps = append(res.Steps, trainStep{Step: s, Loss: float32(stats.Loss), State: stats.State})
		if *out == "text" {
			fmt.Fprintf(e.stdout, "step %3d  loss %.4f  state %s\n", s, stats.Loss, stats.State[:12])
		}
	}
	if *steps > 0 {
		res.StepsPerSec = float64(*steps) / time.Since(start).Seconds()
	}
	if *out == "json" {
		return writeJSON(e.stdout, res)
	}
	fmt.Fprintf(e.stdout, "%.1f steps/s\n", res.StepsPerSec)
	return nil
}
