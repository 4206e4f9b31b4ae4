package worker

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/datastore"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/safetensors"
	"github.com/tmmu/tmmu/weights"
)

// jobData is what a job's spec asks the executors to read: its
// datasets, opened once for the worker's life, its initial weights and
// its optimizer.
type jobData struct {
	spec       *api.DataSpec
	seed       uint64
	train, val *data.Dataset
	weights    map[string][]float32
	adamw      [5]float32
	reader     *datastore.Reader
}

// prepareData opens the job's datasets and reads its initial weights
// (once, before the rank is claimed). A stored dataset is read through
// the data store's blocks (each checked against its digest); mounted
// files are scanned and must have the digest the job was submitted with
// (DATASET_CHANGED otherwise).
func (w *run) prepareData(ctx context.Context, job *api.Job) error {
	spec := &job.Spec
	d := &jobData{spec: spec.Data}
	if o := spec.Optimizer; o != nil {
		for i, v := range []string{o.LR, o.Beta1, o.Beta2, o.Eps, o.WeightDecay} {
			f, err := strconv.ParseFloat(v, 32)
			if err != nil {
				return fmt.Errorf("worker: optimizer: %w", err)
			}
			d.adamw[i] = float32(f)
		}
	}
	if spec.Data == nil && spec.Weights == nil {
		w.data = d
		return nil
	}
	if needStore(spec) {
		st, err := checkpoint.WaitNATSStore(ctx, w.cfg.Transport.JetStream(), checkpoint.NATSConfig{Bucket: datastore.Bucket})
		if err != nil {
			return err
		}
		d.reader = datastore.NewReader(st, 0)
	}
	if spec.Data != nil {
		d.seed = spec.Data.Seed
		if d.seed == 0 {
			d.seed = spec.Seed
		}
		var err error
		if d.train, err = d.open(ctx, &spec.Data.Train); err != nil {
			return err
		}
		if v := spec.Data.Val; v != nil {
			if d.val, err = d.open(ctx, v); err != nil {
				return err
			}
		}
	}
	if spec.Weights != nil {
		m, err := w.model(ctx, job, 0)
		if err != nil {
			return err
		}
		g, err := ir.Compile(m)
		if err != nil {
			return err
		}
		// Read through a reader of their own: the data's counts its
		// bytes (tmmu_worker_data_fetched_bytes).
		wd := *d
		if d.reader != nil {
			wd.reader = datastore.NewReader(d.reader.Store(), 0)
		}
		src, err := wd.sources(ctx, spec.Weights)
		if err != nil {
			return err
		}
		defer closeSources(src)
		f, err := safetensors.Open(src[0], src[0].Size())
		if err != nil {
			return err
		}
		if d.weights, err = weights.Load(f, g); err != nil {
			return err
		}
		w.log.Info("initial weights loaded", "weights", spec.Weights.String(), "parameters", len(d.weights))
	}
	w.data = d
	return nil
}

func needStore(spec *api.JobSpec) bool {
	for _, r := range spec.DataRefs() {
		if r.Stored() {
			return true
		}
	}
	return false
}

// sources opens a reference's files (its label files after them).
func (d *jobData) sources(ctx context.Context, ref *api.DataRef) ([]data.Source, error) {
	if ref.Stored() {
		m, err := d.reader.Manifest(ctx, ref.Manifest)
		if err != nil {
			return nil, err
		}
		files, labels := d.reader.Sources(ctx, m)
		return append(files, labels...), nil
	}
	files, labels, err := ref.Paths()
	if err != nil {
		return nil, err
	}
	var out []data.Source
	for _, p := range append(files, labels...) {
		f, err := data.OpenFile(p)
		if err != nil {
			closeSources(out)
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

func closeSources(srcs []data.Source) {
	for _, s := range srcs {
		if f, ok := s.(*data.File); ok {
			f.Close()
		}
	}
}

// open opens a dataset the job names. Mounted files are scanned: their
// digest must be the one the job was submitted with.
func (d *jobData) open(ctx context.Context, ref *api.DataRef) (*data.Dataset, error) {
	srcs, err := d.sources(ctx, ref)
	if err != nil {
		return nil, err
	}
	n := len(srcs) - len(ref.Labels)
	ds, err := data.Open(data.Format(ref.Format), srcs[:n], srcs[n:])
	if err != nil {
		closeSources(srcs)
		return nil, err
	}
	if ref.Stored() {
		ds.Fetched = d.reader.Fetched.Load
		return ds, nil // blocks are checked against their digests as they are read
	}
	sum, err := ds.Scan(0)
	if err != nil {
		closeSources(srcs)
		return nil, err
	}
	if ir.Hash(sum.Digest) != ref.Digest {
		closeSources(srcs)
		return nil, failure.New(failure.DatasetChanged, "tmmu.worker",
			fmt.Sprintf("the files %s hash to dataset digest %.12s here; the job was submitted with %s", ref, sum.DigestString(), ref.Digest.Short()), "dataset", ref.String())
	}
	return ds, nil
}

// setup is the runner.Setup of the job's data, weights and optimizer.
func (d *jobData) setup(s runner.Setup) runner.Setup {
	if d == nil {
		return s
	}
	s.Weights, s.AdamW = d.weights, d.adamw
	if d.train == nil {
		return s
	}
	spec := d.spec
	s.ValBatches = spec.ValBatches
	s.Data = func(seq, batch uint64) (*data.Stream, *data.Stream, error) {
		train, err := data.NewStream(d.train, data.Order(spec.Order), d.seed, spec.Train.Digest, seq, batch)
		if err != nil || d.val == nil {
			return train, nil, err
		}
		val, err := data.NewStream(d.val, data.Sequential, d.seed, spec.Val.Digest, seq, batch)
		return train, val, err
	}
	return s
}

// digest is the training dataset's digest a checkpoint records (nil: the
// synthetic task).
func (d *jobData) digest() []byte {
	if d == nil || d.spec == nil {
		return nil
	}
	return d.spec.Train.Digest[:]
}
