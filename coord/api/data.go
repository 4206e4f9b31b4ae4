package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// DataSpec says what a job trains on (JobSpec.Data; none: the synthetic
// counting task).
type DataSpec struct {
	Train DataRef  `json:"train" cbor:"train"`
	Val   *DataRef `json:"val,omitempty" cbor:"val,omitempty"`
	// Order is "sequential" or "shuffled" (package data).
	Order string `json:"order" cbor:"order"`
	// Seed draws the shuffled order (default: the job's seed).
	Seed uint64 `json:"seed,omitempty" cbor:"seed,omitempty"`
	// ValEvery is the validation interval in steps (0: after the last
	// step only); ValBatches how many batches of the validation set a
	// validation reads (default DefaultValBatches).
	ValEvery   uint64 `json:"val_every,omitempty" cbor:"val_every,omitempty"`
	ValBatches uint64 `json:"val_batches,omitempty" cbor:"val_batches,omitempty"`
}

// DefaultValBatches is DataSpec.ValBatches' default.
const DefaultValBatches = 4

// DataRef names a dataset or a weights file: one stored in the cluster
// (Name, pinned to its Manifest when the job is submitted) or files
// every worker mounts (URLs "file:///path"), whose Digest the submitter
// computed and every worker checks before its first step.
type DataRef struct {
	Name     string   `json:"name,omitempty" cbor:"name,omitempty"`
	Manifest ir.Hash  `json:"manifest,omitzero" cbor:"manifest,omitempty"`
	URLs     []string `json:"urls,omitempty" cbor:"urls,omitempty"`
	Labels   []string `json:"labels,omitempty" cbor:"labels,omitempty"` // mounted image sets' label files
	// Format is uint16, uint32 or npy (datasets), safetensors (weights).
	Format string `json:"format" cbor:"format"`
	// Digest is the dataset's digest (package data), or a weights
	// file's SHA-256.
	Digest ir.Hash `json:"digest" cbor:"digest"`
	// Kind, Len and MaxToken are what a scan of the dataset found
	// (tokens or samples; the largest token id or label), checked against
	// the graph when the job is submitted.
	Kind     string `json:"kind" cbor:"kind"`
	Len      uint64 `json:"len" cbor:"len"`
	MaxToken int64  `json:"max_token" cbor:"max_token"`
	// Sample is an image set's sample shape.
	Sample []uint64 `json:"sample_shape,omitempty" cbor:"sample_shape,omitempty"`
}

// Stored says whether r names a dataset stored in the cluster.
func (r *DataRef) Stored() bool { return len(r.URLs) == 0 }

// String names r for messages.
func (r *DataRef) String() string {
	if r.Stored() {
		return fmt.Sprintf("%s (manifest %s)", r.Name, r.Manifest.Short())
	}
	return strings.Join(r.URLs, ",")
}

// Paths returns the local paths of r's file:// URLs (and labels).
func (r *DataRef) Paths() (files, labels []string, err error) {
	conv := func(urls []string) ([]string, error) {
		var out []string
		for _, u := range urls {
			p, ok := strings.CutPrefix(u, "file://")
			if !ok || !strings.HasPrefix(p, "/") {
				return nil, failure.New(failure.InvalidOptions, OpCoordinator, fmt.Sprintf("data URL %q: want file:///absolute/path", u))
			}
			out = append(out, p)
		}
		return out, nil
	}
	if files, err = conv(r.URLs); err != nil {
		return nil, nil, err
	}
	labels, err = conv(r.Labels)
	return files, labels, err
}

// Optimizer is a job's optimizer and its hyper-parameters
// (JobSpec.Optimizer; nil: DefaultOptimizer). They are kept as strings
// of decimal numbers: no floats in hashed or replicated state.
type Optimizer struct {
	Name        string `json:"name" cbor:"name"` // adamw
	LR          string `json:"lr" cbor:"lr"`
	Beta1       string `json:"beta1" cbor:"beta1"`
	Beta2       string `json:"beta2" cbor:"beta2"`
	Eps         string `json:"eps" cbor:"eps"`
	WeightDecay string `json:"weight_decay" cbor:"weight_decay"`
}

// DefaultOptimizer is AdamW as engine.DefaultAdamW: lr 1e-3, betas
// (0.9, 0.999), eps 1e-8, weight decay 0.01.
var DefaultOptimizer = Optimizer{Name: "adamw", LR: "0.001", Beta1: "0.9", Beta2: "0.999", Eps: "1e-08", WeightDecay: "0.01"}

// OptimizerOf returns the job's optimizer (the default when none is
// set).
func (s *JobSpec) OptimizerOf() Optimizer {
	if s.Optimizer == nil {
		return DefaultOptimizer
	}
	return *s.Optimizer
}

// sameJSON says whether a and b encode to the same JSON (a spec field
// compared for a retried submission).
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// DataRefs lists the datasets and weights a job reads.
func (s *JobSpec) DataRefs() []*DataRef {
	var out []*DataRef
	if s.Data != nil {
		out = append(out, &s.Data.Train)
		if s.Data.Val != nil {
			out = append(out, s.Data.Val)
		}
	}
	if s.Weights != nil {
		out = append(out, s.Weights)
	}
	return out
}

// DataRemoved answers DELETE /v1/datasets/{name}: the objects and bytes
// removed, and the running jobs that still pin the dataset (forced).
type DataRemoved struct {
	Name     string   `json:"name"`
	Objects  int      `json:"objects"`
	Bytes    uint64   `json:"bytes"`
	PinnedBy []string `json:"pinned_by,omitempty"`
}
