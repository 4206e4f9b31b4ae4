package transport

import (
	"errors"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/tmmu/tmmu/ir"
)

// Limits on the free-text fields. They keep every message small enough to
// fit comfortably in one NATS message and one KV value (see MaxValueSize).
const (
	// MaxJobLen is the longest job name accepted.
	MaxJobLen = 128
	// MaxIdentityLen is the longest PlanReport.Identity accepted, in bytes.
	MaxIdentityLen = 256
	// MaxReasonLen is the longest Reason accepted, in bytes.
	MaxReasonLen = 1024
	// MaxDedupeIDLen is the longest ReplanRequest.DedupeID accepted, in bytes.
	MaxDedupeIDLen = 128
	// maxSigLen bounds a signature (ed25519's are 64 bytes).
	maxSigLen = 128
)

// Announcement kinds.
const (
	// KindEpoch announces that a new plan epoch starts at StartStep.
	KindEpoch = "epoch"
	// KindReplan announces that the leader accepted a replan request and a
	// new epoch will follow; workers stop issuing steps.
	KindReplan = "replan"
	// KindAbort announces that the job is aborted; workers stop.
	KindAbort = "abort"
	// KindGrant announces that ranks may run epoch Epoch up to step
	// StartStep (the horizon the committed progress allows).
	KindGrant = "grant"
	// KindCheckpoint announces that the checkpoint of step StartStep is
	// committed (a restore waiting for it may go on; a finished job is
	// done).
	KindCheckpoint = "checkpoint"
	// KindHold announces that the job was paused, resumed, cancelled or
	// deleted: workers fetch it.
	KindHold = "hold"
)

// PlanReport is a worker's proof that it computed plan hash PlanHash for rank
// Rank of job Job in plan epoch Epoch. It is stored once per (job, epoch,
// rank) in the KV bucket (see Transport.Report).
type PlanReport struct {
	Job      string  `cbor:"job" json:"job"`
	Epoch    uint64  `cbor:"epoch" json:"epoch"`
	Rank     uint64  `cbor:"rank" json:"rank"`
	Identity string  `cbor:"identity" json:"identity"`
	PlanHash ir.Hash `cbor:"plan_hash" json:"plan_hash"`
	// ClaimRevision is the etcd revision at which Identity claimed the
	// rank (rendezvous.Claim.Revision): the leader counts the report
	// only if the identity held the rank's claim at that revision.
	ClaimRevision int64 `cbor:"claim_revision,omitempty" json:"claim_revision,omitempty"`
}

// Mismatch is a rank whose reported plan hash differs from the committed one.
type Mismatch struct {
	Rank     uint64  `cbor:"rank" json:"rank"`
	Expected ir.Hash `cbor:"expected" json:"expected"`
	Got      ir.Hash `cbor:"got" json:"got"`
}

// Outcome is what the coordinator leader committed for (Job, Epoch): whether
// every rank proved the expected plan hash and, if so, the first step the
// epoch runs.
type Outcome struct {
	Job        string     `cbor:"job" json:"job"`
	Epoch      uint64     `cbor:"epoch" json:"epoch"`
	Agreed     bool       `cbor:"agreed" json:"agreed"`
	StartStep  uint64     `cbor:"start_step" json:"start_step"`
	Mismatches []Mismatch `cbor:"mismatches,omitempty" json:"mismatches,omitempty"`
	Missing    []uint64   `cbor:"missing,omitempty" json:"missing,omitempty"`
	Reason     string     `cbor:"reason,omitempty" json:"reason,omitempty"`
	// Holders are, by rank, the identities whose reports counted: the
	// only identities whose step, progress and checkpoint reports count
	// for their rank under the epoch.
	Holders []string `cbor:"holders,omitempty" json:"holders,omitempty"`
	// Incarnation and Sig: see Announcement.
	Incarnation int64  `cbor:"incarnation,omitempty" json:"incarnation,omitempty"`
	Sig         []byte `cbor:"sig,omitempty" json:"sig,omitempty"`
}

