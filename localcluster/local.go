// Package localcluster runs a whole tmmu cluster in one process: an
// embedded NATS server with JetStream, an embedded etcd server and a raft
// coordinator cluster on loopback (each node with its HTTP API and the
// leader's agreement loop), to which workers connect as they would to a
// real one. tmmu demo and the integration tests use it; nothing in it is a
// mock.
//
// By default the cluster is secured as a deployment is (package trust):
// credentials are generated under Dir/secrets at start; NATS, etcd, raft
// and the coordinators' API speak TLS with client certificates where a
// deployment's do; every identity connects to NATS with its own nkey and
// the permissions transport.WorkerPermissions or CoordinatorPermissions
// give it (worker identities are added as they first connect); the
// coordinators sign their decisions and workers verify them; the API
// needs its tokens. Options.Insecure runs it without any of that.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	etcdtls "go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/tmmu/tmmu/coord"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/coord/coordtest"
	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/transport"
	"github.com/tmmu/tmmu/trust"
	"github.com/tmmu/tmmu/worker"
)

// Options configure a local cluster.
type Options struct {
	Dir          string // data of etcd, NATS and the coordinators
	Coordinators int    // default 3
	Logger       *slog.Logger
	// ShrinkAfter is the coordinators' coord.Leading.ShrinkAfter (0:
	// its default).
	ShrinkAfter time.Duration
	// Insecure runs the cluster without TLS, NATS identities, signed
	// decisions or API tokens.
	Insecure bool
}

// Local is a running local cluster.
type Local struct {
	NATS         *natsserver.Server
	NATSURL      string
	Etcd         *embed.Etcd
	EtcdEndpoint string
	Coord        *coordtest.Cluster

	// Secrets are the generated credentials (a secured cluster).
	Secrets trust.Layout

	log         *slog.Logger
	shrinkAfter time.Duration
	secure      bool
	apiToken    string
	readToken   string
	signer      *trust.Signer
	verifier    *trust.Verifier
	// natsOpts is a copy of the options the server runs with, to add
	// identities (reload). The server keeps the pointer it is given and
	// its goroutines read through it, so it is always given a copy of
	// its own, never &natsOpts.
	natsOpts natsserver.Options
	mu       sync.Mutex
	agree    []context.CancelFunc // per coordinator: its agreement loop
	agreeW   sync.WaitGroup
	conns    []*nats.Conn
	users    map[string]bool // NATS identities the server knows
	// api is the HTTP transport of the clients of the coordinators' API.
	api     http.RoundTripper
	apiOnce sync.Once
	// connecting is held while a connection authenticates and while the
	// server reloads its users: nats-server closes a client that is
	// half way through connecting when its users are reloaded.
	connecting sync.Mutex
}

// admin is the coordinator identity of the connections the cluster opens
// for itself and its callers (Transport, Rendezvous, Client).
const admin = "admin"

// Start starts NATS, etcd and the coordinators, and waits for a leader.
//
// Ports are picked free and bound a moment later, so another process can
// take one in between: a start that fails on an address in use is
// retried (three times at most) in fresh directories.
func Start(o Options) (*Local, error) {
	var err error
	for try := range 3 {
		oo := o
		if try > 0 {
			oo.Dir = filepath.Join(o.Dir, fmt.Sprint("retry", try))
		}
		var l *Local
		if l, err = start(oo); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return l, err
		}
	}
	return nil, err
}

