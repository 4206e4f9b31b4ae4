package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/weights"
)

var trainCmd = &command{
	name: "train",
	summary: "Plan a training graph for one device and run its steps there: forward, backward and AdamW on WebGPU or the cpu kernels, " +
		"every tensor at its planned offset, on a dataset (--data) or the synthetic counting task, from initial weights (--weights) or the default initialisation. " +
		"Prints each step's loss (and the validation loss with --val-data), and the state hash sealed after the last step (--state-every for more); --export writes the trained weights as safetensors.",
	usage: "train IR [--executor auto|webgpu|cpu] [--steps N] [--state-every N] [--seed S] [--strategy S] [--unshared] [--data-mode standard|confidential|regulated] [--debug-fill TENSOR] [--device-memory BYTES]\n" +
		"       [--data FILE[,FILE...] [--data-format uint16|uint32|npy] [--order shuffled|sequential]] [--val-data FILE[,FILE...] [--val-every N] [--val-batches N]]\n" +
		"       [--weights FILE.safetensors] [--export FILE.safetensors [--with-optimizer]] [--lr X] [--beta1 X] [--beta2 X] [--eps X] [--weight-decay X]\n" +
		"       [--checkpoint-dir DIR [--checkpoint-every N] [--checkpoint-max-bytes SIZE] [--resume]] [-o text|json]",
	run: runTrain,
}

type trainStep struct {
	Step       uint64   `json:"step"`
	Loss       float32  `json:"loss"`
	ValLoss    *float64 `json:"val_loss,omitempty"` // mean over --val-batches batches of --val-data
	Seconds    float64  `json:"seconds"`            // the step itself (feed, kernels, loss readback)
	State      string   `json:"state_hash,omitempty"`
	Checkpoint string   `json:"checkpoint,omitempty"` // the object stored after the step
}

type trainResult struct {
	Backend  string `json:"backend"`
	Device   string `json:"device"`
	PlanHash string `json:"plan_hash"`
	Unshared bool   `json:"unshared"`
	// ArenaBytes is what the plan reserves; DeviceBytes what the device
	// holds for it (in DeviceRegions buffers), AllocatedBytes what the
	// arenas occupy there; WorkspaceBytes is the engine's own, beside
	// the plan.
	ArenaBytes     uint64      `json:"arena_bytes"`
	DeviceBytes    uint64      `json:"device_bytes"`
	AllocatedBytes uint64      `json:"allocated_bytes"`
	DeviceRegions  int         `json:"device_regions"`
	WorkspaceBytes uint64      `json:"workspace_bytes"`
	MemoryReport   string      `json:"memory_report"`
	Steps          []trainStep `json:"steps"`
	StepsPerSec    float64     `json:"steps_per_second"`
	// Resumed is the checkpoint the run resumed from (its step's object).
	Resumed   string        `json:"resumed,omitempty"`
	Optimizer optimizerInfo `json:"optimizer"`
	// Data and ValData are the datasets the run read (nil: the synthetic
	// task, no validation); Weights the initial weights' file, Export the
	// file the trained weights went to.
	Data    *datasetInfo `json:"data,omitempty"`
	ValData *datasetInfo `json:"val_data,omitempty"`
	Weights string       `json:"weights,omitempty"`
	Export  string       `json:"export,omitempty"`
}

// trainJob names tmmu train's checkpoints in their directory.
const trainJob = "train"

