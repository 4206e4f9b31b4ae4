package worker

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

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
	// coord serves stored datasets and weights in range reads.
	coord *api.Client
}

// prepareData opens the job's datasets and reads its initial weights
// (once, before the rank is claimed). A stored dataset is read in exact
// ranges from the coordinators (which read the store's blocks, each
// checked against its digest, through one cache for every rank); its
// manifest is checked against the digest the job pinned. Mounted files
// are scanned and must have the digest the job was submitted with
// (DATASET_CHANGED otherwise).
func (w *run) prepareData(ctx context.Context, job *api.Job) error {
	spec := &job.Spec
	d := &jobData{spec: spec.Data, coord: w.cfg.Coordinator}
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
		src, err := d.sources(ctx, spec.Weights, new(atomic.Uint64))
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

// sources opens a reference's files (its label files after them); the
// bytes of a stored one's range reads are added to fetched.
func (d *jobData) sources(ctx context.Context, ref *api.DataRef, fetched *atomic.Uint64) ([]data.Source, error) {
	if ref.Stored() {
		if d.coord == nil {
			return nil, fmt.Errorf("worker: %s is stored in the cluster and the worker has no coordinator client to read it", ref)
		}
		m, err := d.coord.Manifest(ctx, ref.Manifest)
		if err != nil {
			return nil, err
		}
		read := func(ctx context.Context, i int, off, n uint64) ([]byte, error) {
			return d.coord.ReadFile(ctx, ref.Manifest, i, off, n)
		}
		files, labels := datastore.RemoteSources(ctx, m, read, fetched)
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
	fetched := new(atomic.Uint64)
	srcs, err := d.sources(ctx, ref, fetched)
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
		ds.Fetched = fetched.Load
		return ds, nil // the manifest is checked against the job's digest, its blocks by the coordinators
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
// origin returns, for the epoch's global batch of batch rows, its first
// step (from 1) and the rows the job consumed before it (see
// api.Job.RowsBefore): the training stream continues from there.
func (d *jobData) setup(s runner.Setup, origin func(batch uint64) (step, rows uint64, err error)) runner.Setup {
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
		if err != nil {
			return nil, nil, err
		}
		if origin != nil {
			step, rows, err := origin(batch)
			if err != nil {
				return nil, nil, err
			}
			if step > 1 {
				train.SetOrigin(step-1, rows)
			}
		}
		if d.val == nil {
			return train, nil, nil
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
