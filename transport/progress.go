package transport

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ProgressBucket is the KV bucket of step progress: key "<job>.<token>",
// token the worker identity's IdentityToken, holds the StepDone of the
// last step that worker finished. Unlike the
// StepDone subject, it survives a coordinator failover: a new leader's
// WatchProgress replays every rank's latest step.
const ProgressBucket = "tmmu_progress"

func progressKey(job, identity string) string { return job + "." + IdentityToken(identity) }

// PutProgress records that worker d.Identity (rank d.Rank under d.Epoch)
// finished d.Step, overwriting its previous progress.
func (t *Transport) PutProgress(ctx context.Context, d StepDone) error {
	if err := t.own("progress", d.Identity); err != nil {
		return err
	}
	data, err := Encode(d)
	if err != nil {
		return err
	}
	if _, err := t.progress.Put(ctx, progressKey(d.Job, d.Identity), data); err != nil {
		return fmt.Errorf("transport: progress of %s rank %d: %w", d.Job, d.Rank, err)
	}
	return nil
}

// WatchProgress streams every rank's latest progress for job: first what
// is stored, then each update. The channel closes when ctx is done or the
// connection closes.
func (t *Transport) WatchProgress(ctx context.Context, job string) (<-chan StepDone, error) {
	if err := ValidJob(job); err != nil {
		return nil, err
	}
	return watch(ctx, t, t.progress, job+".*", func(e jetstream.KeyValueEntry) (StepDone, bool) {
		var d StepDone
		if e.Operation() != jetstream.KeyValuePut {
			return d, false
		}
		if Decode(e.Value(), &d) != nil || d.Job != job || e.Key() != progressKey(job, d.Identity) {
			t.dropped.Add(1)
			return d, false
		}
		return d, true
	})
}
