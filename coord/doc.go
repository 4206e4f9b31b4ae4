// Package coord is tmmu's coordinator: a raft-replicated state machine of
// jobs and plan epochs, the HTTP API operators and workers use, and the
// leader's side of the agreement protocol.
//
// # State
//
// State holds every job: its spec (the global IR as canonical CBOR, the
// resolved shard spec, arena config, mode, strategy, replay token, replan
// policy, steps), its epochs — each with every rank's expected plan hash,
// the global plan hash, the step it starts at, why it exists, and, once
// committed, the agreement Outcome — its status (agreeing, running, done,
// failed) and the highest step every rank finished. Commands (submit,
// outcome, progress, epoch, fail, peer) are idempotent and keyed by job
// and epoch: a command applied twice leaves the state as applied once, a
// conflicting one (another plan for an existing epoch) is refused, and
// the first outcome of an epoch stands. State.Apply is pure; Node feeds
// it raft's committed log.
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
// (POST /v1/jobs/{name}/replan) into decisions with package replan; for an
// elastic job that lost ranks it fences the boundary instead at the first
// step a lost rank never reported ready (Command.Fence), which the live
// ranks cannot have passed; when lost ranks come back it grows the world
// again at the usual boundary.
//
// # HTTP
//
// Handler serves /v1/jobs, /v1/jobs/{name}, /v1/jobs/{name}/ir,
// /v1/status, /v1/voters, /livez, /readyz and /metrics; Client calls it
// with retries across nodes. Cluster runs several nodes on loopback for
// tests and tmmu demo.
package coord
