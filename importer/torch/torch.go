// Package torch imports PyTorch modules as UML_Model_IR graphs by running
// the exporter tmmu_export.py (embedded here; it needs only Python 3 and
// torch, plus torchvision for its models) and checking what it writes.
//
// The exporter traces one step with make_fx at the aten level: the
// forward pass for inference, or forward, backward and the AdamW or SGD
// update for training, with parameters, gradients, optimizer state,
// activations and saved_for_backward marked, views folded into the
// tensors they view and in-place writes recorded. It also runs the step
// eagerly and reports the peak of live tensor bytes PyTorch's CPU
// allocator held, for comparison with tmmu's plan, and writes the
// module's initial parameters (Report.Weights), so that tmmu trains from
// where PyTorch would. Every node records its aten call (ir.Call), so the
// engine can run it. A training graph's data inputs are named tokens
// (integer [batch, seq]) or images (floating [batch, C, H, W]), its
// target labels and its loss loss, which the executors bind. See the
// script's docstring for the mapping.
package torch

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// Script is the exporter's source.
//
//go:embed tmmu_export.py
var Script []byte

// OpImport names the operator in failures.
const OpImport = "import torch"

// Options choose the model and the step to trace.
type Options struct {
	// Model is a torchvision model name, gpt2-small, or FILE.py:NAME.
	Model     string
	Train     bool
	Batch     int    // default 1
	Seq       int    // tokens per sequence for gpt2-small; default 128
	ImageSize int    // a torchvision model's input side; default 224
	Optimizer string // adamw (default) or sgd
	Name      string // the graph's name; default MODEL-MODE-bBATCH
	// Python is the interpreter; default $TMMU_PYTHON, then
	// /usr/bin/python3 (which a pyenv shim on PATH may shadow), then
	// python3 on PATH.
	Python string
	// NoPeak skips the eager run that measures PyTorch's peak.
	NoPeak bool
	// Stderr receives the exporter's diagnostics; nil discards them.
	Stderr *bytes.Buffer
}

// Report is what the exporter says besides the graph.
type Report struct {
	Model            string `json:"model"`
	Mode             string `json:"mode"`
	Batch            int    `json:"batch"`
	Seq              int    `json:"seq,omitempty"`
	TorchVersion     string `json:"torch_version"`
	AtenNodes        int    `json:"aten_nodes"`
	IRNodes          int    `json:"ir_nodes"`
	ViewsElided      int    `json:"views_elided"`
	SavedForBackward int    `json:"saved_for_backward"`
	// PyTorchPeakBytes is the peak of live tensor bytes PyTorch held for
	// the step (0 with NoPeak); PyTorchPersistentBytes what was live
	// before it (parameters, buffers, optimizer state, inputs).
	PyTorchPeakBytes       uint64 `json:"pytorch_peak_bytes,omitempty"`
	PyTorchPersistentBytes uint64 `json:"pytorch_persistent_bytes,omitempty"`
	PyTorchPeakSource      string `json:"pytorch_peak_source,omitempty"`
	// Weights are the module's initial parameters and buffers that are
	// parameters of the graph, as a safetensors file under their
	// state_dict names: where PyTorch's own training would start.
	Weights []byte `json:"-"`
}

// Python finds the interpreter to run: o.Python, $TMMU_PYTHON,
// /usr/bin/python3 or python3 on PATH.
func Python(o Options) (string, error) {
	for _, c := range []struct{ path, from string }{{o.Python, "--python"}, {os.Getenv("TMMU_PYTHON"), "TMMU_PYTHON"}} {
		if c.path == "" {
			continue
		}
		if _, err := os.Stat(c.path); err != nil {
			return "", failure.Newf(failure.InvalidOptions, OpImport, "python %q (%s): no such file", c.path, c.from)
		}
		return c.path, nil
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3", nil
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p, nil
	}
	return "", failure.New(failure.InvalidOptions, OpImport, "no Python 3 found: "+howToGet)
}

