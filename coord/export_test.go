package coord

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"

	"github.com/tmmu/tmmu/coord/api"
)

// What the external tests (package coord_test, which run clusters from
// package coordtest) reach inside a node.

// NewTLSStream is newTLSStream.
var NewTLSStream = newTLSStream

// AppliedState is the state as applied, without waiting.
func (n *Node) AppliedState() (*api.State, uint64) { return n.applied() }

// RaftRefused counts the raft connections refused for want of a valid
// coordinator certificate.
func (n *Node) RaftRefused() float64 {
	var m dto.Metric
	n.metrics.raftRefused.Write(&m)
	return m.GetCounter().GetValue()
}

// SetSubmitWait changes how long the API waits for a submission's plan.
func (n *Node) SetSubmitWait(d time.Duration) { n.cfg.SubmitWait = d }

// Planning is the planner's semaphore: a send occupies a planning slot.
func (n *Node) Planning() chan struct{} { return n.planning }

// Model reads an IR from the node's store (or inline).
func (n *Node) Model(ctx context.Context, ref api.ModelRef) ([]byte, error) { return n.model(ctx, ref) }

// LogEntries returns the raft log entries the node stores.
func (n *Node) LogEntries() ([]raft.Log, error) {
	first, err := n.store.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := n.store.LastIndex()
	if err != nil {
		return nil, err
	}
	var out []raft.Log
	for k := first; k <= last && k > 0; k++ {
		var e raft.Log
		if n.store.GetLog(k, &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// SnapshotBytes is a snapshot of the node's state as raft would store it.
func (n *Node) SnapshotBytes() ([]byte, error) {
	fs, err := n.fsm.Snapshot()
	if err != nil {
		return nil, err
	}
	return fs.(*snapshot).encode()
}