func start(o Options) (l *Local, err error) {
	if o.Coordinators == 0 {
		o.Coordinators = 3
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	started := &Local{log: log, shrinkAfter: o.ShrinkAfter, secure: !o.Insecure, users: map[string]bool{}}
	l = started
	defer func() {
		if err != nil {
			started.Close() // l is nil by now
		}
	}()
	l.natsOpts = natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(o.Dir, "nats"), NoLog: true, NoSigs: true}
	if l.secure {
		if err := l.secrets(filepath.Join(o.Dir, "secrets"), o.Coordinators); err != nil {
			return nil, err
		}
	}
	nopts := l.natsOpts
	ns, err := natsserver.NewServer(&nopts)
	if err != nil {
		return nil, fmt.Errorf("localcluster: nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("localcluster: nats not ready after 10s")
	}
	l.NATS, l.NATSURL = ns, ns.ClientURL()

	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(o.Dir, "etcd")
	curl, purl := freeURL(), freeURL()
	if curl.Host == "" || purl.Host == "" {
		return nil, errors.New("localcluster: no free port")
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	cfg.InitialCluster = cfg.Name + "=" + purl.String()
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if l.secure {
		// Clients need a certificate of the cluster's CA.
		curl.Scheme = "https"
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
		cfg.ClientTLSInfo = etcdtls.TLSInfo{CertFile: l.Secrets.Cert(trust.RoleEtcd, trust.RoleEtcd), KeyFile: l.Secrets.Key(trust.RoleEtcd, trust.RoleEtcd),
			TrustedCAFile: l.Secrets.CACert(), ClientCertAuth: true}
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("localcluster: etcd: %w", err)
	}
	l.Etcd = e
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return nil, fmt.Errorf("localcluster: etcd: %w", err)
	case <-time.After(20 * time.Second):
		return nil, errors.New("localcluster: etcd not ready after 20s")
	}
	l.EtcdEndpoint = curl.String()

	co := coordtest.ClusterOptions{Logger: log}
	if l.secure {
		if co, err = l.coordOptions(log); err != nil {
			return nil, err
		}
	}
	c, err := coordtest.StartClusterWith(filepath.Join(o.Dir, "coord"), o.Coordinators, co)
	if err != nil {
		return nil, err
	}
	l.Coord = c
	l.agree = make([]context.CancelFunc, o.Coordinators)
	for i := range o.Coordinators {
		if err := l.startAgreement(i); err != nil {
			return nil, err
		}
	}
	if _, err := c.Leader(20 * time.Second); err != nil {
		return nil, err
	}
	return l, nil
}

func freeURL() url.URL {
	a, err := coordtest.FreeAddr()
	if err != nil {
		return url.URL{}
	}
	return url.URL{Scheme: "http", Host: a}
}

// startAgreement runs coordinator i's agreement loop on its own NATS
// connection (as coordinator c<i>, signing its decisions).
func (l *Local) startAgreement(i int) error {
	var opts []transport.Option
	if l.signer != nil {
		opts = append(opts, transport.WithSigner(l.signer))
	}
	nc, t, err := l.connect(trust.RoleCoordinator, fmt.Sprintf("c%d", i), opts...)
	if err != nil {
		return err
	}
	rv, ec, err := l.Rendezvous(rendezvous.DefaultTTL)
	if err != nil {
		nc.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.mu.Lock()
	l.agree[i] = func() { cancel(); nc.Close(); ec.Close() }
	l.mu.Unlock()
	node := l.Coord.Nodes[i]
	l.agreeW.Add(1)
	go func() {
		defer l.agreeW.Done()
		node.RunAgreement(ctx, coord.Leading{Transport: t, Rendezvous: rv, ShrinkAfter: l.shrinkAfter})
	}()
	return nil
}

// StopCoordinator stops coordinator i without a leadership transfer.
func (l *Local) StopCoordinator(i int) error {
	l.mu.Lock()
	stop := l.agree[i]
	l.agree[i] = nil
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	return l.Coord.Stop(i)
}

// RestartCoordinator starts coordinator i again from its bolt files.
func (l *Local) RestartCoordinator(i int) error {
	if err := l.Coord.Start(i); err != nil {
		return err
	}
	return l.startAgreement(i)
}

// Client returns an HTTP client for the coordinators, with the API token
// (an operator's).
func (l *Local) Client() *api.Client { return l.client(l.apiToken) }

// APIToken returns the coordinators' API token ("" when insecure).
func (l *Local) APIToken() string { return l.apiToken }

// ReadToken returns the coordinators' read token ("" when insecure).
func (l *Local) ReadToken() string { return l.readToken }

// CAFile returns the file of the cluster's CA certificate ("" when
// insecure).
func (l *Local) CAFile() string {
	if !l.secure {
		return ""
	}
	return l.Secrets.CACert()
}

// ReadClient returns an HTTP client for the coordinators with the read
// token only (a worker's).
func (l *Local) ReadClient() *api.Client { return l.client(l.readToken) }

func (l *Local) client(token string) *api.Client {
	c := api.NewClient(l.Coord.URLs()...)
	c.Token = token
	if l.secure {
		// One transport for every client: its connections (and their
		// TLS sessions) are kept and reused.
		l.apiOnce.Do(func() { l.api, _ = cli.CoordinatorTransport(trust.TLSFiles{CA: l.Secrets.CACert()}) })
		if l.api != nil {
			c.HTTP.Transport = l.api
		}
	}
	return c
}

// Transport opens a NATS connection with the coordinators' permissions
// and a transport on it (for tests, benchmarks and the demo's view of the
// cluster); closing the cluster closes the connection too.
func (l *Local) Transport() (*nats.Conn, *transport.Transport, error) {
	return l.connect(trust.RoleCoordinator, admin)
}

// WorkerTransport opens a NATS connection as worker identity (its own
// nkey and certificate, WorkerPermissions), with a transport bound to it
// that verifies the coordinators' signatures, as cmd/worker's.
func (l *Local) WorkerTransport(identity string) (*nats.Conn, *transport.Transport, error) {
	opts := []transport.Option{transport.WithIdentity(identity)}
	if l.secure {
		opts = append(opts, transport.OpenOnly(), transport.WithVerifier(l.verifier))
	}
	return l.connect(trust.RoleWorker, identity, opts...)
}

// NATSOptions returns the connect options of identity (role, id): its
// certificate and nkey (none in an insecure cluster). A worker identity
// is created and added to the NATS server if it is new. Connect with them
// while holding nothing else of the cluster's: see connect.
func (l *Local) NATSOptions(role, id string) ([]nats.Option, error) {
	if !l.secure {
		return nil, nil
	}
	seed, err := l.identity(role, id)
	if err != nil {
		return nil, err
	}
	cfg, err := l.Secrets.TLS(role, id).Client(trust.RoleNATS)
	if err != nil {
		return nil, err
	}
	o, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		return nil, err
	}
	return []nats.Option{nats.Secure(cfg), o}, nil
}

// connect opens a NATS connection as (role, id) and a transport on it.
func (l *Local) connect(role, id string, opts ...transport.Option) (*nats.Conn, *transport.Transport, error) {
	l.connecting.Lock()
	defer l.connecting.Unlock()
	copts, err := l.NATSOptions(role, id)
	if err != nil {
		return nil, nil, err
	}
	copts = append(copts, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	nc, err := nats.Connect(l.NATSURL, copts...)
	if err != nil {
		return nil, nil, err
	}
	t, err := transport.New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	l.mu.Lock()
	l.conns = append(l.conns, nc)
	l.mu.Unlock()
	return nc, t, nil
}

// EtcdClient returns a new etcd client (the caller closes it).
func (l *Local) EtcdClient() (*clientv3.Client, error) {
	if !l.secure {
		return rendezvous.Dial([]string{l.EtcdEndpoint}, nil, nil)
	}
	cfg, err := l.Secrets.TLS(trust.RoleCoordinator, admin).Client(trust.RoleEtcd)
	if err != nil {
		return nil, err
	}
	return rendezvous.Dial([]string{l.EtcdEndpoint}, cfg, nil)
}

// Rendezvous returns a rendezvous client on a new etcd client with the
// given lease TTL (seconds); close the etcd client when done.
func (l *Local) Rendezvous(ttl int64) (*rendezvous.Client, *clientv3.Client, error) {
	cli, err := l.EtcdClient()
	if err != nil {
		return nil, nil, err
	}
	return rendezvous.New(cli, "/tmmu", ttl), cli, nil
}

// Close stops everything.
func (l *Local) Close() error {
	l.mu.Lock()
	for i, stop := range l.agree {
		if stop != nil {
			stop()
			l.agree[i] = nil
		}
	}
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	l.agreeW.Wait()
	var errs []error
	if l.Coord != nil {
		errs = append(errs, l.Coord.Close())
	}
	for _, nc := range conns {
		nc.Close()
	}
	if l.Etcd != nil {
		l.Etcd.Close()
	}
	if l.NATS != nil {
		l.NATS.Shutdown()
		l.NATS.WaitForShutdown()
	}
	return errors.Join(errs...)
}

// RunWorker runs a worker against the cluster on its own NATS, etcd and
// HTTP clients (closed when it returns): cfg's Coordinator, Transport and
// Rendezvous are filled in, with rank leases of leaseTTL seconds.
func (l *Local) RunWorker(ctx context.Context, cfg worker.Config, leaseTTL int64) (worker.Result, error) {
	nc, tr, err := l.WorkerTransport(cfg.Identity)
	if err != nil {
		return worker.Result{}, err
	}
	defer nc.Close()
	rv, cli, err := l.Rendezvous(leaseTTL)
	if err != nil {
		return worker.Result{}, err
	}
	defer cli.Close()
	cfg.Coordinator, cfg.Transport, cfg.Rendezvous = l.ReadClient(), tr, rv
	return worker.Run(ctx, cfg)
}