func runTrain(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	backend := fs.String("executor", "auto", "auto (webgpu when an adapter exists, else cpu), webgpu or cpu")
	steps := fs.Uint64("steps", 20, "steps to run")
	strategy := fs.String("strategy", string(planner.Packed), "planning strategy: "+strategyList())
	// The float32 default, printed as written (0.001, not 0.0010000000474974513).
	lrDefault, _ := strconv.ParseFloat(strconv.FormatFloat(float64(engine.DefaultAdamW.LR), 'g', -1, 32), 64)
	lr := fs.Float64("lr", lrDefault, "AdamW learning rate")
	beta1 := fs.Float64("beta1", float64(engine.DefaultAdamW.Beta1), "AdamW β1")
	beta2 := fs.Float64("beta2", short(engine.DefaultAdamW.Beta2), "AdamW β2")
	eps := fs.Float64("eps", short(engine.DefaultAdamW.Eps), "AdamW ε")
	wd := fs.Float64("weight-decay", short(engine.DefaultAdamW.WeightDecay), "AdamW decoupled weight decay")
	var df dataFlags
	df.register(fs)
	weightsFile := fs.String("weights", "", "start from these weights (safetensors; names as tmmu import torch records them, Hugging Face's for the GPT-2 generator) instead of the default initialisation")
	exportFile := fs.String("export", "", "after the last step, write the trained weights to this safetensors file (PyTorch's load_state_dict takes it)")
	withOpt := fs.Bool("with-optimizer", false, "with --export: also write AdamW's moments (<name>.exp_avg, <name>.exp_avg_sq)")
	unshared := fs.Bool("unshared", false, "give every tensor a device buffer of its own, as an engine without a planner would (the reference the plan must reproduce, in results and beside it in bytes and speed)")
	mode := fs.String("data-mode", string(ir.DataStandard), "data-handling mode, as tmmu job submit's: standard, confidential or regulated (the last two forbid --debug-fill)")
	fs.Func("mode", "renamed --data-mode (plan's --mode is the planning mode)", func(string) error {
		return fmt.Errorf("renamed --data-mode: tmmu plan's --mode is the planning mode, tmmu train's data-handling mode is --data-mode")
	})
	debugFill := fs.String("debug-fill", "", "fill this tensor with a debug pattern before the first step (DebugFillTensor_v1)")
	capacity := fs.String("device-memory", "", "bound the cpu device's memory (e.g. 64KiB), to see how running out is reported")
	seed := fs.Uint64("seed", 0, "the seed the batches derive from, with the step")
	ckptDir := fs.String("checkpoint-dir", "", "store a checkpoint of the model state after the last step (and every --checkpoint-every steps) in this directory")
	ckptEvery := fs.Uint64("checkpoint-every", 0, "with --checkpoint-dir: also checkpoint every N steps")
	stateEvery := fs.Uint64("state-every", 0, "also seal the state hash every N steps (it is always sealed after the last step; sealing reads the whole state back)")
	ckptMax := fs.String("checkpoint-max-bytes", "", "with --checkpoint-dir: the most bytes the directory may hold (e.g. 64MiB); a checkpoint past it fails with CHECKPOINT_STORE_FULL")
	resume := fs.Bool("resume", false, "with --checkpoint-dir: restore its newest checkpoint (verified by digest and state hash) and run the steps after it, up to --steps")
	out := fs.String("o", "text", "output: text or json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if !(*lr > 0) || math.IsInf(*lr, 0) {
		return usagef("--lr %v: want a positive, finite learning rate", *lr)
	}
	for _, h := range []struct {
		name string
		v    float64
		ok   bool
	}{{"--beta1", *beta1, *beta1 >= 0 && *beta1 < 1}, {"--beta2", *beta2, *beta2 >= 0 && *beta2 < 1}, {"--eps", *eps, *eps > 0 && !math.IsInf(*eps, 0)}, {"--weight-decay", *wd, *wd >= 0 && !math.IsInf(*wd, 0)}} {
		if !h.ok {
			return usagef("%s %v: want β in [0, 1), ε > 0 and a weight decay ≥ 0, all finite", h.name, h.v)
		}
	}
	if df.order != string(data.Sequential) && df.order != string(data.Shuffled) {
		return usagef("--order %q: want sequential or shuffled", df.order)
	}
	if df.format != "" && !slices.Contains(data.Formats, data.Format(df.format)) {
		return usagef("--data-format %q: want uint16, uint32 or npy", df.format)
	}
	if (df.labels != "") != (df.train != "" && df.labels != "") || (df.valLabels != "" && df.val == "") {
		return usagef("--labels and --val-labels go with --data and --val-data of .npy samples")
	}
	if (df.valEvery > 0 || df.valBatches != 4) && df.val == "" {
		return usagef("--val-every and --val-batches need --val-data")
	}
	if df.valBatches == 0 {
		return usagef("--val-batches 0: a validation reads at least one batch")
	}
	if *withOpt && *exportFile == "" {
		return usagef("--with-optimizer needs --export")
	}
	if len(pos) != 1 {
		return usagef("train takes one IR file")
	}
	switch ir.DataMode(*mode) {
	case ir.DataStandard, ir.DataConfidential, ir.DataRegulated:
	default:
		return usagef("--data-mode %q: want standard, confidential or regulated", *mode)
	}
	if (*resume || *ckptEvery > 0 || *ckptMax != "") && *ckptDir == "" {
		return usagef("--resume, --checkpoint-every and --checkpoint-max-bytes need --checkpoint-dir")
	}
	m, err := loadModel(e, pos[0])
	if err != nil {
		return err
	}
	if err := applyBind(m, df.bind); err != nil {
		return err
	}
	g, err := ir.Compile(m)
	if err != nil {
		return err
	}
	var store *checkpoint.DirStore
	if *ckptDir != "" {
		if store, err = checkpoint.NewDirStore(*ckptDir); err != nil {
			return ioError(err, *ckptDir)
		}
		if *ckptMax != "" {
			n, err := planner.ParseByteSize(*ckptMax)
			if err != nil {
				return usagef("--checkpoint-max-bytes: %v", err)
			}
			store.SetMaxBytes(uint64(n))
		}
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
	eopts := engine.Options{Backend: be, DataMode: ir.DataMode(*mode), Unshared: *unshared, Seed: *seed,
		AdamW: engine.AdamW{LR: float32(*lr), Beta1: float32(*beta1), Beta2: float32(*beta2), Eps: float32(*eps), WeightDecay: float32(*wd)}}
	res := trainResult{Backend: be.Name(), Device: be.Describe(), PlanHash: p.PlanHash.String(), Unshared: *unshared, Optimizer: optimizerOf(eopts.AdamW)}
	if *weightsFile != "" {
		if eopts.Weights, err = loadWeights(*weightsFile, g); err != nil {
			return err
		}
		res.Weights = *weightsFile
	}
	// The datasets are opened and scanned (digest, every token id below
	// the vocabulary) before the device is touched.
	var feed engine.Data
	var fed struct{ train, val uint64 } // tokens fed per batch of each
	for _, ds := range []struct {
		list, labels string
		stream       **data.Stream
		info         **datasetInfo
		order        data.Order
		tokens       *uint64
	}{{df.train, df.labels, &feed.Train, &res.Data, data.Order(df.order), &fed.train}, {df.val, df.valLabels, &feed.Val, &res.ValData, data.Sequential, &fed.val}} {
		if ds.list == "" {
			continue
		}
		// A language model's token ids are checked against its
		// vocabulary, a classifier's labels against its classes.
		in, ok := data.InputsOf(g)
		if !ok {
			return failure.New(failure.UnsupportedExecution, "tmmu.train", "--data feeds a language model's token inputs (tokens, labels) or a classifier's images and labels: this graph has neither (--bind ROLE=TENSOR names them)", "graph", g.Name)
		}
		B, S := in.Batch, in.Seq
		d, sum, closeData, err := openData(ds.list, ds.labels, df.format, in.Limit)
		if err != nil {
			return err
		}
		defer closeData()
		s, err := data.NewStream(d, ds.order, *seed, sum.Digest, S, B)
		if err != nil {
			return err
		}
		*ds.stream, *ds.tokens = s, B*max(S, 1)
		*ds.info = &datasetInfo{Files: d.Files(), Format: string(d.Format), Order: string(ds.order), Digest: sum.DigestString(), Kind: string(d.Kind), Bytes: sum.Bytes}
		if d.Kind == data.Images {
			(*ds.info).Samples = d.Len
		} else {
			(*ds.info).Tokens = d.Len
		}
	}
	feed.ValBatches = df.valBatches
	x, err := engine.NewExecutor(g, p, eopts, false)
	if err != nil {
		return err
	}
	defer x.Close()
	if feed.Train != nil || feed.Val != nil {
		if err := x.SetData(feed); err != nil {
			return err
		}
	}
	if *debugFill != "" {
		if err := x.Engine().DebugFillTensor(*debugFill, 1); err != nil {
			return err
		}
	}
	st := x.Engine().Memory().Stats()
	res.ArenaBytes, res.DeviceBytes, res.AllocatedBytes, res.DeviceRegions = st.PlannedBytes, st.ReservedBytes, st.AllocatedBytes, st.Regions
	res.WorkspaceBytes, res.MemoryReport = x.Engine().WorkspaceBytes(), x.Engine().MemoryReport()
	if *out == "text" {
		fmt.Fprintf(e.stdout, "%s on %s: plan %s\n%s\n", g.Name, res.Device, p.PlanHash.Short(), res.MemoryReport)
	}
	var layout []checkpoint.Slice
	from := uint64(1)
	if store != nil {
		if layout, err = checkpoint.Layout(g, m, 0, 1); err != nil {
			return err
		}
		if *resume {
			step, name, err := resumeTrain(store, x, layout, dataDigest(res.Data), df.train)
			if err != nil {
				return err
			}
			from, res.Resumed = step+1, name
			if *out == "text" {
				fmt.Fprintf(e.stdout, "resumed from the checkpoint of step %d (%s), state verified\n", step, name)
			}
		}
	}
	var took time.Duration // the steps alone: sealing and checkpoints are not timed
	for s := from; s <= *steps; s++ {
		t0 := time.Now()
		stats, err := x.Step(context.Background(), s)
		if err != nil {
			return err
		}
		dt := time.Since(t0)
		took += dt
		ts := trainStep{Step: s, Loss: float32(stats.Loss), Seconds: dt.Seconds()}
		if feed.Val != nil && (s == *steps || (df.valEvery > 0 && s%df.valEvery == 0)) {
			v, ok, err := x.Validate(context.Background(), s)
			if err != nil {
				return err
			}
			if ok {
				ts.ValLoss = &v
			}
		}
		if s == *steps || (*stateEvery > 0 && s%*stateEvery == 0) {
			if ts.State, err = x.StateHash(); err != nil {
				return err
			}
		}
		if store != nil && (s == *steps || (*ckptEvery > 0 && s%*ckptEvery == 0)) {
			if ts.Checkpoint, err = checkpointTrain(store, x, layout, s, *seed, dataDigest(res.Data)); err != nil {
				return err
			}
		}
		res.Steps = append(res.Steps, ts)
		if *out == "text" {
			fmt.Fprintf(e.stdout, "step %3d  loss %.4f  %s", s, stats.Loss, dt.Round(time.Millisecond))
			if ts.ValLoss != nil {
				fmt.Fprintf(e.stdout, "  val %.4f", *ts.ValLoss)
			}
			if ts.State != "" {
				fmt.Fprintf(e.stdout, "  state %s", ts.State[:12])
			}
			if ts.Checkpoint != "" {
				fmt.Fprintf(e.stdout, "  checkpoint %s", ts.Checkpoint)
			}
			fmt.Fprintln(e.stdout)
		}
	}
	if n := len(res.Steps); n > 0 {
		res.StepsPerSec = float64(n) / took.Seconds()
	}
	for _, d := range []struct {
		info   *datasetInfo
		s      *data.Stream
		tokens uint64
		n      uint64
	}{{res.Data, feed.Train, fed.train, uint64(len(res.Steps))}, {res.ValData, feed.Val, fed.val, feed.ValBatches * uint64(countVal(res.Steps))}} {
		if d.info != nil {
			d.info.BytesRead = d.s.D.BytesRead()
			d.info.BytesFed = d.s.D.BytesFed()
		}
	}
	if *exportFile != "" {
		st, err := x.Export()
		if err != nil {
			return err
		}
		if err := exportState(*exportFile, g, st.Tensors, st.OptimizerStep, *withOpt); err != nil {
			return err
		}
		res.Export = *exportFile
	}
	if *out == "json" {
		return writeJSON(e.stdout, res)
	}
	fmt.Fprintf(e.stdout, "%d steps in %s: %.3g steps/s\n", len(res.Steps), took.Round(time.Millisecond), res.StepsPerSec)
	if res.Data != nil {
		n, unit := res.Data.Tokens, "tokens"
		if res.Data.Kind == string(data.Images) {
			n, unit = res.Data.Samples, "samples"
		}
		fmt.Fprintf(e.stdout, "data %s: %d %s (%s), digest %.12s; read %d bytes for %d fed\n", strings.Join(res.Data.Files, ","), n, unit, res.Data.Format, res.Data.Digest, res.Data.BytesRead, res.Data.BytesFed)
	}
	if res.Export != "" {
		fmt.Fprintf(e.stdout, "weights written to %s (safetensors, %s names)\n", res.Export, weights.NamingOf(g).Scheme)
	}
	return nil
}

// countVal counts the steps with a validation loss.
func countVal(steps []trainStep) int {
	n := 0
	for _, s := range steps {
		if s.ValLoss != nil {
			n++
		}
	}
	return n
}

// checkpointTrain stores the executor's state after step in store and
// returns the object's name.
func checkpointTrain(store checkpoint.Store, x *engine.Executor, layout []checkpoint.Slice, step, seed uint64, data []byte) (string, error) {
	st, err := x.Export()
	if err != nil {
		return "", err
	}
	ts, err := checkpoint.FromState(layout, st.Tensors)
	if err != nil {
		return "", err
	}
	h, err := x.HashOf(st)
	if err != nil {
		return "", err
	}
	sh := &checkpoint.Shard{Step: step, World: 1, Seed: seed, OptimizerStep: st.OptimizerStep, Tensors: ts, DataDigest: data}
	if sh.StateHash, err = ir.ParseHash(h); err != nil {
		return "", err
	}
	data, digest, err := checkpoint.Encode(sh)
	if err != nil {
		return "", err
	}
	name := checkpoint.ObjectName(trainJob, step, 0, digest)
	return name, store.Put(context.Background(), name, data)
}

// dataDigest is the digest a checkpoint records for a run's data (nil
// for the synthetic task).
func dataDigest(d *datasetInfo) []byte {
	if d == nil {
		return nil
	}
	b, _ := hex.DecodeString(d.Digest)
	return b
}

// resumeTrain restores the newest checkpoint in store into x: the
// object's bytes must hash to the digest its name carries
// (CHECKPOINT_CORRUPT), the run must read the data the checkpoint's
// steps read (DATASET_CHANGED: its sample stream would not continue),
// and the executor must then seal the state hash the checkpoint
// recorded (RESTORE_MISMATCH).
func resumeTrain(store checkpoint.Store, x *engine.Executor, layout []checkpoint.Slice, data []byte, files string) (uint64, string, error) {
	objs, err := store.List(context.Background(), checkpoint.JobPrefix(trainJob))
	if err != nil {
		return 0, "", err
	}
	var name string
	var step uint64
	for _, o := range objs {
		if _, s, rank, _, err := checkpoint.ParseName(o.Name); err == nil && rank == 0 && (name == "" || s > step) {
			name, step = o.Name, s
		}
	}
	if name == "" {
		return 0, "", failure.New(failure.IOError, opIO, "no checkpoint to resume from", "prefix", checkpoint.JobPrefix(trainJob))
	}
	_, _, _, digest, _ := checkpoint.ParseName(name)
	obj, err := store.Get(context.Background(), name)
	if err != nil {
		return 0, "", err
	}
	sh, err := checkpoint.Decode(obj, digest)
	if err != nil {
		return 0, "", err
	}
	if !bytes.Equal(sh.DataDigest, data) {
		what := func(d []byte, files string) string {
			if len(d) == 0 {
				return "the synthetic task"
			}
			if files != "" {
				return fmt.Sprintf("%s (digest %.6x)", files, d)
			}
			return fmt.Sprintf("a dataset of digest %.6x", d)
		}
		return 0, "", failure.New(failure.DatasetChanged, "tmmu.train",
			fmt.Sprintf("the checkpoint's steps read %s, this run reads %s: resuming would not continue its sample stream", what(sh.DataDigest, ""), what(data, files)),
			"object", name)
	}
	words, err := checkpoint.Recut([]*checkpoint.Shard{sh}, layout)
	if err != nil {
		return 0, "", err
	}
	st := runner.State{Tensors: words, OptimizerStep: sh.OptimizerStep}
	if err := x.Import(st); err != nil {
		return 0, "", err
	}
	got, err := x.StateHash()
	if err != nil {
		return 0, "", err
	}
	if got != sh.StateHash.String() {
		return 0, "", failure.New(failure.RestoreMismatch, "tmmu.train", fmt.Sprintf("the restored state seals %.12s, the checkpoint says %s", got, sh.StateHash.Short()), "object", name)
	}
	return step, name, nil
}
