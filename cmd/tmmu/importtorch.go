package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tmmu/tmmu/importer/torch"
	"github.com/tmmu/tmmu/planner"
)

func runImportTorch(e *env, args []string) error {
	c := &command{name: "import torch", usage: "import torch MODEL [--train] [--batch N] [--seq N] [--image-size N] [--optimizer adamw|sgd] [-o json|cbor] [--out FILE] [--report FILE] [--weights FILE]",
		summary: "Import a PyTorch module: MODEL is a torchvision model name (resnet50, vit_b_16, ...), gpt2-small (GPT-2 small's shape), or FILE.py:NAME (a class, or a function returning a module, (module, inputs, loss_fn) or (module, inputs, loss_fn, target)). " +
			"Traces one step at the aten level with make_fx: forward for inference; forward, backward and the AdamW or SGD update with --train; every node keeps its aten call, so the engine runs the graphs whose ops it has kernels for. " +
			"Writes the module's initial parameters beside the graph (M.safetensors for --out M.json). " +
			"Also runs the step eagerly and reports the peak of live tensor bytes PyTorch itself held. Needs Python 3 with torch (TMMU_PYTHON or --python picks the interpreter)."}
	fs := newFlags(e, c)
	var o torch.Options
	fs.BoolVar(&o.Train, "train", false, "trace forward, backward and the optimizer update (default: inference, forward only)")
	fs.IntVar(&o.Batch, "batch", 0, "batch size (default 1; a FILE.py builder that takes batch: its own default)")
	fs.IntVar(&o.Seq, "seq", 0, "tokens per sequence (gpt2-small: default 128; a FILE.py builder that takes seq: its own default)")
	fs.IntVar(&o.ImageSize, "image-size", 224, "the side of a torchvision model's square input images")
	fs.StringVar(&o.Optimizer, "optimizer", "adamw", "optimizer of --train: adamw or sgd (momentum)")
	fs.StringVar(&o.Name, "name", "", "the graph's name (default MODEL-MODE-bBATCH)")
	fs.StringVar(&o.Python, "python", "", "Python interpreter (default $TMMU_PYTHON, /usr/bin/python3, python3 on PATH)")
	fs.BoolVar(&o.NoPeak, "no-peak", false, "skip the eager run that measures PyTorch's peak")
	out := addModelOutput(fs)
	report := fs.String("report", "", "write the exporter's report (PyTorch's peak, counts) as JSON to FILE (default with --out FILE: FILE.pytorch.json)")
	weightsOut := fs.String("weights", "", "write the module's initial parameters and buffers as safetensors to FILE (default with --out M.json: M.safetensors), for tmmu train --weights")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("import torch takes one model, got %d arguments", len(pos))
	}
	if err := out.check(); err != nil {
		return err
	}
	if o.Batch < 0 || o.Seq < 0 || o.ImageSize < 1 {
		return usagef("--batch, --seq and --image-size must be positive")
	}
	if err := checkOptimizer(o.Optimizer); err != nil {
		return err
	}
	o.Model = pos[0]
	var diag bytes.Buffer
	o.Stderr = &diag
	m, rep, err := torch.Import(context.Background(), o)
	if err != nil {
		if bytes.Count(bytes.TrimSpace(diag.Bytes()), []byte("\n")) > 0 {
			e.stderr.Write(diag.Bytes()) // a traceback: the error quotes only its last line
		}
		return err
	}
	if *report == "" && *out.file != "" {
		*report = *out.file + ".pytorch.json"
	}
	if *weightsOut == "" && *out.file != "" {
		*weightsOut = strings.TrimSuffix(*out.file, filepath.Ext(*out.file)) + ".safetensors"
	}
	if err := out.write(e, m); err != nil {
		return err
	}
	if *weightsOut != "" {
		if err := writeFileAtomic(*weightsOut, rep.Weights); err != nil {
			return err
		}
	}
	if *report != "" {
		data, err := json.MarshalIndent(rep, "", " ")
		if err != nil {
			return err
		}
		if err := writeFileAtomic(*report, append(data, '\n')); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "imported %s (%s, batch %d, torch %s): %d aten nodes, %d IR nodes, %d tensors, %d views folded, %d saved for backward",
		rep.Model, rep.Mode, rep.Batch, rep.TorchVersion, rep.AtenNodes, rep.IRNodes, len(m.Tensors), rep.ViewsElided, rep.SavedForBackward)
	if rep.PyTorchPeakBytes > 0 {
		fmt.Fprintf(e.stderr, "; PyTorch eager peak %s (%s live before the step)", planner.FormatBytes(rep.PyTorchPeakBytes), planner.FormatBytes(rep.PyTorchPersistentBytes))
	}
	fmt.Fprintln(e.stderr)
	return nil
}
