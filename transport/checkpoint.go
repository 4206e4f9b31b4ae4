package transport

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// CheckpointBucket is the KV bucket of checkpoint reports: key
// "<job>.<step>.<epoch>.<rank>.<token>" holds the CheckpointReport of
// that rank's shard, as its identity reported it. The leader watches it (a new leader replays what is stored),
// commits each complete checkpoint through raft, and then forgets its
// reports (ForgetCheckpoint).
const CheckpointBucket = "tmmu_ckpt"

func checkpointKey(r *CheckpointReport) string {
	return r.Job + "." + strconv.FormatUint(r.Step, 10) + "." + strconv.FormatUint(r.Epoch, 10) + "." + strconv.FormatUint(r.Rank, 10) + "." + IdentityToken(r.Identity)
}

// PutCheckpoint stores r (a later report of the same rank, step and
// epoch replaces it: the shard's bytes are a function of the state, so
// it is the same shard).
func (t *Transport) PutCheckpoint(ctx context.Context, r CheckpointReport) error {
	if err := t.own("checkpoint report", r.Identity); err != nil {
		return err
	}
	data, err := Encode(r)
	if err != nil {
		return err
	}
	if _, err := t.ckpt.Put(ctx, checkpointKey(&r), data); err != nil {
		return fmt.Errorf("transport: checkpoint report of %s step %d rank %d: %w", r.Job, r.Step, r.Rank, err)
	}
	return nil
}

// WatchCheckpoints streams the checkpoint reports of job: those stored,
// then each new one. Entries that do not decode or do not match their key
// are dropped and counted.
func (t *Transport) WatchCheckpoints(ctx context.Context, job string) (<-chan CheckpointReport, error) {
	if err := ValidJob(job); err != nil {
		return nil, err
	}
	return watch(ctx, t, t.ckpt, job+".>", func(e jetstream.KeyValueEntry) (CheckpointReport, bool) {
		var r CheckpointReport
		if e.Operation() != jetstream.KeyValuePut {
			return r, false
		}
		if Decode(e.Value(), &r) != nil || r.Job != job || e.Key() != checkpointKey(&r) {
			t.dropped.Add(1)
			return r, false
		}
		return r, true
	})
}

// ForgetCheckpoint purges the reports of job's checkpoint of step (every
// epoch's) with one filtered stream purge.
func (t *Transport) ForgetCheckpoint(ctx context.Context, job string, step uint64) error {
	return t.purge(ctx, CheckpointBucket, job+"."+strconv.FormatUint(step, 10)+".>")
}

// ForgetJob purges everything stored for job in every bucket: plan and
// step reports, progress, collectives and checkpoint reports (a deleted
// job).
func (t *Transport) ForgetJob(ctx context.Context, job string) error {
	if err := ValidJob(job); err != nil {
		return err
	}
	for _, b := range []string{Bucket, StepsBucket, ProgressBucket, CollectiveBucket, CheckpointBucket} {
		if err := t.purge(ctx, b, job+".>"); err != nil {
			return err
		}
	}
	return nil
}

// purge purges the keys of bucket that match filter.
func (t *Transport) purge(ctx context.Context, bucket, filter string) error {
	s, err := t.js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return fmt.Errorf("transport: purging %s: %w", bucket, err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject("$KV."+bucket+"."+filter)); err != nil {
		return fmt.Errorf("transport: purging %s %s: %w", bucket, filter, err)
	}
	return nil
}
