package main

import (
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/tmmu/tmmu/importer/onnx"
)

var importCmd = &command{
	name:    "import",
	summary: "Import a model as a graph (UML_Model_IR): an ONNX file or a PyTorch module, for inference or training.",
	usage: "import onnx MODEL.onnx [--batch N] [--dim NAME=N|MIN:MAX ...] [--train] [-o json|cbor] [--out FILE]\n" +
		"       tmmu import torch MODEL [--train] [--batch N] [...]   (see tmmu import torch --help)",
	run: runImport,
}

func runImport(c *command, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintf(e.stderr, "Usage: tmmu %s\n\n%s\n", c.usage, c.summary)
		if len(args) == 0 {
			return usagef("import needs a format: onnx or torch")
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "onnx":
		return runImportONNX(e, args[1:])
	case "torch":
		return runImportTorch(e, args[1:])
	}
	return usagef("import: unknown format %q (formats: onnx, torch)", args[0])
}

// dimFlags collects --dim NAME=N or NAME=MIN:MAX.
type dimFlags map[string]onnx.Bound

func (d dimFlags) String() string {
	var s []string
	for k, v := range d {
		s = append(s, fmt.Sprintf("%s=%d:%d", k, v.Min, v.Max))
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func (d dimFlags) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want NAME=N or NAME=MIN:MAX", s)
	}
	b, err := onnx.ParseBound(val)
	if err != nil {
		return err
	}
	d[name] = b
	return nil
}

func runImportONNX(e *env, args []string) error {
	c := &command{name: "import onnx", usage: "import onnx MODEL.onnx [--batch N] [--dim NAME=N|MIN:MAX ...] [--train [--optimizer adamw|sgd]] [-o json|cbor] [--out FILE]",
		summary: "Import an ONNX model: nodes, integer attributes, initializers as parameters, shapes from value_info or inferred. " +
			"Dynamic dimensions must be bound (a range plans at its maximum and is kept as a shape_envelope). " +
			"--train adds a loss, opaque backward nodes sized and saved as the ops need, and the optimizer update; PyTorch's own backward comes with tmmu import torch --train."}
	fs := newFlags(e, c)
	batch := fs.Uint64("batch", 0, "bind the leading dynamic dimension of the graph inputs (and every use of its name)")
	dims := dimFlags{}
	fs.Var(dims, "dim", "bind a named dynamic dimension: NAME=N, or NAME=MIN:MAX for a range (repeatable)")
	name := fs.String("name", "", "the graph's name (default: the ONNX graph's)")
	train := fs.Bool("train", false, "add a training step: a loss over the outputs, a backward node per forward node a parameter's gradient flows through, and the optimizer update")
	optimizer := fs.String("optimizer", "adamw", "optimizer of --train: adamw or sgd (momentum)")
	out := addModelOutput(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("import onnx takes one ONNX file, got %d arguments", len(pos))
	}
	if err := out.check(); err != nil {
		return err
	}
	if err := checkOptimizer(*optimizer); err != nil {
		return err
	}
	data, err := readInput(e, pos[0])
	if err != nil {
		return err
	}
	m, st, err := onnx.Import(data, onnx.Options{Name: *name, Batch: *batch, Dims: dims})
	if err != nil {
		return err
	}
	if *train {
		if m, err = onnx.Train(m, *optimizer); err != nil {
			return err
		}
	}
	if err := out.write(e, m); err != nil {
		return err
	}
	step := ""
	if *train {
		step = fmt.Sprintf(", then a training step (%s): %d nodes in all", *optimizer, len(m.Nodes))
	}
	fmt.Fprintf(e.stderr, "imported %s (%s, opset %d): %d nodes, %d shapes inferred by tmmu, %d non-integer attributes not kept%s; %d tensors\n",
		pos[0], st.Producer, st.Opset, st.Nodes, st.Inferred, st.DroppedAttrs, step, len(m.Tensors))
	return nil
}

// checkOptimizer refuses an optimizer the imports do not build.
func checkOptimizer(name string) error {
	if name != "adamw" && name != "sgd" {
		return usagef("--optimizer %s: want adamw or sgd", name)
	}
	return nil
}