// StepReport is a rank's readiness to run step Step of epoch Epoch with plan
// PlanHash: the go/no-go barrier (see Transport.PutStep).
type StepReport struct {
	Job      string  `cbor:"job" json:"job"`
	Epoch    uint64  `cbor:"epoch" json:"epoch"`
	Rank     uint64  `cbor:"rank" json:"rank"`
	Step     uint64  `cbor:"step" json:"step"`
	PlanHash ir.Hash `cbor:"plan_hash" json:"plan_hash"`
	// Identity reports; ClaimRevision as in PlanReport. A barrier counts
	// a report only from the rank's holder (Outcome.Holders).
	Identity      string `cbor:"identity" json:"identity"`
	ClaimRevision int64  `cbor:"claim_revision,omitempty" json:"claim_revision,omitempty"`
}

// StepLoss is a loss after a step.
type StepLoss struct {
	Step uint64  `cbor:"step" json:"step"`
	Loss float64 `cbor:"loss" json:"loss"`
}

// MaxReportedLosses bounds StepDone.Losses: the steps a rank may run
// ahead of the committed progress (the window) and one more.
const MaxReportedLosses = 4

// StepDone is a rank's progress report: it finished step Step in Nanos
// nanoseconds of wall time.
type StepDone struct {
	Job   string `cbor:"job" json:"job"`
	Epoch uint64 `cbor:"epoch" json:"epoch"`
	Rank  uint64 `cbor:"rank" json:"rank"`
	Step  uint64 `cbor:"step" json:"step"`
	Nanos int64  `cbor:"nanos" json:"nanos"`
	// Identity is the worker's; progress is kept per identity, since an
	// elastic job renumbers its ranks. The leader counts it only from
	// the rank's holder under Epoch.
	Identity      string `cbor:"identity" json:"identity"`
	ClaimRevision int64  `cbor:"claim_revision,omitempty" json:"claim_revision,omitempty"`
	// Losses are the rank's training losses of its last steps (at most
	// MaxReportedLosses, oldest first) and Val its latest validation
	// loss: the leader averages them over the ranks (tmmu status). None
	// in confidential and regulated jobs.
	Losses []StepLoss `cbor:"losses,omitempty" json:"losses,omitempty"`
	Val    *StepLoss  `cbor:"val,omitempty" json:"val,omitempty"`
}

// ReplanRequest asks the leader for a new plan epoch (an OOM, a changed
// shape envelope, a lost rank). DedupeID identifies the request across
// retries: the leader acts on each DedupeID at most once.
type ReplanRequest struct {
	Job      string `cbor:"job" json:"job"`
	Epoch    uint64 `cbor:"epoch" json:"epoch"`
	Rank     uint64 `cbor:"rank" json:"rank"`
	Step     uint64 `cbor:"step" json:"step"`
	Reason   string `cbor:"reason" json:"reason"`
	DedupeID string `cbor:"dedupe_id" json:"dedupe_id"`
	// Dims are the dynamic dimension sizes the rank observed at the end
	// of Step ("seq": 2048), for an envelope exit.
	Dims map[string]uint64 `cbor:"dims,omitempty" json:"dims,omitempty"`
	// Identity asks; the leader acts only on the rank's holder's request.
	Identity      string `cbor:"identity" json:"identity"`
	ClaimRevision int64  `cbor:"claim_revision,omitempty" json:"claim_revision,omitempty"`
}

// CheckpointReport is a rank's shard of the checkpoint of step Step: it
// stored the object Digest (Bytes long, written in Nanos) holding its
// state, which seals to StateHash. It is stored once per (job, step,
// epoch, rank) in CheckpointBucket; the leader commits the checkpoint once
// every rank of the world of Epoch reported.
type CheckpointReport struct {
	Job       string  `cbor:"job" json:"job"`
	Step      uint64  `cbor:"step" json:"step"`
	Epoch     uint64  `cbor:"epoch" json:"epoch"`
	Rank      uint64  `cbor:"rank" json:"rank"`
	Identity  string  `cbor:"identity" json:"identity"`
	Digest    ir.Hash `cbor:"digest" json:"digest"`
	StateHash ir.Hash `cbor:"state_hash" json:"state_hash"`
	Bytes     uint64  `cbor:"bytes" json:"bytes"`
	Nanos     int64   `cbor:"nanos" json:"nanos"`
	// ClaimRevision as in PlanReport.
	ClaimRevision int64 `cbor:"claim_revision,omitempty" json:"claim_revision,omitempty"`
}