const howToGet = "tmmu import torch needs Python 3 with torch (and torchvision for its models); " +
	"on Debian or Ubuntu: apt-get install -y python3-torch python3-torchvision, or pip install torch torchvision; " +
	"point TMMU_PYTHON or --python at that interpreter"

// Import runs the exporter and returns the graph, checked by
// ir.Compile, and its report. Nothing is written outside a temporary
// directory it removes.
func Import(ctx context.Context, o Options) (*ir.Model, *Report, error) {
	if o.Model == "" {
		return nil, nil, failure.New(failure.InvalidOptions, OpImport, "no model given: a torchvision model name, gpt2-small, or FILE.py:NAME")
	}
	py, err := Python(o)
	if err != nil {
		return nil, nil, err
	}
	probe := exec.CommandContext(ctx, py, "-c", "import torch")
	if out, err := probe.CombinedOutput(); err != nil {
		return nil, nil, failure.Newf(failure.InvalidOptions, OpImport, "%s cannot import torch (%s): %s", py, lastLine(out), howToGet)
	}
	dir, err := os.MkdirTemp("", "tmmu-import-torch-")
	if err != nil {
		return nil, nil, failure.New(failure.IOError, OpImport, err.Error())
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "tmmu_export.py")
	if err := os.WriteFile(script, Script, 0o600); err != nil {
		return nil, nil, failure.New(failure.IOError, OpImport, err.Error())
	}
	irFile, repFile, wFile := filepath.Join(dir, "ir.json"), filepath.Join(dir, "report.json"), filepath.Join(dir, "weights.safetensors")
	args := []string{script, o.Model, "--out", irFile, "--report", repFile, "--weights", wFile}
	if o.Train {
		args = append(args, "--train")
	}
	if o.Batch > 0 {
		args = append(args, "--batch", strconv.Itoa(o.Batch))
	}
	if o.Seq > 0 {
		args = append(args, "--seq", strconv.Itoa(o.Seq))
	}
	if o.Optimizer != "" {
		args = append(args, "--optimizer", o.Optimizer)
	}
	if o.ImageSize > 0 {
		args = append(args, "--image-size", strconv.Itoa(o.ImageSize))
	}
	if o.Name != "" {
		args = append(args, "--name", o.Name)
	}
	if o.NoPeak {
		args = append(args, "--no-peak")
	}
	cmd := exec.CommandContext(ctx, py, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if o.Stderr != nil {
			o.Stderr.Write(stderr.Bytes())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, nil, failure.Newf(failure.InvalidIRGraph, OpImport, "the exporter failed on %s: %s", o.Model, lastLine(stderr.Bytes()))
		}
		return nil, nil, failure.Newf(failure.IOError, OpImport, "running %s: %v", py, err)
	}
	if o.Stderr != nil {
		o.Stderr.Write(stderr.Bytes())
	}
	data, err := os.ReadFile(irFile)
	if err != nil {
		return nil, nil, failure.Newf(failure.IOError, OpImport, "%s ran but wrote no graph (is it a Python 3 interpreter?): %v", py, err)
	}
	m, err := ir.DecodeJSON(data)
	if err != nil {
		return nil, nil, err
	}
	if _, err := ir.Compile(m); err != nil {
		return nil, nil, fmt.Errorf("the exported graph of %s does not compile: %w", o.Model, err)
	}
	var rep Report
	if b, err := os.ReadFile(repFile); err != nil {
		return nil, nil, failure.New(failure.IOError, OpImport, err.Error())
	} else if err := json.Unmarshal(b, &rep); err != nil {
		return nil, nil, failure.Newf(failure.InvalidEncoding, OpImport, "the exporter's report: %v", err)
	}
	if rep.Weights, err = os.ReadFile(wFile); err != nil {
		return nil, nil, failure.New(failure.IOError, OpImport, "the exporter wrote no weights: "+err.Error())
	}
	return m, &rep, nil
}

// lastLine is the last non-empty line of out: a Python error's message.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
