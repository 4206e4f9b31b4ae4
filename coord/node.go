package coord

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/datastore"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/internal/logbridge"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/transport"
)

// Config configures a coordinator node.
type Config struct {
	ID       string
	RaftAddr string // host:port the raft TCP transport binds and advertises
	HTTPAddr string // host:port of this node's API (for redirects to the leader)
	DataDir  string // bolt log and stable store, snapshots
	// Bootstrap makes this node bootstrap a new cluster of Peers (all
	// voters, this node among them) when its store is empty; a node
	// restarted from its files ignores it.
	Bootstrap bool
	// Peers lists the cluster's nodes: the voters to bootstrap, and the
	// HTTP addresses this node redirects writes to. A node that joins an
	// existing cluster (Bootstrap false; a leader adds it with AddVoter)
	// lists the cluster's nodes too. Voters added later are known by
	// their recorded addresses.
	Peers []api.Peer
	// Fast shortens raft's timeouts for loopback clusters (tests, demo).
	Fast bool
	// APIToken, when set, is the bearer token every call of the HTTP API
	// but /livez, /readyz and /metrics requires: job submissions, replan
	// requests, voter changes, and reads of jobs, plans and status.
	APIToken string
	// ReadToken, when set, is a second token that the API's reads
	// accept (GET of jobs, IRs, plans and status), and nothing else: what
	// workers and dashboards hold.
	ReadToken string
	// RaftTLS, when set, secures the raft transport with mutual TLS.
	RaftTLS *RaftTLS
	// HTTPS says the nodes' APIs serve TLS: redirects to the leader are
	// https URLs.
	HTTPS bool
	// IRStore keeps the jobs' IRs (the object store bucket IRBucket);
	// nil until SetIRStore, once NATS is up.
	IRStore checkpoint.Store
	// SubmitWait is how long a submission waits for its plan before the
	// API answers 202 (default DefaultSubmitWait).
	SubmitWait time.Duration
	// DataCacheBytes bounds the cache of dataset blocks the node keeps
	// to serve the workers' range reads (default DefaultDataCacheBytes).
	DataCacheBytes int
	Logger         *slog.Logger
}

// DefaultDataCacheBytes is a node's default cache of dataset blocks.
const DefaultDataCacheBytes = 256 << 20

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("coord: id is empty"))
	}
	if _, _, err := net.SplitHostPort(c.RaftAddr); err != nil {
		errs = append(errs, fmt.Errorf("coord: raft address %q: %w", c.RaftAddr, err))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("coord: data dir is empty"))
	}
	if c.Bootstrap {
		found := false
		for _, p := range c.Peers {
			found = found || p.ID == c.ID
		}
		if !found {
			errs = append(errs, fmt.Errorf("coord: bootstrap peers do not include this node %q", c.ID))
		}
	}
	return errors.Join(errs...)
}

// fsm adapts State to raft.FSM. Readers share view, a copy of the state
// that no command changes: each command replaces it with one that shares
// every job but the command's (copy on write), so a read costs no copy
// and a commit copies one job.
type fsm struct {
	mu    sync.Mutex // serializes Apply and Restore
	state *api.State
	view  atomic.Pointer[view]
	// onApply, if set, is called after each applied command (outside
	// the lock) so the node can react to commits.
	onApply func(*api.Command, api.Result)
}

// view is the state as applied up to index: read-only.
type view struct {
	state *api.State
	index uint64
}

// publish replaces the view after a command on job (every job when job
// is "": a restore).
func (f *fsm) publish(job string, index uint64) {
	old := f.view.Load()
	if old == nil || job == "" {
		f.view.Store(&view{state: f.state.Clone(), index: index})
		return
	}
	s := &api.State{Jobs: maps.Clone(old.state.Jobs), Peers: maps.Clone(f.state.Peers), Deleted: maps.Clone(f.state.Deleted)}
	if s.Jobs == nil {
		s.Jobs = map[string]*api.Job{}
	}
	if j := f.state.Jobs[job]; j != nil {
		s.Jobs[job] = j.Clone()
	} else {
		delete(s.Jobs, job)
	}
	f.view.Store(&view{state: s, index: index})
}

func (f *fsm) Apply(l *raft.Log) any {
	var c api.Command
	if err := ir.UnmarshalCBOR(l.Data, &c); err != nil {
		return api.Result{Err: fmt.Errorf("coord: undecodable command at index %d: %w", l.Index, err)}
	}
	f.mu.Lock()
	r := f.state.Apply(&c)
	f.publish(c.Job, l.Index)
	f.mu.Unlock()
	if f.onApply != nil {
		f.onApply(&c, r)
	}
	return r
}