// Recovery request kinds (package recovery's RequestKind).
const (
	RecoverStateless = "stateless"
	RecoverCorrupt   = "corrupt"
	RecoverMismatch  = "mismatch"
	RecoverStoreFull = "store_full"
)

// RecoveryRequest asks the leader for help with the training state: the
// rank holds no state for step Step (stateless), read a corrupt object
// of the checkpoint of step Step (corrupt), restored it and holds another
// state (mismatch), or cannot store its shard of it (store_full). Ranks
// repeat a request until they see its answer; the leader's decisions are
// idempotent (recovery.Decide).
type RecoveryRequest struct {
	Job      string `cbor:"job" json:"job"`
	Kind     string `cbor:"kind" json:"kind"`
	Epoch    uint64 `cbor:"epoch" json:"epoch"`
	Rank     uint64 `cbor:"rank" json:"rank"`
	Identity string `cbor:"identity" json:"identity"`
	Step     uint64 `cbor:"step" json:"step"`
	Detail   string `cbor:"detail,omitempty" json:"detail,omitempty"`
	// ClaimRevision as in PlanReport.
	ClaimRevision int64 `cbor:"claim_revision,omitempty" json:"claim_revision,omitempty"`
}

// Announcement is a leader broadcast to every worker of a job: a new epoch
// (KindEpoch), an accepted replan (KindReplan) or an abort (KindAbort).
type Announcement struct {
	Job       string `cbor:"job" json:"job"`
	Epoch     uint64 `cbor:"epoch" json:"epoch"`
	Kind      string `cbor:"kind" json:"kind"`
	StartStep uint64 `cbor:"start_step" json:"start_step"`
	Reason    string `cbor:"reason,omitempty" json:"reason,omitempty"`
	// Incarnation names the job's incarnation (the leader's clock when
	// it was submitted), so a signed decision of a deleted job cannot be
	// replayed to a job submitted again under its name.
	Incarnation int64 `cbor:"incarnation,omitempty" json:"incarnation,omitempty"`
	// Sig is the coordinators' ed25519 signature over the message's
	// canonical CBOR without Sig (see WithSigner, WithVerifier).
	Sig []byte `cbor:"sig,omitempty" json:"sig,omitempty"`
}

// ErrInvalid is wrapped by every Validate error.
var ErrInvalid = errors.New("transport: invalid message")

func invalid(kind, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, kind, fmt.Sprintf(format, args...))
}

// ValidJob reports whether job is a usable job name: 1 to MaxJobLen
// characters from [A-Za-z0-9_-], so that it is a single NATS subject token
// and a single KV key token.
func ValidJob(job string) error {
	if job == "" {
		return fmt.Errorf("%w: empty job name", ErrInvalid)
	}
	if len(job) > MaxJobLen {
		return fmt.Errorf("%w: job name longer than %d bytes", ErrInvalid, MaxJobLen)
	}
	for i := 0; i < len(job); i++ {
		c := job[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: job name %q: byte %d (%q) is not in [A-Za-z0-9_-]", ErrInvalid, job, i, c)
		}
	}
	return nil
}

// checkText checks a free-text field: valid UTF-8, no control characters,
// at most max bytes; empty is allowed unless required.
func checkText(field, s string, max int, required bool) error {
	if s == "" {
		if required {
			return fmt.Errorf("%s is empty", field)
		}
		return nil
	}
	if len(s) > max {
		return fmt.Errorf("%s is %d bytes, more than %d", field, len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s contains control character %U", field, r)
		}
	}
	return nil
}

