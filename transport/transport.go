package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrConflict is returned (wrapped) by Transport.Report when (job, epoch,
// rank) already holds a different report: a rank proves its plan exactly
// once per epoch and the first proof stands.
var ErrConflict = errors.New("transport: conflicting plan report")

// ErrWatchClosed is returned by Transport.Reports when the KV watch ends
// before delivering the stored reports (the connection closed).
var ErrWatchClosed = errors.New("transport: kv watch closed")

// MaxValueSize is the largest KV value the bucket accepts when this package
// creates it. An encoded PlanReport is at most a few hundred bytes.
const MaxValueSize = 4096

// reportBuffer is the capacity of the channel WatchReports returns.
const reportBuffer = 64

// Option configures New.
type Option func(*options)

type options struct {
	storage  jetstream.StorageType
	replicas int
	timeout  time.Duration
}

// WithStorage sets the storage of the KV bucket when New creates it
// (jetstream.FileStorage, the default, or jetstream.MemoryStorage). It has
// no effect on a bucket that already exists.
func WithStorage(s jetstream.StorageType) Option { return func(o *options) { o.storage = s } }

// WithReplicas sets the replica count of the KV bucket when New creates it
// (default 1). It has no effect on a bucket that already exists.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithTimeout bounds the JetStream requests New makes (default 10s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Transport carries the agreement protocol over one NATS connection. It is
// safe for concurrent use. It does not own the connection: closing the
// connection ends every subscription and watch it made.
type Transport struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	progress jetstream.KeyValue
	steps    jetstream.KeyValue
	coll     jetstream.KeyValue
	ckpt     jetstream.KeyValue
	stream   jetstream.Stream
	dropped  atomic.Uint64
	resumed  atomic.Uint64
}

// New returns a Transport over nc. It opens the KV bucket Bucket, creating
// it (history 1, MaxValueSize, the configured storage and replicas) if it
// does not exist. An existing bucket is used as it is.
func New(nc *nats.Conn, opts ...Option) (*Transport, error) {
	if nc == nil {
		return nil, errors.New("transport: nil connection")
	}
	o := options{storage: jetstream.FileStorage, replicas: 1, timeout: 10 * time.Second}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("transport: jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	kv, err := openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: Bucket, Description: "tmmu plan-hash agreement: one report per job.epoch.rank"}, o)
	if err != nil {
		return nil, err
	}
	progress, err := openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: ProgressBucket, Description: "tmmu step progress: the last step each job.rank finished"}, o)
	if err != nil {
		return nil, err
	}
	steps, err := openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: StepsBucket, Description: "tmmu step barrier: the step each job.epoch.rank is ready to run"}, o)
	if err != nil {
		return nil, err
	}
	coll, err := openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: CollectiveBucket, Description: "tmmu collectives: each rank's contribution, kept for a while",
		MaxValueSize: int32(collectiveChunk(nc) + 64), TTL: CollectiveTTL}, o)
	if err != nil {
		return nil, err
	}
	ckpt, err := openBucket(ctx, js, jetstream.KeyValueConfig{Bucket: CheckpointBucket, Description: "tmmu checkpoint reports: each rank's shard of each checkpoint"}, o)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, bucketStream)
	if err != nil {
		return nil, fmt.Errorf("transport: kv stream %s: %w", bucketStream, err)
	}
	return &Transport{nc: nc, js: js, kv: kv, progress: progress, steps: steps, coll: coll, ckpt: ckpt, stream: stream}, nil
}

// JetStream returns the JetStream context the transport uses (for the
// checkpoint object store).
func (t *Transport) JetStream() jetstream.JetStream { return t.js }

// Conn returns the NATS connection the transport uses.
func (t *Transport) Conn() *nats.Conn { return t.nc }

