package coordtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/tmmu/tmmu/coord"
	"github.com/tmmu/tmmu/coord/api"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/internal/freeport"
)

// Cluster runs several coordinator nodes in one process on loopback, each
// with its HTTP API: for tests and tmmu demo. Real clusters run one
// cmd/coordinator per machine.
type Cluster struct {
	Nodes   []*coord.Node
	Peers   []api.Peer
	dir     string
	servers []*http.Server
	fast    bool
	log     *slog.Logger
	opts    ClusterOptions
	irs     checkpoint.Store
	// bootstrapped counts the nodes of the initial configuration;
	// nodes after them were started by Grow to be added as voters.
	bootstrapped int
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, never the same one twice in a process, and below the kernel's
// ephemeral range where it says which that is (see internal/freeport):
// no listener on port 0 nor outgoing connection is given it, so a node
// stopped and started again finds its port free.
func FreeAddr() (string, error) { return freeport.Addr() }

// ClusterOptions configure StartClusterWith.
type ClusterOptions struct {
	Logger *slog.Logger
	// Configure, if set, changes node i's config before it opens
	// (raft TLS, tokens, an IR store).
	Configure func(i int, c *coord.Config)
	// HTTPTLS, if set, makes node i's API serve TLS with this config.
	HTTPTLS func(i int) *tls.Config
}

// StartCluster bootstraps n nodes with data under dir.
func StartCluster(dir string, n int, log *slog.Logger) (*Cluster, error) {
	return StartClusterWith(dir, n, ClusterOptions{Logger: log})
}

// StartClusterWith bootstraps n nodes with data under dir, as o says.
// Unless o.Configure sets one, the nodes share an IR store in dir/ir.
func StartClusterWith(dir string, n int, o ClusterOptions) (*Cluster, error) {
	irs, err := checkpoint.NewDirStore(filepath.Join(dir, "ir"))
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, fast: true, log: o.Logger, opts: o, irs: irs, Nodes: make([]*coord.Node, n), servers: make([]*http.Server, n), bootstrapped: n}
	for i := range n {
		ra, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		ha, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		c.Peers = append(c.Peers, api.Peer{ID: fmt.Sprintf("c%d", i), RaftAddr: ra, HTTPAddr: ha})
	}
	for i := range n {
		if err := c.Start(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Start (re)starts node i from its data directory.
func (c *Cluster) Start(i int) error {
	p := c.Peers[i]
	boot := i < c.bootstrapped
	peers := c.Peers[:c.bootstrapped]
	if !boot {
		// A joining node knows the cluster's addresses (for redirects)
		// but does not bootstrap it.
		peers = slices.Concat(peers, []api.Peer{p})
	}
	cfg := coord.Config{ID: p.ID, RaftAddr: p.RaftAddr, HTTPAddr: p.HTTPAddr, DataDir: filepath.Join(c.dir, p.ID),
		Bootstrap: boot, Peers: peers, Fast: c.fast, Logger: c.log, IRStore: c.irs}
	if c.opts.Configure != nil {
		c.opts.Configure(i, &cfg)
	}
	node, err := coord.Open(cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", p.HTTPAddr)
	if err != nil {
		node.Shutdown()
		return err
	}
	if c.opts.HTTPTLS != nil {
		l = tls.NewListener(l, c.opts.HTTPTLS(i))
	}
	srv := &http.Server{Handler: node.Handler(), ReadHeaderTimeout: 5 * time.Second, ErrorLog: httpLog(c.log)}
	go srv.Serve(l)
	c.Nodes[i], c.servers[i] = node, srv
	return nil
}

// httpLog is an HTTP server's error log (failed TLS handshakes, among
// others) as debug records of log.
func httpLog(log *slog.Logger) *stdlog.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelDebug)
}

// Grow starts one more node, without bootstrap, and returns its index: it
// serves once a leader adds it as a voter (Node.AddVoter, POST /v1/voters).
func (c *Cluster) Grow() (int, error) {
	ra, err := FreeAddr()
	if err != nil {
		return -1, err
	}
	ha, err := FreeAddr()
	if err != nil {
		return -1, err
	}
	i := len(c.Nodes)
	c.Peers = append(c.Peers, api.Peer{ID: fmt.Sprintf("c%d", i), RaftAddr: ra, HTTPAddr: ha})
	c.Nodes = append(c.Nodes, nil)
	c.servers = append(c.servers, nil)
	return i, c.Start(i)
}

// Stop shuts node i down without a leadership transfer (a crash, as far as
// the others can tell) and stops its HTTP server.
func (c *Cluster) Stop(i int) error {
	if c.Nodes[i] == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c.servers[i].Shutdown(ctx)
	c.servers[i].Close() // connections Shutdown leaves open (new ones, for 5 s)
	err := c.Nodes[i].Shutdown()
	c.Nodes[i], c.servers[i] = nil, nil
	return err
}

// CloseHTTP closes node i's HTTP server (for a node shut down by other
// means, such as Node.TransferAndShutdown).
func (c *Cluster) CloseHTTP(i int) {
	if c.servers[i] != nil {
		c.servers[i].Close()
	}
}

// Leader waits for a leader among the running nodes and returns its index.
func (c *Cluster) Leader(timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for i, n := range c.Nodes {
			if n != nil && n.IsLeader() {
				return i, nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return -1, errors.New("coord: no leader elected")
}

// ApplyOnLeader applies c on whichever node leads, again on the next
// leader when leadership moves before it commits (commands are
// idempotent), until timeout. It returns the node that committed it.
func (c *Cluster) ApplyOnLeader(cmd *api.Command, timeout time.Duration) (int, api.Result, error) {
	deadline := time.Now().Add(timeout)
	for {
		li, err := c.Leader(time.Until(deadline))
		if err != nil {
			return -1, api.Result{}, err
		}
		r, err := c.Nodes[li].Apply(cmd, time.Until(deadline))
		if !errors.Is(err, coord.ErrNotLeader) || time.Now().After(deadline) {
			return li, r, err
		}
	}
}

// URLs returns the HTTP base URLs of all nodes (https with HTTPTLS).
func (c *Cluster) URLs() []string {
	scheme := "http://"
	if c.opts.HTTPTLS != nil {
		scheme = "https://"
	}
	var out []string
	for _, p := range c.Peers {
		out = append(out, scheme+p.HTTPAddr)
	}
	return out
}

// Close stops every node.
func (c *Cluster) Close() error {
	var errs []error
	for i := range c.Nodes {
		errs = append(errs, c.Stop(i))
	}
	return errors.Join(errs...)
}
