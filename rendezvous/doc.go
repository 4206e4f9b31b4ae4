// Package rendezvous assigns ranks to the worker processes of a tmmu job
// through etcd.
//
// A tmmu job has a fixed world size W and runs exactly one worker process per
// rank 0..W-1. Workers do not know their rank in advance: each one starts with
// a stable identity (for example a pod name or a host:slot string) and calls
// [Client.Claim], which hands out ranks so that
//
//   - every live worker of a job holds a distinct rank;
//   - a worker that restarts with the same identity gets its old rank back,
//     so the deterministic plan it computed (or loads) stays valid;
//   - a rank whose worker died stays reserved for that identity until an
//     operator explicitly gives it away with [Client.Forget].
//
// # Keys
//
// With the default prefix "/tmmu", a job "j" uses two families of keys:
//
//	/tmmu/jobs/j/ranks/<rank>          = <identity>  (attached to the claim's lease)
//	/tmmu/jobs/j/identities/<identity> = <rank>      (decimal, no lease)
//
// The rank key is the liveness record: it is written with the claim's lease
// and disappears when that lease is revoked ([Claim.Release]) or expires
// (the worker died, hung, or lost its connection to etcd for longer than the
// TTL). The identity key is the reservation: it has no lease and survives the
// worker, so a restarted worker with the same identity is given the same rank.
//
// A rank is therefore in one of three states, as reported by
// [Client.Members] and [Client.Missing]:
//
//   - present: its rank key exists (a worker with a live lease holds it);
//   - reserved but missing: an identity key points at it but its rank key is
//     gone (the worker released its claim or its lease expired);
//   - free: no identity reserves it and no rank key exists.
//
// Missing returns every rank that is not present, that is both the reserved
// but missing ranks and the free ones.
//
// # Claiming
//
// Claim first grants a lease (TTL in seconds, default 10) and starts keeping
// it alive, then reads the whole job (ranks and identities) at one etcd
// revision and:
//
//  1. If the identity already has a reservation, it writes the rank key again
//     with the new lease and rewrites the identity key, in a transaction that
//     compares the identity key's ModRevision (and the rank key's revision)
//     with what it read. This is how a restarted worker resumes its rank. It
//     also covers a second Claim by an identity whose first claim is still
//     live: the second claim gets the same rank with a fresh lease, the rank
//     key is overwritten so it now belongs to the new lease, and the older
//     [Claim] is stale. Releasing the stale claim revokes only its own lease,
//     which no longer carries any key. Use [Claim.Revision] as a fencing token:
//     the later claim always has the higher revision.
//  2. Otherwise it picks the lowest rank that is free (neither present nor
//     reserved) and creates both keys in a transaction that requires the rank
//     key and the identity key not to exist (CreateRevision == 0) and no
//     reservation of the job to have changed since the read. If the
//     transaction fails because another worker won the race, Claim reads the
//     job again and retries.
//  3. If no rank is free, Claim fails with [ErrJobFull].
//
// Reservations are sticky on purpose. When a worker's claim is released or
// its lease expires, its rank shows up as missing, but a NEW identity does not
// get that rank: as long as every rank is either present or reserved, Claim
// returns [ErrJobFull] to new identities. Only the same identity can fill the
// hole. This keeps a briefly disconnected worker from being replaced behind
// its back by a spare that happened to start at the same moment. To replace a
// worker for good, an operator (or a controller) calls [Client.Forget] with
// the old identity; the rank then becomes free as soon as its rank key is gone
// (immediately if the old worker is already dead, otherwise when its lease
// ends). Forget never deletes a live rank key, so two workers never hold the
// same rank at the same time through this package.
//
// If an identity's reservation points at a rank whose rank key is held by a
// different identity, the state in etcd is inconsistent (it cannot arise from
// this package alone); Claim refuses with [ErrBadReservation] naming both
// identities. A key that is not what this package writes (a rank key that
// is not a number, an identity key that holds no rank number or a rank
// another identity reserved first) is skipped by every reader and listed
// by [Client.Survey]: it blocks no one but the identity whose key it is,
// whose Claim fails with [ErrBadReservation] until the key is removed
// ([Client.Forget]).
//
// # Lease lifetime
//
// The lease of a claim is kept alive in the background until the first of:
// [Claim.Release]; cancellation or expiry of the context passed to Claim
// (pass a context that lives as long as the worker, not a short request
// timeout); loss of the lease (it expired or was revoked on the server, or
// the keepalive stream stopped, for example because the etcd client was
// closed). In every case [Claim.Lost] is closed. A worker that sees Lost
// closed must assume it no longer holds its rank and stop using it; it may
// call Claim again with the same identity to get the same rank back under a
// new lease.
//
// Job names and identities must be non-empty and must not contain '/'. All
// errors returned by this package are prefixed "rendezvous: " and wrap their
// cause, so errors.Is works with [ErrJobFull], [ErrInvalidArgument], context
// errors and etcd errors.
package rendezvous
