package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/internal/atomicfile"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/safetensors"
	"github.com/tmmu/tmmu/weights"
)

// dataFlags are the dataset flags of tmmu train.
type dataFlags struct {
	train, val, format, order string
	labels, valLabels, bind   string
	valEvery, valBatches      uint64
}

func (d *dataFlags) register(fs interface {
	StringVar(*string, string, string, string)
	Uint64Var(*uint64, string, uint64, string)
}) {
	fs.StringVar(&d.train, "data", "", "train on this dataset: token files (comma-separated, read as one stream), flat uint16/uint32 .bin or 1-D integer .npy, or .npy sample arrays with --labels; default: a synthetic task")
	fs.StringVar(&d.labels, "labels", "", "with --data of .npy samples (an image set): their label files (.npy, 1-D integers), comma-separated, one per sample file")
	fs.StringVar(&d.valLabels, "val-labels", "", "with --val-data of .npy samples: their label files")
	fs.StringVar(&d.val, "val-data", "", "validation dataset (same formats); its loss is reported every --val-every steps")
	fs.StringVar(&d.format, "data-format", "", "uint16, uint32 or npy (default: npy for .npy files, else uint16, as nanoGPT writes)")
	fs.StringVar(&d.order, "order", string(data.Shuffled), "sample order: sequential (row r of step k starts at token ((k·B+r)·S) mod (T−S−1)) or shuffled (a permutation per epoch from --seed and the dataset's digest)")
	fs.Uint64Var(&d.valEvery, "val-every", 0, "with --val-data: validate every N steps (default: after the last step only)")
	fs.Uint64Var(&d.valBatches, "val-batches", 4, "with --val-data: batches of the validation set a validation reads (the first N, sequentially)")
	fs.StringVar(&d.bind, "bind", "", bindUsage)
}

// datasetInfo describes a dataset a run read (tmmu train -o json).
type datasetInfo struct {
	Files  []string `json:"files"`
	Format string   `json:"format"`
	Order  string   `json:"order,omitempty"`
	Digest string   `json:"digest"`
	// Kind is "tokens" or "images"; Tokens counts a token stream's
	// tokens, Samples an image set's samples.
	Kind    string `json:"kind"`
	Tokens  uint64 `json:"tokens,omitempty"`
	Samples uint64 `json:"samples,omitempty"`
	Bytes   uint64 `json:"bytes"`
	// BytesRead is what the run read of it (the scan before the first
	// step excluded); BytesFed the bytes of the tokens it fed, at the
	// files' width (a row of S tokens reads S+1).
	BytesRead uint64 `json:"bytes_read"`
	BytesFed  uint64 `json:"bytes_fed"`
}

// openTokens opens a comma-separated list of token files as one dataset
// and scans it (digest, every token below vocab).
func openTokens(list, format string, vocab uint64) (*data.Dataset, data.Summary, func(), error) {
	return openData(list, "", format, vocab)
}

// openData opens a comma-separated list of files (and of label files,
// for an image set) as one dataset and scans it: its digest, and every
// token id or label below limit.
func openData(list, labels, format string, limit uint64) (*data.Dataset, data.Summary, func(), error) {
	var srcs, lsrcs []data.Source
	closeAll := func() {
		for _, s := range append(srcs, lsrcs...) {
			s.(*data.File).Close()
		}
	}
	names := strings.Split(list, ",")
	for _, name := range names {
		f, err := data.OpenFile(name)
		if err != nil {
			closeAll()
			return nil, data.Summary{}, nil, err
		}
		srcs = append(srcs, f)
	}
	for _, name := range splitList(labels) {
		f, err := data.OpenFile(name)
		if err != nil {
			closeAll()
			return nil, data.Summary{}, nil, err
		}
		lsrcs = append(lsrcs, f)
	}
	ft := data.Format(format)
	if ft == "" {
		ft = data.GuessFormat(names[0])
	}
	vocab := limit
	d, err := data.Open(ft, srcs, lsrcs)
	if err != nil {
		closeAll()
		return nil, data.Summary{}, nil, err
	}
	sum, err := d.Scan(vocab)
	if err != nil {
		closeAll()
		return nil, data.Summary{}, nil, err
	}
	return d, sum, closeAll, nil
}