// openBucket opens a KV bucket, creating it if it does not exist: cfg
// with history 1, MaxValueSize unless cfg sets one, and the configured
// storage and replicas.
func openBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, o options) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg.History, cfg.Storage, cfg.Replicas = 1, o.storage, o.replicas
		if cfg.MaxValueSize == 0 {
			cfg.MaxValueSize = MaxValueSize
		}
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			// Created concurrently (by another worker) with another config.
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("transport: kv bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Dropped returns how many received messages and KV entries were discarded
// because they did not decode, did not validate, or did not match the job
// (and epoch, rank) of the subject or key they arrived on.
func (t *Transport) Dropped() uint64 { return t.dropped.Load() }

// Report stores r under key "<job>.<epoch>.<rank>" with a KV Create, so
// that each (job, epoch, rank) is reported exactly once. Reporting the
// byte-identical report again returns nil (a retry after a lost ack is
// safe); any other report for a key that exists returns an error wrapping
// ErrConflict that names the rank and both hashes, and the stored report
// stands. Identity is part of the report: the same hash from a different
// identity is a conflict too (two workers claim one rank).
func (t *Transport) Report(ctx context.Context, r PlanReport) error {
	data, err := Encode(r)
	if err != nil {
		return err
	}
	key := reportKey(r.Job, r.Epoch, r.Rank)
	for attempt := 0; ; attempt++ {
		_, err := t.kv.Create(ctx, key, data)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("transport: report %s: %w", key, err)
		}
		e, err := t.kv.Get(ctx, key)
		if (errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted)) && attempt < 3 {
			continue // forgotten between Create and Get: try again
		}
		if err != nil {
			return fmt.Errorf("transport: report %s: reading the stored report: %w", key, err)
		}
		if bytes.Equal(e.Value(), data) {
			return nil
		}
		var stored PlanReport
		if err := Decode(e.Value(), &stored); err != nil {
			return fmt.Errorf("%w: job %s epoch %d rank %d: stored value does not decode (%v); new plan hash %s",
				ErrConflict, r.Job, r.Epoch, r.Rank, err, r.PlanHash)
		}
		if stored.PlanHash == r.PlanHash {
			return fmt.Errorf("%w: job %s epoch %d rank %d: plan hash %s already reported by identity %q, now by %q",
				ErrConflict, r.Job, r.Epoch, r.Rank, r.PlanHash, stored.Identity, r.Identity)
		}
		return fmt.Errorf("%w: job %s epoch %d rank %d: stored plan hash %s (identity %q), new plan hash %s (identity %q)",
			ErrConflict, r.Job, r.Epoch, r.Rank, stored.PlanHash, stored.Identity, r.PlanHash, r.Identity)
	}
}

// Reports returns every report stored for (job, epoch) so far, by rank.
//
// It opens one KV watch on "<job>.<epoch>.*" (an ordered consumer that
// delivers the last value of each matching key), reads the initial values
// up to the watcher's end-of-initial-values marker and stops: one consumer
// and one pass over the matching keys, rather than a key listing followed
// by a Get per rank. Entries that do not decode or do not match their key
// are skipped and counted in Dropped.
func (t *Transport) Reports(ctx context.Context, job string, epoch uint64) (map[uint64]PlanReport, error) {
	if err := ValidJob(job); err != nil {
		return nil, err
	}
	return stored(ctx, t.kv, epochFilter(job, epoch), func(e jetstream.KeyValueEntry) (uint64, PlanReport, bool) {
		r, ok := t.entryReport(e, job, epoch)
		return r.Rank, r, ok
	})
}

// stored reads the values decode accepts under filter, as they are now,
// keyed by what decode says.
func stored[T any](ctx context.Context, kv jetstream.KeyValue, filter string, decode func(jetstream.KeyValueEntry) (uint64, T, bool)) (map[uint64]T, error) {
	// The client ties a goroutine to the watch's context that only a
	// Stop or the context ends, not a closed connection: give it a context
	// that always ends.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.Watch(wctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("transport: watch %s: %w", filter, err)
	}
	defer stopWatcher(w)
	out := make(map[uint64]T)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, ErrWatchClosed
			}
			if e == nil { // end of initial values
				return out, nil
			}
			if k, v, ok := decode(e); ok {
				out[k] = v
			}
		}
	}
}

