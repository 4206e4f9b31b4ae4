package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/tmmu/tmmu/internal/atomicfile"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
)

var genCmd = &command{
	name:    "gen",
	summary: "Write a model graph (UML_Model_IR) as JSON or CBOR: " + strings.Join(genModelNames(), ", ") + ".",
	usage:   "gen MODEL [--train] [--dtype fp32|bf16|fp16] [model flags] [-o json|cbor] [--out FILE]\n       tmmu gen MODEL --help   lists the model's flags and defaults",
	run:     runGen,
}

// genModel registers a model's flags (with its defaults) on fs and returns
// the function that builds it once the flags are parsed.
type genModel struct {
	name, about string
	flags       func(fs *flag.FlagSet) func() (*ir.Model, error)
}

var genModels = []genModel{
	{"chain", "a stack of bias-free square matmuls", func(fs *flag.FlagSet) func() (*ir.Model, error) {
		c := models.DefaultChainConfig()
		fs.Uint64Var(&c.Length, "length", c.Length, "matmul layers")
		fs.Uint64Var(&c.Batch, "batch", c.Batch, "batch size")
		fs.Uint64Var(&c.Hidden, "hidden", c.Hidden, "width")
		common(fs, &c.DType, &c.Train)
		return func() (*ir.Model, error) { return models.Chain(c) }
	}},
	{"residual", "blocks x + gelu(x·W)", func(fs *flag.FlagSet) func() (*ir.Model, error) {
		c := models.DefaultResidualConfig()
		fs.Uint64Var(&c.Blocks, "blocks", c.Blocks, "residual blocks")
		fs.Uint64Var(&c.Batch, "batch", c.Batch, "batch size")
		fs.Uint64Var(&c.Hidden, "hidden", c.Hidden, "width")
		common(fs, &c.DType, &c.Train)
		return func() (*ir.Model, error) { return models.Residual(c) }
	}},
	{"mlp", "a multilayer perceptron classifier", func(fs *flag.FlagSet) func() (*ir.Model, error) {
		c := models.DefaultMLPConfig()
		fs.Uint64Var(&c.Layers, "layers", c.Layers, "linear layers")
		fs.Uint64Var(&c.Batch, "batch", c.Batch, "batch size")
		fs.Uint64Var(&c.In, "in", c.In, "input features")
		fs.Uint64Var(&c.Hidden, "hidden", c.Hidden, "hidden width")
		fs.Uint64Var(&c.Classes, "classes", c.Classes, "output classes")
		common(fs, &c.DType, &c.Train)
		return func() (*ir.Model, error) { return models.MLP(c) }
	}},
	{"gpt2", "GPT-2 (defaults: GPT-2 small, 124M parameters)", func(fs *flag.FlagSet) func() (*ir.Model, error) {
		c := models.DefaultGPT2Config()
		fs.Uint64Var(&c.Layers, "layers", c.Layers, "transformer blocks")
		fs.Uint64Var(&c.Hidden, "hidden", c.Hidden, "model width")
		fs.Uint64Var(&c.Heads, "heads", c.Heads, "attention heads")
		fs.Uint64Var(&c.Seq, "seq", c.Seq, "tokens per sequence")
		fs.Uint64Var(&c.Context, "context", c.Context, "positional embedding rows (≥ seq)")
		fs.Uint64Var(&c.Batch, "batch", c.Batch, "sequences per batch")
		fs.Uint64Var(&c.Vocab, "vocab", c.Vocab, "vocabulary size")
		common(fs, &c.DType, &c.Train)
		return func() (*ir.Model, error) { return models.GPT2(c) }
	}},
	{"llama", "a Llama-style decoder (defaults: Llama-2-7B)", func(fs *flag.FlagSet) func() (*ir.Model, error) {
		c := models.DefaultLlamaConfig()
		fs.Uint64Var(&c.Layers, "layers", c.Layers, "decoder blocks")
		fs.Uint64Var(&c.Hidden, "hidden", c.Hidden, "model width")
		fs.Uint64Var(&c.Heads, "heads", c.Heads, "query heads")
		fs.Uint64Var(&c.KVHeads, "kv-heads", c.KVHeads, "key/value heads (< heads: grouped-query attention)")
		fs.Uint64Var(&c.Intermediate, "intermediate", c.Intermediate, "SwiGLU width")
		fs.Uint64Var(&c.Vocab, "vocab", c.Vocab, "vocabulary size")
		fs.Uint64Var(&c.Seq, "seq", c.Seq, "tokens per sequence")
		fs.Uint64Var(&c.Batch, "batch", c.Batch, "sequences per batch")
		common(fs, &c.DType, &c.Train)
		return func() (*ir.Model, error) { return models.Llama(c) }
	}},
	{"synthetic", "a large random DAG for planner benchmarks (inference only)", func(fs *flag.FlagSet) func() (*ir.Model, error) {
		c := models.DefaultSyntheticConfig()
		fs.Uint64Var(&c.Tensors, "tensors", c.Tensors, "tensors in the graph")
		fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed")
		fs.Uint64Var(&c.Window, "window", c.Window, "a node reads among the last WINDOW activations")
		return func() (*ir.Model, error) { return models.Synthetic(c) }
	}},
}

