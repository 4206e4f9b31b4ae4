package api

import (
	"encoding/json"
	"time"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/replan"
)

// ReplanRequest is the body of POST /v1/jobs/{name}/replan: an operator
// asks for a new plan epoch. Every field but Reason is optional.
type ReplanRequest struct {
	ID          string                 `json:"id,omitempty"` // deduplicates retries (default: a new id)
	Reason      string                 `json:"reason"`
	ArenaConfig planner.ArenaConfig    `json:"arena_config,omitempty"`
	Strategy    planner.Strategy       `json:"strategy,omitempty"`
	Envelope    map[string]ir.DimRange `json:"envelope,omitempty"`
}

// ReplanReply answers an operator request.
type ReplanReply struct {
	Ack      string   `json:"ack"`                // accepted, duplicate, held, ...
	Decision string   `json:"decision"`           // none, replan, abort
	Epoch    uint64   `json:"epoch,omitempty"`    // the new epoch, for a replan
	Boundary uint64   `json:"boundary,omitempty"` // its first step
	Reasons  []string `json:"reasons,omitempty"`
}

// Absent is a rank whose etcd lease is gone, as the leader saw it.
type Absent struct {
	Rank     uint64    `json:"rank"`
	Identity string    `json:"identity,omitempty"`
	Since    time.Time `json:"since"`
}

// Peer is one coordinator: its raft id, raft address and HTTP address.
type Peer struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
}

// ModelRef is an epoch's IR: its canonical CBOR inline (entries committed
// before IRs moved out of the log), or the digest under which the IR
// store holds it.
type ModelRef struct {
	Inline []byte
	Digest ir.Hash
}

// SubmitRequest is the body of POST /v1/jobs.
type SubmitRequest struct {
	Name string `json:"name"`
	// IR is the global graph as a UML_Model_IR JSON object; or Model
	// names a generator with dynamic dimensions (shape replans need one).
	IR    json.RawMessage `json:"ir,omitempty"`
	Model *ModelSource    `json:"model,omitempty"`
	// ShardSpec is a shard spec JSON object (see package shard).
	ShardSpec    json.RawMessage     `json:"shard_spec"`
	ArenaConfig  planner.ArenaConfig `json:"arena_config,omitempty"`
	Mode         planner.Mode        `json:"mode,omitempty"`     // default: the graph's
	Strategy     planner.Strategy    `json:"strategy,omitempty"` // default packed
	Steps        uint64              `json:"steps"`
	ReplanPolicy replan.Policy       `json:"replan_policy,omitempty"` // default replan_at_safepoint
	ReplayToken  string              `json:"replay_token,omitempty"`  // 64 hex digits
	Window       uint64              `json:"window,omitempty"`        // default DefaultWindow
	Elastic      bool                `json:"elastic,omitempty"`
	DataMode     ir.DataMode         `json:"data_mode,omitempty"` // standard (default), confidential or regulated
	// CheckpointEvery is the checkpoint interval in steps (default
	// DefaultCheckpointEvery), CheckpointKeep how many checkpoints to keep
	// (default DefaultCheckpointKeep), Seed the job's seed.
	CheckpointEvery uint64 `json:"checkpoint_every,omitempty"`
	CheckpointKeep  uint64 `json:"checkpoint_keep,omitempty"`
	Seed            uint64 `json:"seed,omitempty"`
	// Data is what the job trains on (a stored dataset's name, or
	// file:// URLs with the digest and scan the submitter computed);
	// Weights its initial weights; Optimizer its optimizer (see JobSpec).
	Data      *DataSpec  `json:"data,omitempty"`
	Weights   *DataRef   `json:"weights,omitempty"`
	Optimizer *Optimizer `json:"optimizer,omitempty"`
}

// OpCoordinator names the coordinator in its failures.
const OpCoordinator = "tmmu.coordinator"