// WatchReports streams the reports for (job, epoch): first those already
// stored, then each new one as it is stored. The channel closes when ctx is
// done or the connection closes; by then the underlying watch has been
// stopped and drained, and the goroutine feeding the channel is returning. Entries that do not decode or do
// not match their key are skipped and counted in Dropped. The consumer must
// keep reading (or cancel ctx): the stream applies back-pressure.
func (t *Transport) WatchReports(ctx context.Context, job string, epoch uint64) (<-chan PlanReport, error) {
	if err := ValidJob(job); err != nil {
		return nil, err
	}
	return watch(ctx, t, t.kv, epochFilter(job, epoch), func(e jetstream.KeyValueEntry) (PlanReport, bool) {
		return t.entryReport(e, job, epoch)
	})
}

// watch streams the values decode accepts from a KV watch on filter: the
// stored ones, then each update. The watch's own context always ends (see
// Reports), and the watch is stopped and drained before the channel
// closes.
//
// The watch rides through NATS restarts: when the connection reconnects,
// or the watch ends while the connection lives, it is opened again from
// the revision after the last one delivered (the client's ordered
// consumer would recover by itself only after missing two 5-second
// heartbeats). A value may then be delivered twice; every consumer here
// keeps the latest or the highest. The channel closes when ctx is done or
// the connection is closed for good.
func watch[T any](ctx context.Context, t *Transport, kv jetstream.KeyValue, filter string, decode func(jetstream.KeyValueEntry) (T, bool)) (<-chan T, error) {
	wctx, cancel := context.WithCancel(ctx)
	w, err := kv.Watch(wctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("transport: watch %s: %w", filter, err)
	}
	out := make(chan T, reportBuffer)
	go func() {
		defer close(out)
		defer cancel()
		var last uint64 // the revision of the last entry delivered
		seen := t.nc.Stats().Reconnects
		tick := time.NewTicker(watchCheck)
		defer tick.Stop()
		defer func() {
			if w != nil {
				stopWatcher(w)
			}
		}()
		for {
			if w == nil {
				w = t.reopen(wctx, kv, filter, last)
				if w == nil {
					return // ctx done, or the connection closed for good
				}
			}
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					w = nil
					continue
				}
				if e == nil {
					continue // end of initial values
				}
				last = max(last, e.Revision())
				v, ok := decode(e)
				if !ok {
					continue
				}
				select {
				case out <- v:
				case <-ctx.Done():
					return
				}
			case <-tick.C:
				if r := t.nc.Stats().Reconnects; r != seen {
					seen = r
					t.resumed.Add(1)
					stopWatcher(w)
					w = nil
				}
			}
		}
	}()
	return out, nil
}

// watchCheck is how often a watch looks for a reconnection.
const watchCheck = 100 * time.Millisecond

