// Package transport carries tmmu's plan-agreement protocol over NATS: the
// messages, their subjects, the JetStream key-value buckets where workers
// prove their plan hashes, report the steps they are ready to run and
// record the steps they finished, and the pure Tally the coordinator
// leader runs on the proofs.
//
// # The problem
//
// A raft-replicated coordinator commits, for each job J and plan epoch e,
// the plan hash H[e,r] every rank r must run (a 32-byte SHA-256, ir.Hash).
// One worker per rank computes its own plan deterministically. Before it
// runs a step of epoch e, every worker must have proved that it holds
// exactly H[e,r], and the coordinator must have said so.
//
// # Subjects and buckets
//
// Job names are 1 to MaxJobLen characters from [A-Za-z0-9_-] (ValidJob),
// so a job is one NATS subject token and one KV key token.
//
//	tmmu.<job>.outcome          leader  -> workers  Outcome, signed        (OutcomeSubject)
//	tmmu.<job>.replan.<token>   workers -> leader   ReplanRequest          (ReplanSubject)
//	tmmu.<job>.recover.<token>  workers -> leader   RecoveryRequest        (RecoverSubject)
//	tmmu.<job>.announce         leader  -> workers  Announcement, signed   (AnnounceSubject)
//
//	KV tmmu_agree    (Bucket)            <job>.<epoch>.<rank>.<token>         PlanReport, created once
//	KV tmmu_steps    (StepsBucket)       <job>.<epoch>.<rank>.<token>         StepReport, the latest
//	KV tmmu_progress (ProgressBucket)    <job>.<token>                        StepDone, the latest
//	KV tmmu_coll     (CollectiveBucket)  <job>.<key>.<rank>.<part>.<token>    collective data, 10 minutes
//	KV tmmu_ckpt     (CheckpointBucket)  <job>.<step>.<epoch>.<rank>.<token>  CheckpointReport
//
// Epoch and rank are written in decimal without leading zeros; <token> is
// the IdentityToken of the worker identity that wrote the key or sent the
// request (24 hex digits of its SHA-256). The buckets keep one revision
// per key (history 1); New creates them if absent (OpenOnly: waits for
// them instead, for a worker's credentials), on file storage by default
// (WithStorage picks memory), with MaxValueSize-byte values, and
// otherwise uses them as configured.
//
// # Trust
//
// A report can come only from the identity its key names: each worker
// identity has its own NATS user whose permissions (WorkerPermissions,
// rendered into nats-server's configuration by NATSAuthorization) let it
// write only the keys and request subjects that end in its own token, and
// manage no stream (nothing can be republished, mirrored or sourced into
// the coordinators' subjects). Which identity counts for a rank is the
// coordinators' decision: a plan report only from the identity that held
// the rank's etcd claim at the revision it names (ClaimRevision), one
// rank per identity (Tally), and the committed Outcome names those
// holders; step, progress and checkpoint reports and collective
// contributions count only from them. Outcomes and announcements carry
// the coordinators' ed25519 signature over their canonical CBOR
// (WithSigner) and the job's Incarnation; a subscriber WithVerifier drops
// and counts (Rejected) anything unsigned or wrongly signed.
//
// The subjects are core NATS: at-most-once, no persistence. What they carry
// is either committed by raft already (outcomes, announcements, which a
// worker that missed them reads back from the coordinators) or repeated by
// the sender (envelope exits are reported again at the next step). The
// buckets are JetStream: durable, so a watcher that starts late, a
// replacement worker or a new leader, sees the same state as everyone else.
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
//	PlanReport    {job, epoch, rank, identity, plan_hash, claim_revision?}
//	Outcome       {job, epoch, agreed, start_step, mismatches?, missing?, reason?, holders?, incarnation?, sig?}
//	  Mismatch    {rank, expected, got}
//	StepReport    {job, epoch, rank, step, plan_hash, identity, claim_revision?}
//	StepDone      {job, epoch, rank, step, nanos, identity, claim_revision?}
//	ReplanRequest {job, epoch, rank, step, reason, dedupe_id, dims?, identity, claim_revision?}
//	Announcement  {job, epoch, kind: "epoch"|"replan"|"abort"|"grant"|"checkpoint"|"hold", start_step, reason?, incarnation?, sig?}
//	CheckpointReport {job, step, epoch, rank, identity, digest, state_hash, bytes, nanos, claim_revision?}
//	RecoveryRequest  {job, kind: "stateless"|"corrupt"|"mismatch"|"store_full", epoch, rank, identity, step, detail?, claim_revision?}
//
// Each type has a Validate method; Encode refuses, and Decode reports, a
// value that fails it. Subscribers drop (and count, see Transport.Dropped)
// messages that do not decode, do not validate, or name another job than
// their subject.
//
// # Protocol
//
//  1. The leader commits H[e,·] for job J through raft and announces the
//     epoch. It opens WatchReports(J, e) and feeds every report whose
//     identity held its rank's claim into NewTally(J, e, H[e,·]).
//  2. Each worker computes its plan and calls Report(PlanReport{J, e, r,
//     identity, hash, claim revision}). The KV Create makes the first
//     report of an identity for (J, e, r) the only one: retrying the
//     byte-identical report (or the same hash under a later claim of the
//     rank) is a no-op (a lost ack is safe to retry), while another hash
//     fails with ErrConflict and leaves the stored one in place. The
//     Tally applies the same rule to what it is fed: the first report per
//     rank stands, one identity stands for one rank, duplicates,
//     conflicting reports, other jobs' and other epochs' reports and
//     out-of-range ranks are ignored, so its Outcome is a function of the
//     stored reports, not of repetition.
//  3. When the Tally is Done, the leader commits its Outcome through raft
//     and publishes it. Agreed means every rank reported exactly its
//     expected hash; otherwise Mismatches lists (rank, expected, got).
//  4. If agreed, each worker, before running step s, stores its
//     StepReport{J, e, r, s, hash} (PutStep) and waits until WatchSteps
//     shows every rank ready for s or a later step with its expected hash.
//     After the step it records StepDone (PutProgress); the leader watches
//     WatchProgress, commits the highest step every rank finished, and
//     announces a grant: how far ranks may run.
//  5. A worker that sees a dynamic dimension outside its epoch's envelope
//     publishes a ReplanRequest with the sizes; the leader decides (package
//     replan), commits epoch e+1 with its boundary step and announces it.
//     An abort is announced the same way.
//  6. Once an epoch is superseded, Forget(J, e) purges its proofs from the
//     bucket with one filtered stream purge.
//
// # Faults
//
// The watches ride through NATS restarts: on a reconnection they reopen
// from the revision after the last one delivered (the client's ordered
// consumer alone would notice only after two missed 5-second
// heartbeats). Group.Exchange retries storing a contribution until its
// context ends and waits for every rank with no timeout unless given one:
// a worker cancels a step that a rollback abandons. Retried operations
// are idempotent (KV puts of the same value, creates that accept the
// identical value).
//
// # Concurrency
//
// Transport is safe for concurrent use; subscription handlers run on the
// NATS client's per-subscription goroutine. WatchReports owns one
// goroutine, which returns (after stopping the watch and draining it)
// before the returned channel closes (so do WatchSteps and WatchProgress).
// A Tally is not safe for concurrent use: it is meant to be owned by one
// goroutine, the one reading the reports.
package transport
