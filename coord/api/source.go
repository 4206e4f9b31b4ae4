package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/replan"
)

// ModelSource is a generated model with dynamic dimensions: the
// coordinator builds the IR from it at the envelope's maxima, and builds
// it again when a replan grows the envelope.
type ModelSource struct {
	// Model is "gpt2" or "llama"; Config its generator config as JSON
	// (models.GPT2Config, models.LlamaConfig; field names in any case).
	Model  string          `json:"model" cbor:"model"`
	Config json.RawMessage `json:"config" cbor:"config"`
	// Dims are the dynamic dimensions: "seq" (tokens per sequence) and
	// "batch" (sequences per rank).
	Dims map[string]DimSpec `json:"dims" cbor:"dims"`
}

// DimSpec is a dynamic dimension: its initial envelope, the sizes it may
// grow to and a hard limit.
type DimSpec struct {
	Min     uint64   `json:"min" cbor:"min"`
	Max     uint64   `json:"max" cbor:"max"`
	Buckets []uint64 `json:"buckets,omitempty" cbor:"buckets,omitempty"`
	Limit   uint64   `json:"limit,omitempty" cbor:"limit,omitempty"`
}

// Envelope returns the initial envelope.
func (s *ModelSource) Envelope() map[string]ir.DimRange {
	env := map[string]ir.DimRange{}
	for d, spec := range s.Dims {
		env[d] = ir.DimRange{Min: spec.Min, Max: spec.Max}
	}
	return env
}

// ReplanConfig returns the replan configuration of a job with this
// source.
func (s *ModelSource) ReplanConfig(policy replan.Policy, elastic bool) replan.Config {
	cfg := replan.Config{Policy: policy, Buckets: map[string][]uint64{}, Limit: map[string]uint64{}, Elastic: elastic}
	if s == nil {
		return cfg
	}
	for d, spec := range s.Dims {
		if len(spec.Buckets) > 0 {
			cfg.Buckets[d] = slices.Clone(spec.Buckets)
		}
		if spec.Limit > 0 {
			cfg.Limit[d] = spec.Limit
		}
	}
	return cfg
}

// Validate checks the source and its dimensions.
func (s *ModelSource) Validate() error {
	for _, d := range slices.Sorted(maps.Keys(s.Dims)) {
		spec := s.Dims[d]
		if d != "seq" && d != "batch" {
			return fmt.Errorf("coord: dynamic dimension %q: supported are seq and batch", d)
		}
		if spec.Min == 0 || spec.Min > spec.Max || (spec.Limit != 0 && spec.Max > spec.Limit) {
			return fmt.Errorf("coord: dynamic dimension %s: want 0 < min ≤ max ≤ limit, got min %d max %d limit %d", d, spec.Min, spec.Max, spec.Limit)
		}
		if !slices.IsSorted(spec.Buckets) {
			return fmt.Errorf("coord: dynamic dimension %s: buckets must ascend", d)
		}
	}
	_, err := s.Generate(s.Envelope())
	return err
}

// Generate builds the IR with every dynamic dimension at its envelope
// maximum.
func (s *ModelSource) Generate(env map[string]ir.DimRange) (*ir.Model, error) {
	dec := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(s.Config))
		d.DisallowUnknownFields()
		if err := d.Decode(v); err != nil {
			return fmt.Errorf("coord: %s config: %w", s.Model, err)
		}
		return nil
	}
	set := func(seq, batch *uint64) {
		if r, ok := env["seq"]; ok {
			*seq = r.Max
		}
		if r, ok := env["batch"]; ok {
			*batch = r.Max
		}
	}
	switch s.Model {
	case "gpt2":
		c := models.DefaultGPT2Config()
		if err := dec(&c); err != nil {
			return nil, err
		}
		set(&c.Seq, &c.Batch)
		c.Context = max(c.Context, c.Seq)
		return models.GPT2(c)
	case "llama":
		c := models.DefaultLlamaConfig()
		if err := dec(&c); err != nil {
			return nil, err
		}
		set(&c.Seq, &c.Batch)
		return models.Llama(c)
	}
	return nil, fmt.Errorf("coord: model %q: supported are gpt2 and llama", s.Model)
}