// reopen opens a watch on filter again, from the revision after last,
// retrying with backoff while NATS (or its JetStream) is not back; nil
// once ctx is done or the connection is closed for good.
func (t *Transport) reopen(ctx context.Context, kv jetstream.KeyValue, filter string, last uint64) jetstream.KeyWatcher {
	opts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
	if last > 0 {
		opts = append(opts, jetstream.ResumeFromRevision(last+1))
	}
	wait := 50 * time.Millisecond
	for {
		if ctx.Err() != nil || t.nc.IsClosed() {
			return nil
		}
		w, err := kv.Watch(ctx, filter, opts...)
		if err == nil {
			return w
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// Resumed returns how many times watches were opened again after NATS
// reconnected.
func (t *Transport) Resumed() uint64 { return t.resumed.Load() }

// stopWatcher stops w and drains its channel until the client closes it.
// The client's message callback blocks while the channel is full, so
// stopping without draining could leave its delivery goroutine blocked
// forever; the channel closes once that goroutine has exited.
func stopWatcher(w jetstream.KeyWatcher) {
	_ = w.Stop() // an error means already stopped or connection closed
	for range w.Updates() {
	}
}

// entryReport decodes a KV entry and checks it against its key.
func (t *Transport) entryReport(e jetstream.KeyValueEntry, job string, epoch uint64) (PlanReport, bool) {
	if e.Operation() != jetstream.KeyValuePut {
		return PlanReport{}, false
	}
	var r PlanReport
	kj, ke, kr, ok := parseKey(e.Key())
	if !ok || kj != job || ke != epoch || Decode(e.Value(), &r) != nil ||
		r.Job != kj || r.Epoch != ke || r.Rank != kr {
		t.dropped.Add(1)
		return PlanReport{}, false
	}
	return r, true
}

// Forget removes every report of (job, epoch) with a single stream purge
// filtered on the epoch's keys. Unlike a KV Purge per key it leaves no
// tombstones and costs one request however many ranks reported; watchers
// are not notified. Forget only finished epochs: once forgotten, a rank may
// report again for that epoch.
func (t *Transport) Forget(ctx context.Context, job string, epoch uint64) error {
	if err := ValidJob(job); err != nil {
		return err
	}
	if err := t.stream.Purge(ctx, jetstream.WithPurgeSubject(bucketSubjectPrefix+epochFilter(job, epoch))); err != nil {
		return fmt.Errorf("transport: forget %s epoch %d: %w", job, epoch, err)
	}
	return nil
}

// message is implemented by every broadcast schema.
type message interface {
	Validate() error
	jobName() string
}

func (o Outcome) jobName() string         { return o.Job }
func (r ReplanRequest) jobName() string   { return r.Job }
func (a Announcement) jobName() string    { return a.Job }
func (r RecoveryRequest) jobName() string { return r.Job }

func publish[T message](t *Transport, subjectOf func(string) (string, error), v T) error {
	subj, err := subjectOf(v.jobName())
	if err != nil {
		return err
	}
	data, err := Encode(v)
	if err != nil {
		return err
	}
	if err := t.nc.Publish(subj, data); err != nil {
		return fmt.Errorf("transport: publish %s: %w", subj, err)
	}
	return nil
}

func subscribe[T any, PT interface {
	*T
	message
}](t *Transport, subjectOf func(string) (string, error), job string, h func(T)) (*nats.Subscription, error) {
	subj, err := subjectOf(job)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("transport: nil handler")
	}
	sub, err := t.nc.Subscribe(subj, func(m *nats.Msg) {
		var v T
		if err := Decode(m.Data, PT(&v)); err != nil || PT(&v).jobName() != job {
			t.dropped.Add(1)
			return
		}
		h(v)
	})
	if err != nil {
		return nil, fmt.Errorf("transport: subscribe %s: %w", subj, err)
	}
	return sub, nil
}

// PublishOutcome validates o and publishes it on OutcomeSubject(o.Job).
func (t *Transport) PublishOutcome(o Outcome) error { return publish(t, OutcomeSubject, o) }

// SubscribeOutcomes calls h, on the subscription's goroutine, with each
// valid Outcome published for job.
func (t *Transport) SubscribeOutcomes(job string, h func(Outcome)) (*nats.Subscription, error) {
	return subscribe(t, OutcomeSubject, job, h)
}

// PublishReplanRequest validates r and publishes it on ReplanSubject(r.Job).
func (t *Transport) PublishReplanRequest(r ReplanRequest) error {
	return publish(t, ReplanSubject, r)
}

// SubscribeReplanRequests calls h with each valid ReplanRequest published
// for job.
func (t *Transport) SubscribeReplanRequests(job string, h func(ReplanRequest)) (*nats.Subscription, error) {
	return subscribe(t, ReplanSubject, job, h)
}

// PublishAnnouncement validates a and publishes it on AnnounceSubject(a.Job).
func (t *Transport) PublishAnnouncement(a Announcement) error {
	return publish(t, AnnounceSubject, a)
}

// SubscribeAnnouncements calls h with each valid Announcement published for
// job.
func (t *Transport) SubscribeAnnouncements(job string, h func(Announcement)) (*nats.Subscription, error) {
	return subscribe(t, AnnounceSubject, job, h)
}

// PublishRecovery validates r and publishes it on RecoverSubject(r.Job).
func (t *Transport) PublishRecovery(r RecoveryRequest) error { return publish(t, RecoverSubject, r) }

// SubscribeRecovery calls h with each valid RecoveryRequest published for
// job.
func (t *Transport) SubscribeRecovery(job string, h func(RecoveryRequest)) (*nats.Subscription, error) {
	return subscribe(t, RecoverSubject, job, h)
}