// PlanOptions returns the planner options of the job (rank, world size and
// shard spec hash are set per rank by package shard).
func (s *JobSpec) PlanOptions() planner.Options {
	return planner.Options{Mode: s.Mode, Strategy: s.Strategy, ReplayToken: s.ReplayToken, Arenas: s.ArenaConfig}
}

// Submission is the body of a 202 answer and of GET /v1/submissions/{name}
// while the submission is being planned.
type Submission struct {
	Name   string `json:"name"`
	Status string `json:"status"` // "planning"
}

// MaxSubmitBytes bounds a submission's body (413 past it): ten times the
// JSON IR of a Llama-2-70B-sized training graph (1.6 MB). The IR is
// still replicated in the raft log with the job, so the bound is also
// what one log entry may carry.
const MaxSubmitBytes = 16 << 20

// Status is GET /v1/status: the cluster as this node sees it.
type Status struct {
	ID           string       `json:"id"`
	State        string       `json:"state"` // Leader, Follower, Candidate, Shutdown
	Leader       string       `json:"leader"`
	LeaderHTTP   string       `json:"leader_http,omitempty"`
	Term         uint64       `json:"term"`
	AppliedIndex uint64       `json:"applied_index"`
	Voters       []Peer       `json:"voters"`
	Jobs         []JobSummary `json:"jobs"`
	// JobsFrom names the node whose applied state Jobs comes from (a
	// follower's may trail the leader's; Client.Status takes the jobs
	// from the leader).
	JobsFrom string `json:"jobs_from"`
}

// JobSummary is a job's line in status and job lists.
type JobSummary struct {
	Name           string    `json:"name"`
	Status         JobStatus `json:"status"`
	Reason         string    `json:"reason,omitempty"`
	Epoch          uint64    `json:"epoch"`
	Agreed         bool      `json:"agreed"`
	WorldSize      uint64    `json:"world_size"`
	LastStep       uint64    `json:"last_step"`
	Steps          uint64    `json:"steps"`
	GlobalPlanHash string    `json:"global_plan_hash"`
	Missing        []uint64  `json:"missing_ranks,omitempty"`
	// Absent are the ranks without an etcd lease, and since when this
	// node has seen them so (nodes given etcd only).
	Absent []Absent `json:"absent_ranks,omitempty"`
	// RankProblems are the job's etcd keys that claims skip because they
	// are malformed, each with why (rendezvous.Client.Survey): the
	// identity whose key it is cannot claim until an operator releases
	// it (tmmu rank release).
	RankProblems []string `json:"rank_problems,omitempty"`
	// Paused says why the job waits (a full checkpoint store).
	Paused string `json:"paused,omitempty"`
	// LastCheckpoint is the step of the newest committed checkpoint (0:
	// none), of Checkpoints kept.
	LastCheckpoint uint64 `json:"last_checkpoint"`
	Checkpoints    int    `json:"checkpoints"`
	// Loss is the ranks' mean training loss of the newest step they all
	// reported; Val their newest validation loss (jobs with validation
	// data).
	Loss *StepLoss `json:"loss,omitempty"`
	Val  *StepLoss `json:"val_loss,omitempty"`
}

// Release is the answer of DELETE /v1/jobs/{name}/ranks/{identity}: the
// identity's rank reservation in etcd is gone (or there was none), so
// the rank goes to the next identity that claims once no live worker
// holds it.
type Release struct {
	Job      string `json:"job"`
	Identity string `json:"identity"`
}

// CancelRequest is the body of POST /v1/jobs/{name}/cancel.
type CancelRequest struct {
	Reason string `json:"reason"`
}

// APIError is the body of every error response.
type APIError struct {
	Error       string            `json:"error"`
	FailureCode failure.Code      `json:"failure_code,omitempty"`
	Diagnostics map[string]string `json:"diagnostics,omitempty"`
	// Operator and Message are the failure's own fields, so that a client
	// rebuilds the typed error (see Client).
	Operator string `json:"failure_operator,omitempty"`
	Message  string `json:"message,omitempty"`
}
