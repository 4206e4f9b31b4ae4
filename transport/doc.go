// Package transport carries tmmu's plan-agreement protocol over NATS: the
// messages, their subjects, a JetStream key-value bucket where workers prove
// their plan hashes, and the pure bookkeeping (Tally, StepBarrier) the
// coordinator and the workers run on what they receive.
//
// # The problem
//
// A raft-replicated coordinator commits, for each job J and plan epoch e,
// the plan hash H[e,r] every rank r must run (a 32-byte SHA-256, ir.Hash).
// One worker per rank computes its own plan deterministically. Before it
// runs a step of epoch e, every worker must have proved that it holds
// exactly H[e,r], and the coordinator must have said so.
//
// # Subjects and the bucket
//
// Job names are 1 to MaxJobLen characters from [A-Za-z0-9_-] (ValidJob),
// so a job is one NATS subject token and one KV key token.
//
//	tmmu.<job>.outcome    leader  -> workers  Outcome        (OutcomeSubject)
//	tmmu.<job>.step       workers -> all      StepReport     (StepSubject)
//	tmmu.<job>.done       workers -> leader   StepDone       (DoneSubject)
//	tmmu.<job>.replan     workers -> leader   ReplanRequest  (ReplanSubject)
//	tmmu.<job>.announce   leader  -> workers  Announcement   (AnnounceSubject)
//
//	KV bucket tmmu_agree (Bucket), key <job>.<epoch>.<rank>  PlanReport
//
// Epoch and rank are written in decimal without leading zeros. The bucket
// keeps one revision per key (history 1); New creates it if absent, on file
// storage by default (WithStorage picks memory), with MaxValueSize-byte
// values, and otherwise uses the existing bucket as configured.
//
// The subjects are core NATS: at-most-once, no persistence. The bucket is
// JetStream: durable and, through the KV Create operation, write-once per
// key. Only the plan proof needs that; everything else is either committed
// by raft already (outcomes, announcements: the leader republishes them
// until it sees progress, and receivers treat repeats as no-ops) or cheap to
// resend (step reports, which the barrier deduplicates).
//
// # Schemas
//
// Every message is a CBOR map with snake_case text keys, encoded in RFC 8949
// core deterministic form (Encode, via ir.CanonicalCBOR) so that equal
// values are equal bytes, and decoded strictly (Decode, via
// ir.UnmarshalCBOR: unknown or duplicate keys, indefinite lengths and tags
// are rejected), then validated. Hashes are 32-byte byte strings in CBOR and
// 64 hex digits in JSON. Empty lists and empty optional strings are omitted.
//
//	PlanReport    {job, epoch, rank, identity, plan_hash}
//	Outcome       {job, epoch, agreed, start_step, mismatches?, missing?, reason?}
//	  Mismatch    {rank, expected, got}
//	StepReport    {job, epoch, rank, step, plan_hash}
//	StepDone      {job, epoch, rank, step, nanos}
//	ReplanRequest {job, epoch, rank, step, reason, dedupe_id}
//	Announcement  {job, epoch, kind: "epoch"|"replan"|"abort", start_step, reason?}
//
// Each type has a Validate method; Encode refuses, and Decode reports, a
// value that fails it. Subscribers drop (and count, see Transport.Dropped)
// messages that do not decode, do not validate, or name another job than
// their subject.
//
// # Protocol
//
//  1. The leader commits H[e,·] for job J through raft and publishes an
//     Announcement{Kind: "epoch", Epoch: e}. It opens WatchReports(J, e)
//     and feeds every report into NewTally(J, e, H[e,·]).
//  2. Each worker computes its plan and calls Report(PlanReport{J, e, r,
//     identity, hash}). The KV Create makes the first report for (J, e, r)
//     the only one: retrying the byte-identical report is a no-op (a lost
//     ack is safe to retry), while any different report (another hash, or
//     the same hash from another identity) fails with ErrConflict and
//     leaves the stored one in place. The Tally applies the same rule to
//     what it is fed: the first report per rank stands, duplicates,
//     conflicting reports, other jobs' and other epochs' reports and
//     out-of-range ranks are ignored, so its Outcome is a function of the
//     set of stored reports, not of delivery order or repetition.
//  3. When the Tally is Done, or a deadline passes, the leader commits the
//     Tally's Outcome (with StartStep set) through raft and publishes it.
//     Agreed means every rank reported exactly its expected hash; otherwise
//     Mismatches lists (rank, expected, got) and Missing the silent ranks.
//     A worker that did not see the outcome reads the committed one again
//     (the leader republishes); Reports(J, e) recovers the stored proofs,
//     e.g. after a leader change.
//  4. If agreed, each worker, before running step s >= StartStep,
//     publishes StepReport{J, e, r, s, hash} and waits until its
//     StepBarrier (fed from tmmu.<J>.step) is Ready(s): every rank has
//     reported step s with its expected hash. The barrier is pure, so every
//     participant that sees the same reports reaches the same decision; a
//     rank that sees no progress resends its own report (duplicates are
//     ignored). After the step it publishes StepDone, and Forget(s) bounds
//     the barrier's memory.
//  5. A worker that cannot go on (out of memory, a new shape) publishes a
//     ReplanRequest with a DedupeID; the leader acts at most once per
//     DedupeID, announces Kind "replan", and starts again at 1 with epoch
//     e+1. Kind "abort" stops the job. Workers ignore announcements for
//     epochs older than the one they run.
//  6. Once an epoch is superseded, Forget(J, e) purges its reports from the
//     bucket with one filtered stream purge.
//
// # Concurrency
//
// Transport is safe for concurrent use; subscription handlers run on the
// NATS client's per-subscription goroutine. WatchReports owns one
// goroutine, which returns (after stopping the watch and draining it)
// before the returned channel closes. Tally and StepBarrier are not safe
// for concurrent use: they are meant to be owned by one goroutine, the one
// reading the reports.
package transport
