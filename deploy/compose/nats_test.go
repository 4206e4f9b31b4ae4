// Package compose holds the docker-compose cluster's files; its tests
// check the NATS configuration the cluster runs with.
package compose

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/internal/natstest"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/transport"
	"github.com/tmmu/tmmu/trust"
)

// secretsPaths is how many files nats.conf reads from /secrets, where the
// compose file mounts them: the certificate, its key and the CA.
const secretsPaths = 3

// config writes a cluster's credentials to a temporary directory, as
// `make secrets` does (coordinator c1, workers w0 and w1), and this
// folder's nats.conf next to the auth.conf written there, its /secrets
// paths pointing into that directory. It returns the layout and the
// config file.
func config(t *testing.T) (trust.Layout, string) {
	t.Helper()
	l := trust.Layout{Dir: t.TempDir()}
	plan := trust.Plan{Coordinators: []string{"c1"}, Workers: []string{"w0", "w1"}}
	if _, err := trust.Generate(l.Dir, plan, transport.NATSAuthorizationOf); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile("nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(conf), `"/secrets/`); n != secretsPaths {
		t.Fatalf("nats.conf names %d files under /secrets, want %d (the certificate, its key, the CA)", n, secretsPaths)
	}
	file := filepath.Join(filepath.Dir(l.NATSAuth()), "nats.conf")
	conf = []byte(strings.ReplaceAll(string(conf), `"/secrets/`, `"`+l.Dir+"/"))
	if err := os.WriteFile(file, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	return l, file
}

// startNATS runs nats.conf in process with the credentials of config, on
// free loopback ports and a temporary store.
func startNATS(t *testing.T) (trust.Layout, *server.Server) {
	t.Helper()
	l, file := config(t)
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	o.Host, o.Port, o.HTTPPort, o.StoreDir, o.NoLog, o.NoSigs = "127.0.0.1", -1, -1, t.TempDir(), true, true
	return l, natstest.Start(t, o)
}

// A client is what a connection presents: TLS with these files (none
// when nil; no certificate when Cert is empty) and an nkey seed file
// (none when empty).
type client struct {
	tls  *trust.TLSFiles
	nkey string
}

// identity is what a daemon of (role, id) presents with l's files.
func identity(l trust.Layout, role, id string) client {
	files := l.TLS(role, id)
	return client{tls: &files, nkey: l.Nkey(role, id)}
}

// connect connects to s as c; permission errors go to the returned
// channel.
func connect(t *testing.T, s *server.Server, c client) (*nats.Conn, chan error, error) {
	t.Helper()
	errs := make(chan error, 64)
	opts := []nats.Option{nats.NoReconnect(), nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		})}
	if c.tls != nil {
		cfg, err := c.tls.Client(trust.RoleNATS)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, nats.Secure(cfg))
	}
	if c.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, o)
	}
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, errs, err
}

// TestAuthentication: the cluster's NATS serves only TLS clients with a
// certificate of the cluster's CA that sign in with a known nkey; a
// worker with both connects.
func TestAuthentication(t *testing.T) {
	l, s := startNATS(t)
	// Credentials of another cluster: a CA, certificates and nkeys the
	// server never saw.
	other := trust.Layout{Dir: t.TempDir()}
	if _, err := trust.Generate(other.Dir, trust.Plan{Workers: []string{"w0"}}, nil); err != nil {
		t.Fatal(err)
	}
	w0 := identity(l, trust.RoleWorker, "w0")
	noCert := trust.TLSFiles{CA: l.CACert()}
	otherCert := other.TLS(trust.RoleWorker, "w0")
	otherCert.CA = l.CACert()
	for _, c := range []struct {
		name string
		c    client
	}{
		{"TLS without a client certificate, a worker's nkey", client{tls: &noCert, nkey: w0.nkey}},
		{"a worker's certificate, no nkey", client{tls: w0.tls}},
		{"a worker's certificate, another cluster's nkey", client{tls: w0.tls, nkey: other.Nkey(trust.RoleWorker, "w0")}},
		{"another cluster's certificate, a worker's nkey", client{tls: &otherCert, nkey: w0.nkey}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := connect(t, s, c.c); err == nil {
				t.Fatal("connected, want refused")
			}
		})
	}
	if _, _, err := connect(t, s, w0); err != nil {
		t.Fatalf("a worker with its certificate and nkey: %v", err)
	}
	// A client that speaks plain NATS (nats.go would upgrade to TLS
	// itself) gets no answer: the server wants a TLS handshake.
	conn, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("INFO %q, %v: want tls_required", info, err)
	}
	if _, err := conn.Write([]byte("CONNECT {\"verbose\":false}\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	if answer, _ := io.ReadAll(r); bytes.Contains(answer, []byte("PONG")) {
		t.Fatalf("a plain client got %q", answer)
	}
}

// TestWorkerScope: once a coordinator created the buckets, a worker opens
// them (it may create none), stores its own plan report, step report and
// checkpoint shard, and the coordinator reads them; the server refuses it
// another identity's keys and publishing an outcome or an announcement,
// which only coordinators may.
func TestWorkerScope(t *testing.T) {
	l, s := startNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cnc, _, err := connect(t, s, identity(l, trust.RoleCoordinator, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	coordT, err := transport.New(cnc) // creates the buckets
	if err != nil {
		t.Fatal(err)
	}
	cstore, err := checkpoint.NewNATSStore(ctx, coordT.JetStream(), checkpoint.NATSConfig{}) // and the object store
	if err != nil {
		t.Fatal(err)
	}
	wnc, werrs, err := connect(t, s, identity(l, trust.RoleWorker, "w0"))
	if err != nil {
		t.Fatal(err)
	}
	workerT, err := transport.New(wnc, transport.OpenOnly(), transport.WithIdentity("w0"), transport.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("a worker opening the buckets: %v", err)
	}

	h := ir.Hash{1}
	if err := workerT.Report(ctx, transport.PlanReport{Job: "j", Epoch: 0, Rank: 0, Identity: "w0", PlanHash: h}); err != nil {
		t.Fatalf("a worker storing its plan report: %v", err)
	}
	if err := workerT.PutStep(ctx, transport.StepReport{Job: "j", Epoch: 0, Rank: 0, Step: 1, PlanHash: h, Identity: "w0"}); err != nil {
		t.Fatalf("a worker storing its step report: %v", err)
	}
	wstore, err := checkpoint.NewNATSStore(ctx, workerT.JetStream(), checkpoint.NATSConfig{})
	if err != nil {
		t.Fatalf("a worker opening the checkpoint store: %v", err)
	}
	name := checkpoint.ObjectName("j", 10, 0, ir.Hash{7})
	if err := wstore.Put(ctx, name, []byte("shard")); err != nil {
		t.Fatalf("a worker storing a checkpoint shard: %v", err)
	}
	if reps, err := coordT.Reports(ctx, "j", 0); err != nil || len(reps) != 1 || reps[0].Identity != "w0" {
		t.Fatalf("the coordinator reading the plan reports: %+v, %v; want w0's", reps, err)
	}
	if steps, err := coordT.Steps(ctx, "j", 0); err != nil || len(steps) != 1 || steps[0].Step != 1 {
		t.Fatalf("the coordinator reading the step reports: %+v, %v", steps, err)
	}
	if data, err := cstore.Get(ctx, name); err != nil || string(data) != "shard" {
		t.Fatalf("the coordinator reading the shard: %q, %v", data, err)
	}

	// Writes the server refuses: keys of w1, written around the
	// transport's own identity check, and buckets of its own.
	js, err := jetstream.New(wnc)
	if err != nil {
		t.Fatal(err)
	}
	tok := transport.IdentityToken("w1")
	forged, err := transport.Encode(transport.PlanReport{Job: "j", Epoch: 0, Rank: 1, Identity: "w1", PlanHash: h})
	if err != nil {
		t.Fatal(err)
	}
	// A refused request gets no answer: each waits a second.
	refused := func(what string, f func(context.Context) error) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		if err := f(rctx); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	for _, k := range []struct{ bucket, key string }{
		{transport.Bucket, "j.0.1." + tok}, {transport.StepsBucket, "j.0.1." + tok}, {transport.ProgressBucket, "j." + tok},
	} {
		kv, err := js.KeyValue(ctx, k.bucket)
		if err != nil {
			t.Fatal(err)
		}
		refused("a worker writing w1's key "+k.key+" in "+k.bucket, func(c context.Context) error {
			_, err := kv.Put(c, k.key, forged)
			return err
		})
	}
	refused("a worker creating a bucket", func(c context.Context) error {
		_, err := js.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "w0_bucket"})
		return err
	})
	if reps, err := coordT.Reports(ctx, "j", 0); err != nil || len(reps) != 1 {
		t.Fatalf("plan reports after the forgeries: %+v, %v; want w0's only", reps, err)
	}

	// Decisions published by a worker reach no subscriber: the server
	// refuses each with a permissions violation, and delivers the
	// coordinator's.
	got := make(chan string, 8)
	for _, subj := range []string{"tmmu.j.outcome", "tmmu.j.announce"} {
		sub, err := cnc.Subscribe(subj, func(m *nats.Msg) { got <- m.Subject + " " + string(m.Data) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := cnc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"tmmu.j.outcome", "tmmu.j.announce"} {
		if err := wnc.Publish(subj, []byte("worker")); err != nil {
			t.Fatal(err)
		}
	}
	if err := wnc.Flush(); err != nil {
		t.Fatal(err)
	}
	for violations := 0; violations < 2; {
		select {
		case err := <-werrs:
			if strings.Contains(err.Error(), "Permissions Violation") {
				violations++
			}
		case <-ctx.Done():
			t.Fatalf("%d permissions violations for the worker's outcome and announcement, want 2", violations)
		}
	}
	if err := cnc.Publish("tmmu.j.outcome", []byte("coordinator")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "tmmu.j.outcome coordinator" {
			t.Fatalf("delivered %q, want only the coordinator's outcome", m)
		}
	case <-ctx.Done():
		t.Fatal("the coordinator's outcome did not arrive")
	}
}

// TestMonitoringOnLoopback: the monitoring port (connz lists every user
// and address) listens on the container's loopback only, where the
// healthcheck asks it; clients need TLS with a certificate, and every
// user is an nkey from auth.conf (no passwords).
func TestMonitoringOnLoopback(t *testing.T) {
	_, file := config(t)
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if o.HTTPHost != "127.0.0.1" || o.HTTPPort != 8222 {
		t.Errorf("monitoring on %s:%d, want 127.0.0.1:8222", o.HTTPHost, o.HTTPPort)
	}
	if o.HTTPSPort != 0 {
		t.Errorf("monitoring over https on port %d, want none", o.HTTPSPort)
	}
	if o.TLSConfig == nil || o.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("client TLS %v: want TLS that requires and verifies client certificates", o.TLSConfig != nil)
	}
	if len(o.Users) != 0 || o.Username != "" || o.Authorization != "" {
		t.Errorf("%d password users, user %q, token set %v: want nkeys only", len(o.Users), o.Username, o.Authorization != "")
	}
	if len(o.Nkeys) != 3 {
		t.Errorf("%d nkey users, want 3 (c1, w0, w1)", len(o.Nkeys))
	}
}
