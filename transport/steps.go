package transport

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// StepsBucket is the KV bucket of the step barrier: key
// "<job>.<epoch>.<rank>.<token>" holds the StepReport of the latest step
// that rank is ready to run under that epoch, as its identity reported it
// (a barrier counts only the rank's holder's). Because it is stored, every watcher —
// a rank at the barrier, a replacement worker catching up, a new leader —
// sees the same reports, including those made before it started watching.
const StepsBucket = "tmmu_steps"

// PutStep records that r.Rank is ready to run r.Step under r.Epoch
// (overwriting its earlier report for the epoch).
func (t *Transport) PutStep(ctx context.Context, r StepReport) error {
	if err := t.own("step report", r.Identity); err != nil {
		return err
	}
	data, err := Encode(r)
	if err != nil {
		return err
	}
	if _, err := t.steps.Put(ctx, reportKey(r.Job, r.Epoch, r.Rank, r.Identity), data); err != nil {
		return fmt.Errorf("transport: step report of %s epoch %d rank %d: %w", r.Job, r.Epoch, r.Rank, err)
	}
	return nil
}

// Steps returns every identity's latest step report of (job, epoch), by
// rank and identity token.
func (t *Transport) Steps(ctx context.Context, job string, epoch uint64) ([]StepReport, error) {
	if err := ValidJob(job); err != nil {
		return nil, err
	}
	return stored(ctx, t.steps, epochFilter(job, epoch), func(e jetstream.KeyValueEntry) (StepReport, bool) {
		return t.entryStep(e, job, epoch)
	})
}

func (t *Transport) entryStep(e jetstream.KeyValueEntry, job string, epoch uint64) (StepReport, bool) {
	var r StepReport
	if e.Operation() != jetstream.KeyValuePut {
		return r, false
	}
	if Decode(e.Value(), &r) != nil || r.Job != job || (epoch != anyEpoch && r.Epoch != epoch) || e.Key() != reportKey(job, r.Epoch, r.Rank, r.Identity) {
		t.dropped.Add(1)
		return r, false
	}
	return r, true
}

// WatchSteps streams the step reports of (job, epoch): every rank's latest
// stored report, then each new one. The channel closes when ctx is done or
// the connection closes.
func (t *Transport) WatchSteps(ctx context.Context, job string, epoch uint64) (<-chan StepReport, error) {
	if err := ValidJob(job); err != nil {
		return nil, err
	}
	return watch(ctx, t, t.steps, epochFilter(job, epoch), func(e jetstream.KeyValueEntry) (StepReport, bool) {
		return t.entryStep(e, job, epoch)
	})
}

// anyEpoch makes entryStep accept a report of any epoch.
const anyEpoch = ^uint64(0)

// WatchJobSteps streams the step reports of every epoch of job, stored
// and new, like WatchSteps. A worker keeps one such watch for its whole
// run instead of one per epoch: a replan then costs no new consumer on
// the server for each rank.
func (t *Transport) WatchJobSteps(ctx context.Context, job string) (<-chan StepReport, error) {
	if err := ValidJob(job); err != nil {
		return nil, err
	}
	return watch(ctx, t, t.steps, job+".*.*.*", func(e jetstream.KeyValueEntry) (StepReport, bool) {
		return t.entryStep(e, job, anyEpoch)
	})
}
