package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/weights"
)

// submitDataFlags are job submit's flags for data, weights and the
// optimizer.
type submitDataFlags struct {
	fs                             *flag.FlagSet
	train, val, format, order, wts *string
	bind                           *string
	valEvery, valBatches           *uint64
	lr, beta1, beta2, eps, decay   *string
}

func addSubmitDataFlags(fs *flag.FlagSet) *submitDataFlags {
	return &submitDataFlags{fs: fs,
		train:      fs.String("data", "", "train on a dataset stored with tmmu data put (its name), or on files every worker mounts (file:///path[,file:///path...]; scanned here to pin their digest); default: the synthetic counting task"),
		val:        fs.String("val-data", "", "validation dataset (a name or file:// URLs), validated every --val-every steps and after the last"),
		format:     fs.String("data-format", "", "with file:// data: uint16, uint32 or npy (default: npy for .npy files, else uint16)"),
		order:      fs.String("order", string(data.Shuffled), "sample order: shuffled (a permutation per epoch from the seed and the dataset's digest, the same whatever the world size) or sequential"),
		valEvery:   fs.Uint64("val-every", 0, "validate every N steps (default: after the last step only)"),
		valBatches: fs.Uint64("val-batches", api.DefaultValBatches, "batches of the validation set a validation reads"),
		wts:        fs.String("weights", "", "initial weights: a stored weights file's name, a local safetensors FILE (stored as NAME-weights first) or file:///path every worker mounts"),
		lr:         fs.String("lr", api.DefaultOptimizer.LR, "AdamW learning rate"),
		beta1:      fs.String("beta1", api.DefaultOptimizer.Beta1, "AdamW β1"),
		beta2:      fs.String("beta2", api.DefaultOptimizer.Beta2, "AdamW β2"),
		eps:        fs.String("eps", api.DefaultOptimizer.Eps, "AdamW ε"),
		decay:      fs.String("weight-decay", api.DefaultOptimizer.WeightDecay, "AdamW decoupled weight decay"),
		bind:       fs.String("bind", "", bindUsage),
	}
}

// apply fills a submission's data, weights and optimizer in from the
// flags: mounted files are scanned here, a local weights file is stored
// in the cluster first.
func (f *submitDataFlags) apply(ctx context.Context, cl *api.Client, req *api.SubmitRequest) error {
	o := api.Optimizer{Name: "adamw", LR: *f.lr, Beta1: *f.beta1, Beta2: *f.beta2, Eps: *f.eps, WeightDecay: *f.decay}
	for _, v := range []*string{&o.LR, &o.Beta1, &o.Beta2, &o.Eps, &o.WeightDecay} {
		x, err := strconv.ParseFloat(*v, 32)
		if err != nil {
			return usagef("optimizer: %q is not a number", *v)
		}
		*v = strconv.FormatFloat(x, 'g', -1, 32)
	}
	if o != api.DefaultOptimizer {
		req.Optimizer = &o
	}
	if *f.train == "" && (*f.val != "" || flagSet(f.fs, "val-every") || flagSet(f.fs, "val-batches") || flagSet(f.fs, "order") || *f.format != "") {
		return usagef("--val-data, --val-every, --val-batches, --order and --data-format need --data")
	}
	if *f.train == "" && *f.wts == "" {
		return nil
	}
	g, err := submittedGraph(req)
	if err != nil {
		return err
	}
	if *f.train != "" {
		vocab := vocabOf(g)
		spec := &api.DataSpec{Order: *f.order, ValEvery: *f.valEvery, ValBatches: *f.valBatches}
		ref, err := dataRef(*f.train, *f.format, vocab)
		if err != nil {
			return err
		}
		spec.Train = *ref
		if *f.val != "" {
			if spec.Val, err = dataRef(*f.val, *f.format, vocab); err != nil {
				return err
			}
		}
		req.Data = spec
	}
	if w := *f.wts; w != "" {
		if !strings.HasPrefix(w, "file://") {
			if _, err := os.Stat(w); err == nil {
				// Checked here first: weights that do not fit are not stored.
				if err := checkWeightsFile(w, g); err != nil {
					return err
				}
				name := req.Name + "-weights"
				if _, err := putDataset(ctx, cl, name, []string{w}, nil, "safetensors"); err != nil {
					return err
				}
				w = name
			}
		}
		if req.Weights, err = dataRef(w, "safetensors", 0); err != nil {
			return err
		}
		if err := checkMountedWeights(req.Weights, g); err != nil {
			return err
		}
	}
	return nil
}

// submittedGraph compiles a submission's graph (the IR, or the model
// source generated at its envelope) to read its inputs.
func submittedGraph(req *api.SubmitRequest) (*ir.Graph, error) {
	var m *ir.Model
	var err error
	if req.Model != nil {
		m, err = req.Model.Generate(req.Model.Envelope())
	} else {
		m, err = ir.DecodeJSON(req.IR)
	}
	if err != nil {
		return nil, err
	}
	return ir.Compile(m)
}

// flagSet says whether the command line set the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// exportResult is what tmmu job export prints.
type exportResult struct {
	Job     string `json:"job"`
	Step    uint64 `json:"step"`
	World   uint64 `json:"world"`
	Out     string `json:"out"`
	Tensors int    `json:"tensors"`
	Names   string `json:"names"`
}

// exportJob gathers every rank's shard of a committed checkpoint (each
// checked against its digest), recuts the ZeRO partitions into whole
// tensors and writes them as a safetensors file with the parameters'
// names.
func exportJob(ctx context.Context, cl *api.Client, job string, step uint64, out string, withOpt bool) (*exportResult, error) {
	j, err := cl.Job(ctx, job)
	if err != nil {
		return nil, err
	}
	c := j.LastCheckpoint()
	if step != 0 {
		c = j.Checkpoint(step)
	}
	if c == nil {
		var have []string
		for _, k := range j.Checkpoints {
			have = append(have, fmt.Sprint(k.Step))
		}
		return nil, usagef("job %s has no committed checkpoint%s (it has: %s)", job, map[bool]string{true: fmt.Sprintf(" of step %d", step), false: ""}[step != 0], strings.Join(have, ", "))
	}
	b, err := cl.IR(ctx, job, c.Epoch)
	if err != nil {
		return nil, err
	}
	m, err := ir.DecodeCBOR(b)
	if err != nil {
		return nil, err
	}
	g, err := ir.Compile(m)
	if err != nil {
		return nil, err
	}
	layout, err := checkpoint.Layout(g, m, 0, 1)
	if err != nil {
		return nil, err
	}
	var shards []*checkpoint.Shard
	for _, s := range c.Shards {
		raw, err := cl.CheckpointShard(ctx, job, c.Step, s.Rank)
		if err != nil {
			return nil, err
		}
		sh, err := checkpoint.Decode(raw, s.Digest)
		if err != nil {
			return nil, err
		}
		shards = append(shards, sh)
	}
	words, err := checkpoint.Recut(shards, layout)
	if err != nil {
		return nil, err
	}
	if err := exportState(out, g, words, shards[0].OptimizerStep, withOpt); err != nil {
		return nil, err
	}
	n := len(weights.NamingOf(g).Params())
	if withOpt {
		n *= 3
	}
	return &exportResult{Job: job, Step: c.Step, World: c.World, Out: out, Tensors: n, Names: weights.NamingOf(g).Scheme}, nil
}
