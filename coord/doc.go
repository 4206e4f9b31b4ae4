// Package coord is tmmu's coordinator: a raft-replicated state machine of
// jobs and plan epochs, the HTTP API operators and workers use, and the
// leader's side of the agreement protocol.
//
// The state machine, the wire types and the HTTP client live in package
// coord/api, which depends on neither raft nor bolt: workers and tools
// import it, not this package.
//
// # State
//
// api.State holds every job: its spec (the global IR as canonical CBOR, the
// resolved shard spec, arena config, mode, strategy, replay token, replan
// policy, steps), its epochs — each with every rank's expected plan hash,
// the global plan hash, the step it starts at, why it exists, and, once
// committed, the agreement Outcome — its status (agreeing, running, done,
// failed, cancelled), the highest step every rank finished, its committed
// checkpoints (the last Spec.Keep(): step, epoch, world, every rank's
// object digest and state hash), the checkpoints dropped as corrupt, and
// why it is paused, if it is. Commands (submit, outcome, progress, epoch,
// fail, peer, checkpoint, pause, cancel, delete) are idempotent and keyed
// by job and epoch: a command applied twice leaves the state as applied
// once, a conflicting one (another plan for an existing epoch) is
// refused, a refused command changes nothing, and the first outcome of an
// epoch stands. A job is done once its last step and the checkpoint of
// its last step are committed. api.State.Apply is pure; Node feeds it raft's
// committed log.
//
// # Node
//
// A Node is a raft member (hashicorp/raft over TCP, raft-boltdb log and
// stable stores, file snapshots of the state in canonical CBOR). Open
// bootstraps a new cluster from Config.Peers or restarts from DataDir.
// Writes go through the leader (Apply; ErrNotLeader elsewhere); a new
// leader first applies its predecessor's commits before it answers reads.
// AddVoter and RemoveVoter change membership; TransferAndShutdown hands
// leadership over before stopping.
//
// # Agreement
//
// PrepareSubmit plans every rank of a submitted job (package shard) so the
// submit command carries the expected plan hashes. RunAgreement, on the
// leader, tallies the workers' plan reports for each agreeing epoch
// (package transport), commits the outcome and publishes it, and commits
// progress from the ranks' recorded steps. Workers run a step only under
// an epoch committed as agreed (package worker).
//
// # Replans
//
// Epochs after the first carry what changed (a regenerated IR, arena
// config, strategy, envelope, or a smaller world for an elastic job) and
// a boundary step. Ranks may run at most the job's window of steps past
// the committed progress (Job.Horizon), and Apply puts every new epoch's
// boundary past that horizon, so no rank can have started it under the
// old epoch. The leader turns worker envelope exits and operator requests
// (POST /v1/jobs/{name}/replan) into decisions with package replan. An
// elastic job whose ranks' leases are gone for Leading.ShrinkAfter rolls
// back to its last checkpoint on the ranks left (the lost ranks' shards
// exist only there; each survivor restores them recut); when lost ranks
// come back the world grows again at the usual boundary, from the
// checkpoint the old world writes just before it (Epoch.Restore).
//
// # Checkpoints and rollbacks
//
// The leader tallies the ranks' checkpoint reports (package transport)
// with recovery.Tally and commits a checkpoint once every rank of the
// world of the epoch that ran its step reported it; it then deletes the
// stored objects no kept checkpoint needs (recovery.Garbage). It decides
// the ranks' recovery requests with recovery.Decide: a rank that holds no
// state for its next step (a restarted process) makes it commit a
// rollback epoch — same plan, Restore{Step: the last checkpoint,
// Rollback: true} — after which every rank restores that checkpoint and
// runs the steps after it again, and the progress of the abandoned
// timeline no longer counts (Job.Timeline); a corrupt object drops its
// checkpoint and rolls back to the one before, in one command; a restored
// state that does not match fails the job; a full store pauses it until
// the shard is stored.
//
// # Trust
//
// The leader counts a worker's report only from the identity that holds
// the rank it names: a plan report only if its identity held the rank's
// etcd claim at the revision the report names (ClaimChecker,
// rendezvous.Client.HeldAt), or is the epoch's member of the rank in an
// elastic world, and one identity stands for one rank; the outcome
// records those holders (Outcome.Holders), and progress, checkpoint,
// recovery and replan reports count only from the epoch's holder of their
// rank (Job.HolderOf). Everything else is dropped, logged and counted in
// tmmu_forged_reports_total{kind}. The leader's NATS transport signs the
// outcomes and announcements it publishes (transport.WithSigner), with
// the job's Incarnation. RaftTLS puts the raft transport behind mutual
// TLS, so a node without a coordinator's certificate cannot vote or
// append; the API serves TLS with Config.HTTPS. Every API call but
// /livez, /readyz and /metrics needs the API token; reads also take the
// read token.
//
// # Inputs
//
// A submission's body is bounded (MaxSubmitBytes, 413 past it), its
// numeric fields and IR size too (Max*: 400 INVALID_OPTIONS naming the
// field). The leader plans it off the request path, MaxPlanning at a time
// and MaxQueued at most (503 past that); the API answers within
// Config.SubmitWait or with 202 and /v1/submissions/{name}. The IR goes
// to the IR store (IRBucket, the JetStream object store) under its
// SHA-256, and the raft log and snapshots hold only that digest.
//
// # HTTP
//
// Handler serves /v1/jobs, /v1/jobs/{name} (GET, DELETE; 410 once
// deleted), /v1/jobs/{name}/ir, /v1/jobs/{name}/cancel, /v1/status (with
// each job's ranks that hold no lease, and since when), /v1/voters,
// /livez, /readyz and /metrics; api.Client calls it with retries across
// nodes, and retries a not-found that a node without a leader answered.
// Package coordtest runs several nodes on loopback for tests and tmmu
// demo.
package coord