// Snapshot takes the current view, which no command changes; Persist
// encodes it, on raft's snapshot goroutine, while commands go on
// applying.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &snapshot{state: f.view.Load().state}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	var s api.State
	if err := ir.UnmarshalCBOR(b, &s); err != nil {
		return fmt.Errorf("coord: restoring a snapshot: %w", err)
	}
	if s.Jobs == nil {
		s.Jobs = map[string]*api.Job{}
	}
	if len(s.Peers) == 0 {
		s.Peers = nil
	}
	f.mu.Lock()
	f.state = &s
	f.publish("", f.view.Load().index)
	f.mu.Unlock()
	return nil
}

// snapshot is a copy of the state that no command changes.
type snapshot struct{ state *api.State }

// encode returns the snapshot as raft stores it: canonical CBOR.
func (s *snapshot) encode() ([]byte, error) { return ir.CanonicalCBOR(s.state) }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	b, err := s.encode()
	if err == nil {
		_, err = sink.Write(b)
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// Node is one coordinator: a raft member with the job state machine.
type Node struct {
	cfg   Config
	log   *slog.Logger
	fsm   *fsm
	raft  *raft.Raft
	trans *raft.NetworkTransport
	store *raftboltdb.BoltStore
	peers map[string]api.Peer // by raft id

	commits chan struct{} // signalled (non-blocking) after every applied command
	metrics *metrics
	// replans carries replan events to the agreement loop, recovers the
	// ranks' recovery requests.
	replans  chan replanEvent
	recovers chan transport.RecoveryRequest
	// absent is, on the leader, each live job's ranks without a lease.
	absentMu sync.Mutex
	absent   map[string][]api.Absent
	problems map[string][]string // the malformed rendezvous keys per job
	// rv is the leader loop's rendezvous client (nil without etcd), for
	// DELETE /v1/jobs/{name}/ranks/{identity}.
	rv atomic.Pointer[rendezvous.Client]
	// token is the bearer token every call needs, readToken a token
	// reads accept too ("" for none).
	token, readToken atomic.Pointer[string]
	// caughtUpTerm is the term in which this node, as leader, last
	// applied everything committed before it took over (see State).
	caughtUpTerm atomic.Uint64
	// irStore keeps the jobs' IRs (IRBucket), irCache the recent ones.
	irStore atomic.Pointer[checkpoint.Store]
	irCache irCache
	// dataStore keeps datasets and weights (datastore.Bucket), ckptStore
	// the checkpoints the API serves (tmmu job export).
	dataStore, ckptStore atomic.Pointer[checkpoint.Store]
	// dataReader serves the workers' range reads of stored datasets and
	// weights through one cache of blocks (DataCacheBytes).
	dataReader atomic.Pointer[datastore.Reader]
	// subs are the submissions being planned or recently answered, by
	// job name (leader only); planning holds a slot while one is planned.
	subMu    sync.Mutex
	subs     map[string]*submission
	planning chan struct{}
}

// Open starts a node from cfg, restoring its state from DataDir when it
// has one.
func Open(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("coord: %w", err)
	}
	n := &Node{cfg: cfg, log: log.With("node", cfg.ID), peers: map[string]api.Peer{}, commits: make(chan struct{}, 1), replans: make(chan replanEvent, 256), recovers: make(chan transport.RecoveryRequest, 256),
		subs: map[string]*submission{}, planning: make(chan struct{}, MaxPlanning)}
	if cfg.IRStore != nil {
		n.SetIRStore(cfg.IRStore)
	}
	for _, p := range cfg.Peers {
		n.peers[p.ID] = p
	}
	n.fsm = &fsm{state: &api.State{Jobs: map[string]*api.Job{}}, onApply: func(*api.Command, api.Result) {
		select {
		case n.commits <- struct{}{}:
		default:
		}
	}}
	n.fsm.publish("", 0)
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	// raft's own records (elections, leadership, replication trouble) go
	// to the node's log.
	rc.Logger = logbridge.Hclog(n.log, "raft", hclog.Info)
	if cfg.Fast {
		rc.HeartbeatTimeout = 300 * time.Millisecond
		rc.ElectionTimeout = 300 * time.Millisecond
		rc.LeaderLeaseTimeout = 150 * time.Millisecond
		rc.CommitTimeout = 5 * time.Millisecond
	}
	store, err := raftboltdb.NewBoltStore(filepath.Join(cfg.DataDir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("coord: bolt store: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, logbridge.Hclog(n.log, "raft-snapshots", hclog.Info))
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("coord: snapshot store: %w", err)
	}
	addr, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("coord: %w", err)
	}
	var trans *raft.NetworkTransport
	if cfg.RaftTLS != nil {
		var stream *tlsStream
		refused := func(from net.Addr, err error) {
			cause, refused := handshakeCause(err)
			if m := n.metrics; m != nil {
				m.raftHandshake.WithLabelValues(cause).Inc()
				if refused {
					m.raftRefused.Inc()
				}
			}
			if refused {
				n.log.Warn("refused a raft connection: no valid coordinator certificate", "from", from, "cause", cause, "err", err)
			} else {
				n.log.Info("a raft connection's handshake did not complete", "from", from, "cause", cause, "err", err)
			}
		}
		if stream, err = newTLSStream(cfg.RaftAddr, addr, cfg.RaftTLS, refused); err == nil {
			trans = raft.NewNetworkTransportWithLogger(stream, 3, 2*time.Second, logbridge.Hclog(n.log, "raft-net", hclog.Warn))
		}
	} else {
		trans, err = raft.NewTCPTransportWithLogger(cfg.RaftAddr, addr, 3, 2*time.Second, logbridge.Hclog(n.log, "raft-net", hclog.Warn))
	}
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("coord: raft transport: %w", err)
	}
	if cfg.Bootstrap {
		has, err := raft.HasExistingState(store, store, snaps)
		if err != nil {
			trans.Close()
			store.Close()
			return nil, fmt.Errorf("coord: %w", err)
		}
		if !has {
			var servers []raft.Server
			for _, p := range cfg.Peers {
				servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
			}
			if err := raft.BootstrapCluster(rc, store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
				trans.Close()
				store.Close()
				return nil, fmt.Errorf("coord: bootstrap: %w", err)
			}
		}
	}
	r, err := raft.NewRaft(rc, n.fsm, store, store, snaps, trans)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, fmt.Errorf("coord: %w", err)
	}
	n.raft, n.trans, n.store = r, trans, store
	n.metrics = newMetrics(n)
	n.SetAPIToken(cfg.APIToken)
	n.SetReadToken(cfg.ReadToken)
	return n, nil
}