// Validate checks r: a valid job name, a non-empty identity and a non-zero
// plan hash.
func (r PlanReport) Validate() error {
	if err := ValidJob(r.Job); err != nil {
		return invalid("plan report", "%v", err)
	}
	if err := checkText("identity", r.Identity, MaxIdentityLen, true); err != nil {
		return invalid("plan report", "%v", err)
	}
	if r.PlanHash.IsZero() {
		return invalid("plan report", "rank %d: zero plan hash", r.Rank)
	}
	return nil
}

// Validate checks o: a valid job name; mismatches sorted by rank with no
// rank twice, each with a non-zero hash different from the expected one;
// missing ranks sorted with no rank twice and none also mismatched; an
// agreed outcome has neither; a disagreed one says why (mismatches, missing
// ranks or a reason).
func (o Outcome) Validate() error {
	if err := ValidJob(o.Job); err != nil {
		return invalid("outcome", "%v", err)
	}
	if err := checkText("reason", o.Reason, MaxReasonLen, false); err != nil {
		return invalid("outcome", "%v", err)
	}
	for i, m := range o.Mismatches {
		if i > 0 && o.Mismatches[i-1].Rank >= m.Rank {
			return invalid("outcome", "mismatches not strictly sorted by rank at index %d", i)
		}
		if m.Got.IsZero() {
			return invalid("outcome", "mismatch for rank %d has a zero hash", m.Rank)
		}
		if m.Expected == m.Got {
			return invalid("outcome", "mismatch for rank %d has equal hashes", m.Rank)
		}
	}
	for i, r := range o.Missing {
		if i > 0 && o.Missing[i-1] >= r {
			return invalid("outcome", "missing ranks not strictly sorted at index %d", i)
		}
		if _, found := slices.BinarySearchFunc(o.Mismatches, r, func(m Mismatch, r uint64) int {
			switch {
			case m.Rank < r:
				return -1
			case m.Rank > r:
				return 1
			}
			return 0
		}); found {
			return invalid("outcome", "rank %d both missing and mismatched", r)
		}
	}
	if o.Agreed && (len(o.Mismatches) > 0 || len(o.Missing) > 0) {
		return invalid("outcome", "agreed with %d mismatches and %d missing ranks", len(o.Mismatches), len(o.Missing))
	}
	if !o.Agreed && len(o.Mismatches) == 0 && len(o.Missing) == 0 && o.Reason == "" {
		return invalid("outcome", "not agreed and no mismatch, missing rank or reason given")
	}
	for r, h := range o.Holders {
		if err := checkText("holder", h, MaxIdentityLen, false); err != nil {
			return invalid("outcome", "rank %d: %v", r, err)
		}
	}
	if len(o.Sig) > maxSigLen {
		return invalid("outcome", "signature of %d bytes", len(o.Sig))
	}
	return nil
}

// Validate checks r: a valid job name and a non-zero plan hash.
func (r StepReport) Validate() error {
	if err := ValidJob(r.Job); err != nil {
		return invalid("step report", "%v", err)
	}
	if r.PlanHash.IsZero() {
		return invalid("step report", "rank %d step %d: zero plan hash", r.Rank, r.Step)
	}
	if err := checkText("identity", r.Identity, MaxIdentityLen, true); err != nil {
		return invalid("step report", "%v", err)
	}
	return nil
}

// Validate checks d: a valid job name and a non-negative duration.
func (d StepDone) Validate() error {
	if err := ValidJob(d.Job); err != nil {
		return invalid("step done", "%v", err)
	}
	if d.Nanos < 0 {
		return invalid("step done", "rank %d step %d: negative duration %d", d.Rank, d.Step, d.Nanos)
	}
	if err := checkText("identity", d.Identity, MaxIdentityLen, true); err != nil {
		return invalid("step done", "%v", err)
	}
	return nil
}

