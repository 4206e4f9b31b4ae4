package coord

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// checkData checks a job's dataset, weights and optimizer against its
// graph before anything is planned or committed: the dataset must be a
// token set (the engine feeds language models), hold at least one row of
// the graph's sequence and its label, and every token id must be below
// the vocabulary; the order must be known; the weights must be a
// safetensors file; the optimizer must be AdamW with numbers in range.
// Each refusal names the dataset or field.
func checkData(js *api.JobSpec, m *ir.Model) error {
	if o := js.Optimizer; o != nil {
		if err := checkOptimizer(o); err != nil {
			return err
		}
	}
	if w := js.Weights; w != nil && w.Format != "safetensors" {
		return failure.New(failure.InvalidWeights, api.OpCoordinator, fmt.Sprintf("weights %s are %q, want a safetensors file", w, w.Format), "weights", w.String())
	}
	d := js.Data
	if d == nil {
		return nil
	}
	if d.Order == "" {
		d.Order = string(data.Shuffled)
	}
	if d.Order != string(data.Sequential) && d.Order != string(data.Shuffled) {
		return failure.New(failure.InvalidOptions, api.OpCoordinator, fmt.Sprintf("data order %q: want sequential or shuffled", d.Order), "field", "data.order")
	}
	if d.ValBatches == 0 {
		d.ValBatches = api.DefaultValBatches
	}
	if d.Val == nil && d.ValEvery > 0 {
		return failure.New(failure.InvalidOptions, api.OpCoordinator, "data.val_every needs data.val", "field", "data.val_every")
	}
	g, err := ir.Compile(m)
	if err != nil {
		return err
	}
	in, ok := data.InputsOf(g)
	if !ok {
		return failure.New(failure.UnsupportedExecution, api.OpCoordinator, "a dataset feeds a language model's inputs tokens and labels [batch, seq] embedded from a table, or a classifier's images and labels: this graph has neither", "graph", g.Name)
	}
	refs := []*api.DataRef{&d.Train}
	if d.Val != nil {
		refs = append(refs, d.Val)
	}
	what := map[data.Kind]string{data.Tokens: "token id", data.Images: "label"}[in.Kind]
	bound := map[data.Kind]string{data.Tokens: "vocabulary", data.Images: "number of classes"}[in.Kind]
	for _, r := range refs {
		switch {
		case r.Kind != string(in.Kind):
			return failure.New(failure.InvalidDataset, api.OpCoordinator, fmt.Sprintf("dataset %s holds %s: the graph takes %s", r, r.Kind, in.Kind), "dataset", r.String())
		case r.MaxToken >= 0 && uint64(r.MaxToken) >= in.Limit:
			return failure.New(failure.InvalidDataset, api.OpCoordinator, fmt.Sprintf("dataset %s holds %s %d, not below the model's %s (%d)", r, what, r.MaxToken, bound, in.Limit), "dataset", r.String())
		case in.Kind == data.Tokens && r.Len < in.Seq+2:
			return failure.New(failure.InvalidDataset, api.OpCoordinator, fmt.Sprintf("dataset %s holds %d tokens: shorter than one sample of %d tokens and its label", r, r.Len, in.Seq), "dataset", r.String())
		case in.Kind == data.Images && r.Len == 0:
			return failure.New(failure.InvalidDataset, api.OpCoordinator, fmt.Sprintf("dataset %s holds no sample", r), "dataset", r.String())
		case in.Kind == data.Images && !slices.Equal(r.Sample, in.Sample):
			return failure.New(failure.InvalidDataset, api.OpCoordinator, fmt.Sprintf("dataset %s holds samples of shape %v, the graph takes %v", r, r.Sample, in.Sample), "dataset", r.String())
		case r.Format != string(data.Uint16) && r.Format != string(data.Uint32) && r.Format != string(data.NPY):
			return failure.New(failure.InvalidDataset, api.OpCoordinator, fmt.Sprintf("dataset %s: format %q", r, r.Format), "dataset", r.String())
		}
		if !r.Stored() {
			if _, _, err := r.Paths(); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkOptimizer refuses an optimizer other than AdamW or numbers out of
// range (lr > 0, β in [0, 1), ε > 0, weight decay ≥ 0).
func checkOptimizer(o *api.Optimizer) error {
	if o.Name != "adamw" {
		return failure.New(failure.InvalidOptions, api.OpCoordinator, fmt.Sprintf("optimizer %q: the engine runs adamw", o.Name), "field", "optimizer.name")
	}
	for _, f := range []struct {
		name, v string
		ok      func(float64) bool
	}{
		{"lr", o.LR, func(x float64) bool { return x > 0 }},
		{"beta1", o.Beta1, func(x float64) bool { return x >= 0 && x < 1 }},
		{"beta2", o.Beta2, func(x float64) bool { return x >= 0 && x < 1 }},
		{"eps", o.Eps, func(x float64) bool { return x > 0 }},
		{"weight_decay", o.WeightDecay, func(x float64) bool { return x >= 0 }},
	} {
		x, err := strconv.ParseFloat(f.v, 32)
		if err != nil || !f.ok(x) || x > 1e30 {
			return failure.New(failure.InvalidOptions, api.OpCoordinator, fmt.Sprintf("optimizer.%s %q: want lr > 0, betas in [0, 1), eps > 0, weight_decay ≥ 0", f.name, f.v), "field", "optimizer."+f.name)
		}
	}
	return nil
}