// SetAPIToken sets the bearer token the API's calls require ("" for
// none).
func (n *Node) SetAPIToken(tok string) { n.token.Store(&tok) }

// SetReadToken sets the token the API's reads accept beside the API
// token ("" for none).
func (n *Node) SetReadToken(tok string) { n.readToken.Store(&tok) }

// ID returns the node's raft id.
func (n *Node) ID() string { return n.cfg.ID }

// Raft exposes the raft instance (membership changes, stats).
func (n *Node) Raft() *raft.Raft { return n.raft }

// IsLeader reports whether this node is the leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the leader's id and HTTP address as this node knows them
// ("" when there is none).
func (n *Node) Leader() (id, httpAddr string) {
	_, lid := n.raft.LeaderWithID()
	id = string(lid)
	return id, n.httpAddr(id)
}

// httpAddr returns a voter's HTTP address: from the configuration, or as
// recorded when it was added.
func (n *Node) httpAddr(id string) string {
	if p, ok := n.peers[id]; ok {
		return p.HTTPAddr
	}
	s, _ := n.applied()
	return s.Peers[id].HTTPAddr
}

// peerID is what a node id may be: it names the node in raft, in the
// cluster's status and in its data directory.
var peerID = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// CheckPeer refuses a voter that could not serve: an id that is not
// 1 to 64 of A-Z a-z 0-9 _ . -, an address that is not host:port with a
// port from 1 to 65535 (raft_addr required, http_addr optional), or a
// raft address where nothing accepts a TCP connection within probe.
// The cluster needs a majority of its voters; a voter that cannot
// answer is one failure closer to a cluster that stops.
func CheckPeer(p api.Peer, probe time.Duration) error {
	bad := func(format string, args ...any) error {
		return failure.New(failure.InvalidOptions, api.OpCoordinator, fmt.Sprintf("voter: "+format, args...))
	}
	if !peerID.MatchString(p.ID) {
		return bad("id %q: use 1 to 64 of A-Z a-z 0-9 _ . -", p.ID)
	}
	for _, a := range []struct{ field, addr string }{{"raft_addr", p.RaftAddr}, {"http_addr", p.HTTPAddr}} {
		if a.addr == "" && a.field == "http_addr" {
			continue
		}
		host, port, err := net.SplitHostPort(a.addr)
		if err != nil {
			return bad("%s %q: want host:port (%v)", a.field, a.addr, err)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || host == "" {
			return bad("%s %q: want a host and a port from 1 to 65535", a.field, a.addr)
		}
	}
	c, err := net.DialTimeout("tcp", p.RaftAddr, probe)
	if err != nil {
		return bad("raft_addr %s does not answer (%v): start the node (without --bootstrap) before adding it", p.RaftAddr, err)
	}
	c.Close()
	return nil
}

// AddVoter adds p to the cluster as a voter (leader only) and records its
// HTTP address. p's node must be running, started without bootstrap.
func (n *Node) AddVoter(p api.Peer, timeout time.Duration) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if p.ID == "" || p.RaftAddr == "" {
		return fmt.Errorf("coord: a voter needs an id and a raft address")
	}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	for _, sv := range cf.Configuration().Servers {
		if string(sv.ID) == p.ID && string(sv.Address) != p.RaftAddr {
			return failure.New(failure.InvalidOptions, api.OpCoordinator,
				fmt.Sprintf("voter %s is at %s, not %s: remove it before adding it at another address", p.ID, sv.Address, p.RaftAddr))
		}
	}
	if err := n.raft.AddVoter(raft.ServerID(p.ID), raft.ServerAddress(p.RaftAddr), 0, timeout).Error(); err != nil {
		return fmt.Errorf("coord: adding voter %s: %w", p.ID, leaderLost(err))
	}
	_, err := n.Apply(&api.Command{Kind: api.CmdPeer, Peer: &p}, timeout)
	return err
}