// Validate checks r: a valid job name, a non-empty reason and a non-empty
// dedupe id.
func (r ReplanRequest) Validate() error {
	if err := ValidJob(r.Job); err != nil {
		return invalid("replan request", "%v", err)
	}
	if err := checkText("reason", r.Reason, MaxReasonLen, true); err != nil {
		return invalid("replan request", "%v", err)
	}
	if err := checkText("dedupe_id", r.DedupeID, MaxDedupeIDLen, true); err != nil {
		return invalid("replan request", "%v", err)
	}
	if err := checkText("identity", r.Identity, MaxIdentityLen, true); err != nil {
		return invalid("replan request", "%v", err)
	}
	if len(r.Dims) > 16 {
		return invalid("replan request", "%d dims (at most 16)", len(r.Dims))
	}
	for d := range r.Dims {
		if err := checkText("dim name", d, 64, true); err != nil {
			return invalid("replan request", "%v", err)
		}
	}
	return nil
}

// Validate checks a: a valid job name and a known kind.
func (a Announcement) Validate() error {
	if err := ValidJob(a.Job); err != nil {
		return invalid("announcement", "%v", err)
	}
	switch a.Kind {
	case KindEpoch, KindReplan, KindAbort, KindGrant, KindCheckpoint, KindHold:
	default:
		return invalid("announcement", "unknown kind %q", a.Kind)
	}
	if err := checkText("reason", a.Reason, MaxReasonLen, false); err != nil {
		return invalid("announcement", "%v", err)
	}
	if len(a.Sig) > maxSigLen {
		return invalid("announcement", "signature of %d bytes", len(a.Sig))
	}
	return nil
}

// Validate checks r: a valid job name and identity, a step and a
// non-zero digest.
func (r CheckpointReport) Validate() error {
	if err := ValidJob(r.Job); err != nil {
		return invalid("checkpoint report", "%v", err)
	}
	if err := checkText("identity", r.Identity, MaxIdentityLen, true); err != nil {
		return invalid("checkpoint report", "%v", err)
	}
	if r.Step == 0 || r.Digest.IsZero() || r.Nanos < 0 {
		return invalid("checkpoint report", "rank %d: step %d, digest %s, %d ns", r.Rank, r.Step, r.Digest.Short(), r.Nanos)
	}
	return nil
}

// Validate checks r: a valid job name, identity and kind.
func (r RecoveryRequest) Validate() error {
	if err := ValidJob(r.Job); err != nil {
		return invalid("recovery request", "%v", err)
	}
	if err := checkText("identity", r.Identity, MaxIdentityLen, true); err != nil {
		return invalid("recovery request", "%v", err)
	}
	if err := checkText("detail", r.Detail, MaxReasonLen, false); err != nil {
		return invalid("recovery request", "%v", err)
	}
	switch r.Kind {
	case RecoverStateless, RecoverCorrupt, RecoverMismatch, RecoverStoreFull:
	default:
		return invalid("recovery request", "unknown kind %q", r.Kind)
	}
	return nil
}

type validator interface{ Validate() error }

// Encode returns the canonical CBOR encoding of v (RFC 8949 core
// deterministic encoding, via ir.CanonicalCBOR). If v has a Validate method
// it is called first and its error returned. Equal values encode to equal
// bytes, which Transport.Report relies on.
func Encode(v any) ([]byte, error) {
	if x, ok := v.(validator); ok {
		if err := x.Validate(); err != nil {
			return nil, err
		}
	}
	b, err := ir.CanonicalCBOR(v)
	if err != nil {
		return nil, fmt.Errorf("transport: encode %T: %w", v, err)
	}
	return b, nil
}

// Decode decodes strict CBOR (ir.UnmarshalCBOR: no unknown or duplicate
// fields, no indefinite lengths, no tags) into v, a pointer, and then
// validates the result if it has a Validate method.
func Decode(data []byte, v any) error {
	if err := ir.UnmarshalCBOR(data, v); err != nil {
		return fmt.Errorf("transport: decode %T: %w", v, err)
	}
	if x, ok := v.(validator); ok {
		return x.Validate()
	}
	return nil
}