func genModelNames() []string {
	names := make([]string, len(genModels))
	for i, m := range genModels {
		names[i] = m.name
	}
	return names
}

func common(fs *flag.FlagSet, dt *ir.DType, train *bool) {
	fs.Func("dtype", fmt.Sprintf("parameter and activation dtype: fp32, bf16 or fp16 (default %s)", *dt), func(s string) error {
		*dt = ir.DType(s)
		return nil
	})
	fs.BoolVar(train, "train", *train, "train_full graph: forward, backward and AdamW update (default: inference, forward only)")
}

func runGen(c *command, e *env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			genUsage(e, c)
			return flag.ErrHelp
		}
		return usagef("gen needs a model: %s", strings.Join(genModelNames(), ", "))
	}
	var gm *genModel
	for i := range genModels {
		if genModels[i].name == args[0] {
			gm = &genModels[i]
		}
	}
	if gm == nil {
		return usagef("gen: unknown model %q (models: %s)", args[0], strings.Join(genModelNames(), ", "))
	}
	fs := newFlags(e, &command{name: "gen " + gm.name, summary: gm.about, usage: "gen " + gm.name + " [flags]"})
	build := gm.flags(fs)
	out := addModelOutput(fs)
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("gen %s takes no arguments besides flags, got %q", gm.name, pos)
	}
	if err := out.check(); err != nil {
		return err
	}
	m, err := build()
	if err != nil {
		return usageError{err.Error()}
	}
	return out.write(e, m)
}

// modelOutput is the -o json|cbor and --out FILE of the commands that
// write a graph (gen, import).
type modelOutput struct{ format, file *string }

func addModelOutput(fs *flag.FlagSet) modelOutput {
	return modelOutput{
		format: fs.String("o", "json", "encoding: json or cbor"),
		file:   fs.String("out", "", "write to FILE instead of standard output (written whole or not at all)"),
	}
}

// check refuses an encoding other than json and cbor, before any work.
func (o modelOutput) check() error {
	if *o.format != "json" && *o.format != "cbor" {
		return usagef("-o %s: want json or cbor", *o.format)
	}
	return nil
}

func (o modelOutput) write(e *env, m *ir.Model) error { return writeModel(e, m, *o.format, *o.file) }

// writeModel writes m as JSON or canonical CBOR to file, or to standard
// output when file is empty.
func writeModel(e *env, m *ir.Model, format, file string) error {
	var data []byte
	var err error
	if format == "cbor" {
		data, err = m.EncodeCBOR()
	} else {
		data, err = json.Marshal(m)
		data = append(data, '\n')
	}
	if err != nil {
		return err
	}
	if file != "" {
		return writeFileAtomic(file, data)
	}
	_, err = e.stdout.Write(data)
	return err
}

func genUsage(e *env, c *command) {
	fmt.Fprintf(e.stderr, "Usage: tmmu %s\n\nModels:\n", c.usage)
	for _, m := range genModels {
		fmt.Fprintf(e.stderr, "  %-10s %s\n", m.name, m.about)
	}
}

// writeFileAtomic writes data to file whole or not at all
// (atomicfile.Write): a failed write leaves any previous file as it was.
func writeFileAtomic(file string, data []byte) error {
	if err := atomicfile.Write(file, data, 0o644); err != nil {
		return ioError(err, file)
	}
	return nil
}