// RemoveVoter removes a voter (leader only; removing the leader itself
// makes it step down).
func (n *Node) RemoveVoter(id string, timeout time.Duration) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if _, err := n.Apply(&api.Command{Kind: api.CmdPeer, Peer: &api.Peer{ID: id}, Remove: true}, timeout); err != nil {
		return err
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, timeout).Error(); err != nil {
		return fmt.Errorf("coord: removing voter %s: %w", id, leaderLost(err))
	}
	return nil
}

// State returns a copy of the replicated state as applied on this node.
// On a leader that has not yet applied every entry committed before its
// term (a leader applies its predecessor's last entries only after its own
// first commit), it first waits for that, up to a second: a new leader
// never answers with less than the old one committed.
func (n *Node) State() (*api.State, uint64) {
	if n.IsLeader() {
		term := n.raft.CurrentTerm()
		if n.caughtUpTerm.Load() != term && n.raft.Barrier(time.Second).Error() == nil {
			n.caughtUpTerm.Store(term)
		}
	}
	return n.applied()
}

// applied returns the state as applied, without waiting. It is shared
// and read-only: clone what you change (Job.Clone).
func (n *Node) applied() (*api.State, uint64) {
	v := n.fsm.view.Load()
	return v.state, v.index
}

// Commits is signalled after commands are applied on this node.
func (n *Node) Commits() <-chan struct{} { return n.commits }

// ErrNotLeader is returned by Apply on a follower.
var ErrNotLeader = errors.New("coord: not the leader")

// Apply replicates c and returns its result once committed and applied
// here. It fails with ErrNotLeader on a follower; a caller that gets a
// timeout or a lost leadership may retry, since commands are idempotent.
func (n *Node) Apply(c *api.Command, timeout time.Duration) (api.Result, error) {
	if !n.IsLeader() {
		return api.Result{}, ErrNotLeader
	}
	b, err := ir.CanonicalCBOR(c)
	if err != nil {
		return api.Result{}, err
	}
	f := n.raft.Apply(b, timeout)
	if err := f.Error(); err != nil {
		return api.Result{}, leaderLost(err)
	}
	r, _ := f.Response().(api.Result)
	return r, r.Err
}

// leaderLost makes a raft error that says this node is not (or no longer)
// the leader an ErrNotLeader, which callers retry on the leader.
func leaderLost(err error) error {
	if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	}
	return err
}

// Barrier waits until every committed entry is applied here (leader only).
func (n *Node) Barrier(timeout time.Duration) error { return n.raft.Barrier(timeout).Error() }

// Shutdown stops the node without handing leadership over.
func (n *Node) Shutdown() error {
	err := n.raft.Shutdown().Error()
	// Close the pooled outbound connections too: the peers' goroutines
	// serving them end only when they close.
	n.trans.CloseStreams()
	n.trans.Close()
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// TransferAndShutdown hands leadership to another voter first when this
// node leads (what a coordinator does on SIGTERM), then shuts down.
func (n *Node) TransferAndShutdown() error {
	if n.IsLeader() {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.log.Warn("leadership transfer failed", "err", err)
		}
	}
	return n.Shutdown()
}

// WaitLeader waits until the cluster has a leader known to this node.
func (n *Node) WaitLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if id, _ := n.Leader(); id != "" {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("coord: no leader after %s", timeout)
}
