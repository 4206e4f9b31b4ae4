package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	open     bool
	identity string
	signer   Signer
	verifier Verifier
}

// Signer signs the decisions a coordinator publishes (trust.Signer).
type Signer interface{ Sign(msg []byte) []byte }

// Verifier checks a decision's signature (trust.Verifier).
type Verifier interface{ Verify(msg, sig []byte) bool }

// OpenOnly makes New open the buckets without ever creating them,
// waiting instead (New fails with the server's error, which a caller
// retries): a worker's credentials may not manage streams, the
// coordinators create the buckets.
func OpenOnly() Option { return func(o *options) { o.open = true } }

// WithIdentity binds the transport to the worker identity its
// credentials belong to: collectives are stored under its token, and
// reports, requests and progress that name another identity are refused
// before they reach NATS (whose permissions would refuse them anyway).
func WithIdentity(identity string) Option { return func(o *options) { o.identity = identity } }

// WithSigner signs every outcome and announcement published (the
// coordinators').
func WithSigner(s Signer) Option { return func(o *options) { o.signer = s } }

// WithVerifier makes the subscriptions to outcomes and announcements
// drop (and count, see Rejected) every message whose signature v does
// not verify, unsigned ones included.
func WithVerifier(v Verifier) Option { return func(o *options) { o.verifier = v } }

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
	rejected atomic.Uint64
	o        options

	rosterMu sync.Mutex
	rosters  map[string][]string // job → holders of the running epoch (collectives)
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
	if o.identity != "" {
		if err := checkText("identity", o.identity, MaxIdentityLen, true); err != nil {
			return nil, fmt.Errorf("transport: %w", err)
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
	return &Transport{nc: nc, js: js, kv: kv, progress: progress, steps: steps, coll: coll, ckpt: ckpt, stream: stream, o: o, rosters: map[string][]string{}}, nil
}

// Identity returns the worker identity the transport is bound to ("" for
// none: a coordinator's, or an unsecured cluster's).
func (t *Transport) Identity() string { return t.o.identity }

// Rejected returns how many outcomes and announcements were dropped
// because their signature did not verify (or they had none).
func (t *Transport) Rejected() uint64 { return t.rejected.Load() }

// own refuses what names another identity than the transport's.
func (t *Transport) own(what, identity string) error {
	if t.o.identity != "" && identity != t.o.identity {
		return fmt.Errorf("%w: %s of identity %q on a transport bound to %q", ErrInvalid, what, identity, t.o.identity)
	}
	return nil
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
	if errors.Is(err, jetstream.ErrBucketNotFound) && !o.open {
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

// Report stores r under key "<job>.<epoch>.<rank>.<token>" (token: the
// identity's IdentityToken) with a KV Create, so that each identity
// reports (job, epoch, rank) exactly once. Reporting the byte-identical
// report again returns nil (a retry after a lost ack is safe); any other
// report for a key that exists returns an error wrapping ErrConflict that
// names the rank and both hashes, and the stored report stands (the same
// hash reported under a later claim revision is not a conflict: the
// identity claimed its rank again, the earlier proof stands). Which
// identity's report counts for a rank is the leader's decision (the one
// holding the rank's claim; see Tally).
func (t *Transport) Report(ctx context.Context, r PlanReport) error {
	if err := t.own("plan report", r.Identity); err != nil {
		return err
	}
	data, err := Encode(r)
	if err != nil {
		return err
	}
	key := reportKey(r.Job, r.Epoch, r.Rank, r.Identity)
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
		if stored.PlanHash == r.PlanHash && stored.Identity == r.Identity {
			// The same proof, made under an earlier claim of the rank
			// (the identity claimed it again since): it stands.
			return nil
		}
		return fmt.Errorf("%w: job %s epoch %d rank %d: stored plan hash %s, new plan hash %s (identity %q)",
			ErrConflict, r.Job, r.Epoch, r.Rank, stored.PlanHash, r.PlanHash, r.Identity)
	}
}

// Reports returns every report stored for (job, epoch) so far, by rank
// and then by identity token (a rank may have reports from several
// identities: only the claim's holder's counts).
//
// It opens one KV watch on "<job>.<epoch>.*.*" (an ordered consumer that
// delivers the last value of each matching key), reads the initial values
// up to the watcher's end-of-initial-values marker and stops: one consumer
// and one pass over the matching keys, rather than a key listing followed
// by a Get per rank. Entries that do not decode or do not match their key
// are skipped and counted in Dropped.
func (t *Transport) Reports(ctx context.Context, job string, epoch uint64) ([]PlanReport, error) {
	if err := ValidJob(job); err != nil {
		return nil, err
	}
	return stored(ctx, t.kv, epochFilter(job, epoch), func(e jetstream.KeyValueEntry) (PlanReport, bool) {
		return t.entryReport(e, job, epoch)
	})
}

// stored reads the values decode accepts under filter, as they are now,
// in the order of their keys.
func stored[T any](ctx context.Context, kv jetstream.KeyValue, filter string, decode func(jetstream.KeyValueEntry) (T, bool)) ([]T, error) {
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
	type keyed struct {
		key string
		v   T
	}
	var got []keyed
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, ErrWatchClosed
			}
			if e == nil { // end of initial values
				slices.SortFunc(got, func(a, b keyed) int { return keyOrder(a.key, b.key) })
				out := make([]T, len(got))
				for i, k := range got {
					out[i] = k.v
				}
				return out, nil
			}
			if v, ok := decode(e); ok {
				got = append(got, keyed{e.Key(), v})
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
	kj, ke, kr, tok, ok := parseKey(e.Key())
	if !ok || kj != job || ke != epoch || Decode(e.Value(), &r) != nil ||
		r.Job != kj || r.Epoch != ke || r.Rank != kr || IdentityToken(r.Identity) != tok {
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

// asker is implemented by the requests workers publish, each on a
// subject of its identity's token.
type asker interface {
	message
	asker() string
}

func (r ReplanRequest) asker() string   { return r.Identity }
func (r RecoveryRequest) asker() string { return r.Identity }

// decision is implemented (on pointers) by the signed messages.
type decision interface {
	message
	signature() *[]byte
}

func (o *Outcome) signature() *[]byte      { return &o.Sig }
func (a *Announcement) signature() *[]byte { return &a.Sig }

// signedBytes returns d's canonical CBOR without its signature.
func signedBytes(d decision) ([]byte, error) {
	sig := d.signature()
	saved := *sig
	*sig = nil
	b, err := Encode(d)
	*sig = saved
	return b, err
}

func publish[T message](t *Transport, subj string, v T) error {
	data, err := Encode(v)
	if err != nil {
		return err
	}
	if err := t.nc.Publish(subj, data); err != nil {
		return fmt.Errorf("transport: publish %s: %w", subj, err)
	}
	return nil
}

// publishDecision signs d when the transport has a signer, and
// publishes it on subjectOf(job).
func publishDecision(t *Transport, subjectOf func(string) (string, error), d decision) error {
	subj, err := subjectOf(d.jobName())
	if err != nil {
		return err
	}
	if t.o.signer != nil {
		b, err := signedBytes(d)
		if err != nil {
			return err
		}
		*d.signature() = t.o.signer.Sign(b)
	}
	return publish(t, subj, d)
}

// publishRequest publishes a worker's request on subjectOf(job) + "." +
// its identity's token.
func publishRequest[T asker](t *Transport, subjectOf func(string) (string, error), v T) error {
	subj, err := subjectOf(v.jobName())
	if err != nil {
		return err
	}
	if err := t.own("request", v.asker()); err != nil {
		return err
	}
	return publish(t, subj+"."+IdentityToken(v.asker()), v)
}

// subscribe calls h with every valid message for job on subjectOf(job)
// followed by suffix; check, when set, drops (and counts in Rejected)
// what it refuses.
func subscribe[T any, PT interface {
	*T
	message
}](t *Transport, subjectOf func(string) (string, error), suffix, job string, check func(PT, *nats.Msg) bool, h func(T)) (*nats.Subscription, error) {
	subj, err := subjectOf(job)
	if err != nil {
		return nil, err
	}
	subj += suffix
	if h == nil {
		return nil, errors.New("transport: nil handler")
	}
	sub, err := t.nc.Subscribe(subj, func(m *nats.Msg) {
		var v T
		if err := Decode(m.Data, PT(&v)); err != nil || PT(&v).jobName() != job {
			t.dropped.Add(1)
			return
		}
		if check != nil && !check(PT(&v), m) {
			t.rejected.Add(1)
			return
		}
		h(v)
	})
	if err != nil {
		return nil, fmt.Errorf("transport: subscribe %s: %w", subj, err)
	}
	return sub, nil
}

// verified returns the check of a decision's signature: nil without a
// verifier (an unsecured cluster).
func verified[PT decision](t *Transport) func(PT, *nats.Msg) bool {
	if t.o.verifier == nil {
		return nil
	}
	return func(d PT, _ *nats.Msg) bool {
		sig := *d.signature()
		if len(sig) == 0 {
			return false
		}
		b, err := signedBytes(d)
		return err == nil && t.o.verifier.Verify(b, sig)
	}
}

// fromAsker checks that a request arrived on its identity's subject: the
// NATS permissions let only that identity publish there.
func fromAsker[PT interface {
	asker
}](v PT, m *nats.Msg) bool {
	return strings.HasSuffix(m.Subject, "."+IdentityToken(v.asker()))
}

// PublishOutcome validates o, signs it (WithSigner) and publishes it on
// OutcomeSubject(o.Job).
func (t *Transport) PublishOutcome(o Outcome) error { return publishDecision(t, OutcomeSubject, &o) }

// SubscribeOutcomes calls h, on the subscription's goroutine, with each
// valid Outcome published for job (each one whose signature verifies,
// WithVerifier).
func (t *Transport) SubscribeOutcomes(job string, h func(Outcome)) (*nats.Subscription, error) {
	return subscribe(t, OutcomeSubject, "", job, verified[*Outcome](t), h)
}

// PublishReplanRequest validates r and publishes it on
// ReplanSubject(r.Job).<token of r.Identity>.
func (t *Transport) PublishReplanRequest(r ReplanRequest) error {
	return publishRequest(t, ReplanSubject, r)
}

// SubscribeReplanRequests calls h with each valid ReplanRequest published
// for job on the subject of the identity it names (others are dropped and
// counted in Rejected).
func (t *Transport) SubscribeReplanRequests(job string, h func(ReplanRequest)) (*nats.Subscription, error) {
	return subscribe(t, ReplanSubject, ".*", job, fromAsker[*ReplanRequest], h)
}

// PublishAnnouncement validates a, signs it (WithSigner) and publishes it
// on AnnounceSubject(a.Job).
func (t *Transport) PublishAnnouncement(a Announcement) error {
	return publishDecision(t, AnnounceSubject, &a)
}

// SubscribeAnnouncements calls h with each valid Announcement published for
// job (each one whose signature verifies, WithVerifier).
func (t *Transport) SubscribeAnnouncements(job string, h func(Announcement)) (*nats.Subscription, error) {
	return subscribe(t, AnnounceSubject, "", job, verified[*Announcement](t), h)
}

// PublishRecovery validates r and publishes it on
// RecoverSubject(r.Job).<token of r.Identity>.
func (t *Transport) PublishRecovery(r RecoveryRequest) error {
	return publishRequest(t, RecoverSubject, r)
}

// SubscribeRecovery calls h with each valid RecoveryRequest published for
// job on the subject of the identity it names.
func (t *Transport) SubscribeRecovery(job string, h func(RecoveryRequest)) (*nats.Subscription, error) {
	return subscribe(t, RecoverSubject, ".*", job, fromAsker[*RecoveryRequest], h)
}