// vocabOf is the rows of the table the graph's "tokens" index (0: none).
func vocabOf(g *ir.Graph) uint64 {
	if in, ok := data.InputsOf(g); ok && in.Kind == data.Tokens {
		return in.Limit
	}
	return 0
}

// loadWeights reads a safetensors file of initial weights for g.
func loadWeights(path string, g *ir.Graph) (map[string][]float32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, ioError(err, path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, ioError(err, path)
	}
	sf, err := safetensors.Open(f, st.Size())
	if err != nil {
		var fe *failure.Error
		if errors.As(err, &fe) {
			fe.With("file", path)
		}
		return nil, err
	}
	w, err := weights.Load(sf, g)
	if err != nil {
		var fe *failure.Error
		if errors.As(err, &fe) {
			fe.With("file", path)
		}
	}
	return w, err
}

// exportState writes a whole state (every tensor unpartitioned, as
// 32-bit words by id) of g as a safetensors file, whole or not at all.
func exportState(path string, g *ir.Graph, words map[string][]uint32, optimizerStep uint64, withOptimizer bool) error {
	ts, err := weights.Export(g, words, withOptimizer)
	if err != nil {
		return err
	}
	meta := map[string]string{"format": "pt", "tmmu_graph": g.Name, "tmmu_names": weights.NamingOf(g).Scheme}
	if withOptimizer {
		meta["optimizer"] = "adamw"
		meta["optimizer_step"] = fmt.Sprint(optimizerStep - 1) // steps taken
	}
	var b bytes.Buffer
	if err := safetensors.Write(&b, ts, meta); err != nil {
		return err
	}
	if err := atomicfile.Write(path, b.Bytes(), 0o644); err != nil {
		return ioError(err, path)
	}
	return nil
}

// optimizerInfo is the optimizer and its hyper-parameters, so a run can
// be reproduced elsewhere (tmmu train -o json, tmmu job history).
type optimizerInfo struct {
	Name        string  `json:"name"`
	LR          float64 `json:"lr"`
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	WeightDecay float64 `json:"weight_decay"`
}

// short is a float32 hyper-parameter as written (0.001, not
// 0.0010000000474974513).
func short(f float32) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return v
}

func optimizerOf(a engine.AdamW) optimizerInfo {
	return optimizerInfo{Name: "adamw", LR: short(a.LR), Beta1: short(a.Beta1), Beta2: short(a.Beta2), Eps: short(a.Eps), WeightDecay: short(a.WeightDecay)}
}

// bindRoles are the tensor names the executors and datasets look for:
// --bind ROLE=TENSOR renames a graph's TENSOR to ROLE.
var bindRoles = []string{"tokens", "images", "labels", "loss"}

const bindUsage = "bind the graph's tensors to the data: ROLE=TENSOR[,ROLE=TENSOR] renames TENSOR to ROLE (tokens, images, labels, loss), for graphs whose inputs are not named as the generators and tmmu import torch name them"

// applyBind renames m's tensors as a --bind list says.
func applyBind(m *ir.Model, list string) error {
	seen := map[string]bool{}
	for _, b := range splitList(list) {
		role, tensor, ok := strings.Cut(b, "=")
		if !ok || tensor == "" || !slices.Contains(bindRoles, role) {
			return usagef("--bind %q: want ROLE=TENSOR, ROLE one of %s", b, strings.Join(bindRoles, ", "))
		}
		if seen[role] {
			return usagef("--bind binds %s twice", role)
		}
		seen[role] = true
		if err := m.RenameTensor(tensor, role); err != nil {
			return err
		}
	}
	return nil
}
