package trust

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A pki writes a CA and the leaves it issues to a directory.
type pki struct {
	t   *testing.T
	dir string
	ca  *CA
}

// newPKI returns a pki with a fresh CA written to its directory.
func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{t: t, dir: t.TempDir(), ca: newCA(t)}
	p.write("ca.crt", p.ca.CertPEM())
	return p
}

// write writes data to name in p's directory and returns its path.
func (p *pki) write(name string, data []byte) string {
	p.t.Helper()
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, data, 0o600); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// files issues a leaf for (role, id), writes it and returns its TLSFiles.
func (p *pki) files(role, id string, hosts ...string) TLSFiles {
	p.t.Helper()
	leaf, err := p.ca.Issue(role, id, hosts, day)
	if err != nil {
		p.t.Fatal(err)
	}
	return TLSFiles{
		CA:   filepath.Join(p.dir, "ca.crt"),
		Cert: p.write(role+"-"+id+".crt", leaf.CertPEM),
		Key:  p.write(role+"-"+id+".key", leaf.KeyPEM),
	}
}

// A result is what both sides of a handshake saw.
type result struct {
	srv, cli       tls.ConnectionState
	srvErr, cliErr error
}

// handshake connects a client with cli to a server with srv over loopback
// TCP, dialling "localhost" unless cli names a server. Under TLS 1.3 the
// client finishes before the server has checked its certificate, so the
// client also reads one byte the server sends after a good handshake.
func handshake(t *testing.T, srv, cli *tls.Config) result {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deadline := time.Now().Add(30 * time.Second)
	type side struct {
		cs  tls.ConnectionState
		err error
	}
	done := make(chan side, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- side{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(deadline)
		s := tls.Server(c, srv)
		err = s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{1})
		}
		done <- side{s.ConnectionState(), err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	cli = cli.Clone()
	if cli.ServerName == "" {
		cli.ServerName = "localhost"
	}
	tc := tls.Client(c, cli)
	err = tc.Handshake()
	if err == nil {
		_, err = io.ReadFull(tc, make([]byte, 1))
	}
	r := result{cli: tc.ConnectionState(), cliErr: err}
	tc.Close()
	s := <-done
	r.srv, r.srvErr = s.cs, s.err
	return r
}

// peer returns the identity of the first certificate in cs.
func peer(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return "none"
	}
	role, id, _ := CertIdentity(cs.PeerCertificates[0])
	return role + "/" + id
}

// must returns a function that returns c, failing t on err:
// must(t)(f.Client()).
func must(t *testing.T) func(c *tls.Config, err error) *tls.Config {
	return func(c *tls.Config, err error) *tls.Config {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}

func TestServerRoles(t *testing.T) {
	p := newPKI(t)
	other := newPKI(t)
	coord := p.files(RoleCoordinator, "c0", "localhost")
	srv := must(t)(coord.Server(true, RoleCoordinator))
	for _, tc := range []struct {
		name   string
		client TLSFiles
		want   string // in the server's error; "" for success
	}{
		{"coordinator", p.files(RoleCoordinator, "c1", "localhost"), ""},
		{"worker", p.files(RoleWorker, "w7"), "client worker/w7 refused; want role coordinator"},
		{"operator", p.files(RoleOperator, "op"), "client operator/op refused"},
		{"no certificate", TLSFiles{CA: coord.CA}, "certificate"},
		{"another CA", other.files(RoleCoordinator, "c1", "localhost"), "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := must(t)(tc.client.Client())
			cli.RootCAs = must(t)(coord.Client()).RootCAs // trust the server either way
			r := handshake(t, srv, cli)
			if tc.want == "" {
				if r.srvErr != nil || r.cliErr != nil {
					t.Fatalf("handshake: server %v, client %v", r.srvErr, r.cliErr)
				}
				if got := peer(r.srv); got != "coordinator/c1" {
					t.Errorf("server saw %s", got)
				}
				return
			}
			if r.srvErr == nil || !strings.Contains(r.srvErr.Error(), tc.want) {
				t.Errorf("server error %v, want one with %q", r.srvErr, tc.want)
			}
			if r.cliErr == nil {
				t.Error("client saw no error")
			}
		})
	}
}

func TestClientRoles(t *testing.T) {
	p := newPKI(t)
	coord := p.files(RoleCoordinator, "c0", "localhost")
	op := p.files(RoleOperator, "op")
	srv := must(t)(coord.Server(true, RoleOperator))
	for _, tc := range []struct {
		roles []string
		want  string // in the client's error; "" for success
	}{
		{nil, ""},
		{[]string{RoleCoordinator}, ""},
		{[]string{RoleNATS, RoleCoordinator}, ""},
		{[]string{RoleNATS}, "server coordinator/c0 refused; want role nats"},
		{[]string{RoleEtcd, RoleWorker}, "want role etcd or worker"},
	} {
		t.Run(strings.Join(tc.roles, ","), func(t *testing.T) {
			r := handshake(t, srv, must(t)(op.Client(tc.roles...)))
			if tc.want == "" {
				if r.srvErr != nil || r.cliErr != nil {
					t.Fatalf("handshake: server %v, client %v", r.srvErr, r.cliErr)
				}
				if got := peer(r.cli); got != "coordinator/c0" {
					t.Errorf("client saw %s", got)
				}
				return
			}
			if r.cliErr == nil || !strings.Contains(r.cliErr.Error(), tc.want) {
				t.Errorf("client error %v, want one with %q", r.cliErr, tc.want)
			}
		})
	}
}

// A worker certificate has no SANs and no server usage: whatever name a
// client dials, it fails hostname verification.
func TestWorkerCertIsNoServer(t *testing.T) {
	p := newPKI(t)
	worker := p.files(RoleWorker, "w0")
	srv := must(t)(worker.Server(false))
	for _, name := range []string{"localhost", "w0", "127.0.0.1"} {
		cli := must(t)(p.files(RoleOperator, "op").Client())
		cli.ServerName = name
		r := handshake(t, srv, cli)
		var host x509.HostnameError
		if !errors.As(r.cliErr, &host) {
			t.Errorf("dialling %s: client error %v, want an x509.HostnameError", name, r.cliErr)
		}
	}
}

// Without requireClient a client may present no certificate, and one it
// presents must verify.
func TestServerOptionalClient(t *testing.T) {
	p := newPKI(t)
	coord := p.files(RoleCoordinator, "c0", "localhost")
	srv := must(t)(coord.Server(false))
	r := handshake(t, srv, must(t)(TLSFiles{CA: coord.CA}.Client()))
	if r.srvErr != nil || r.cliErr != nil || peer(r.srv) != "none" {
		t.Errorf("no client certificate: server %v, client %v, peer %s", r.srvErr, r.cliErr, peer(r.srv))
	}
	r = handshake(t, srv, must(t)(p.files(RoleWorker, "w0").Client()))
	if r.srvErr != nil || r.cliErr != nil || peer(r.srv) != "worker/w0" {
		t.Errorf("worker certificate: server %v, client %v, peer %s", r.srvErr, r.cliErr, peer(r.srv))
	}
	cli := must(t)(newPKI(t).files(RoleWorker, "w0").Client())
	cli.RootCAs = must(t)(coord.Client()).RootCAs
	if r = handshake(t, srv, cli); r.srvErr == nil {
		t.Error("a certificate from another CA was accepted")
	}
}

func TestConfigRefuses(t *testing.T) {
	p := newPKI(t)
	coord := p.files(RoleCoordinator, "c0", "localhost")
	for name, f := range map[string]func() error{
		"server off":             func() error { _, err := TLSFiles{}.Server(true); return err },
		"client off":             func() error { _, err := TLSFiles{}.Client(); return err },
		"server unknown role":    func() error { _, err := coord.Server(true, "admin"); return err },
		"client unknown role":    func() error { _, err := coord.Client("admin"); return err },
		"roles need client cert": func() error { _, err := coord.Server(false, RoleWorker); return err },
		"server without cert":    func() error { _, err := TLSFiles{CA: coord.CA}.Server(false); return err },
		"client cert, no key":    func() error { _, err := TLSFiles{CA: coord.CA, Cert: coord.Cert}.Client(); return err },
	} {
		if err := f(); err == nil || !strings.HasPrefix(err.Error(), "trust: ") {
			t.Errorf("%s: %v, want a trust: error", name, err)
		}
	}
}

func TestTLSFilesValidate(t *testing.T) {
	p := newPKI(t)
	good := p.files(RoleWorker, "w0")
	otherKey := p.files(RoleWorker, "w1").Key
	missing := filepath.Join(p.dir, "missing.pem")
	junk := p.write("junk.pem", []byte("junk"))
	for _, tc := range []struct {
		name string
		f    TLSFiles
		want []string // one per joined error
	}{
		{"off", TLSFiles{}, nil},
		{"good", good, nil},
		{"CA only", TLSFiles{CA: good.CA}, []string{"without a certificate", "without a key"}},
		{"CA and cert", TLSFiles{CA: good.CA, Cert: good.Cert}, []string{"without a key"}},
		{"no CA", TLSFiles{Cert: good.Cert, Key: good.Key}, []string{"without a CA"}},
		{"key only", TLSFiles{Key: good.Key}, []string{"without a CA"}},
		{"unreadable files", TLSFiles{CA: missing, Cert: missing, Key: missing},
			[]string{"missing.pem", "missing.pem", "missing.pem"}},
		{"junk CA", TLSFiles{CA: junk, Cert: good.Cert, Key: good.Key}, []string{"no PEM certificate"}},
		{"not a pair", TLSFiles{CA: good.CA, Cert: good.Cert, Key: otherKey}, []string{"does not match"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.Enabled(); got != (tc.f.CA != "") {
				t.Errorf("Enabled = %v", got)
			}
			err := tc.f.Validate()
			var errs []error
			if err != nil {
				errs = err.(interface{ Unwrap() []error }).Unwrap()
			}
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate = %v, want %d errors", err, len(tc.want))
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), "trust: ") || !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("error %d: %v, want a trust: error with %q", i, e, tc.want[i])
				}
			}
		})
	}
}

// rotate writes a new leaf for (role, id) over f's files and moves their
// modification times to at, so the change is seen whatever the file
// system's timestamp granularity.
func rotate(t *testing.T, p *pki, f TLSFiles, role, id string, at time.Time, hosts ...string) {
	t.Helper()
	leaf, err := p.ca.Issue(role, id, hosts, day)
	if err != nil {
		t.Fatal(err)
	}
	for file, data := range map[string][]byte{f.Cert: leaf.CertPEM, f.Key: leaf.KeyPEM} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(file, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// Rewriting the certificate files is picked up by the next handshake, on
// both sides; a half-written rotation keeps the last good pair.
func TestReload(t *testing.T) {
	p := newPKI(t)
	srvFiles := p.files(RoleCoordinator, "c0", "localhost")
	cliFiles := p.files(RoleWorker, "w0")
	srv := must(t)(srvFiles.Server(true))
	cli := must(t)(cliFiles.Client())
	serials := func() (string, string) {
		t.Helper()
		r := handshake(t, srv, cli)
		if r.srvErr != nil || r.cliErr != nil {
			t.Fatalf("handshake: server %v, client %v", r.srvErr, r.cliErr)
		}
		return r.cli.PeerCertificates[0].SerialNumber.String(), r.srv.PeerCertificates[0].SerialNumber.String()
	}
	srv0, cli0 := serials()
	if s, c := serials(); s != srv0 || c != cli0 {
		t.Fatal("certificates changed without a rotation")
	}

	at := time.Now().Add(time.Hour)
	rotate(t, p, srvFiles, RoleCoordinator, "c0", at, "localhost")
	rotate(t, p, cliFiles, RoleWorker, "w0", at)
	srv1, cli1 := serials()
	if srv1 == srv0 || cli1 == cli0 {
		t.Fatalf("rotation not picked up: server %s -> %s, client %s -> %s", srv0, srv1, cli0, cli1)
	}

	// Half a rotation: a new certificate whose key is not yet written.
	leaf, err := p.ca.Issue(RoleCoordinator, "c0", []string{"localhost"}, day)
	if err != nil {
		t.Fatal(err)
	}
	p.write(filepath.Base(srvFiles.Cert), leaf.CertPEM)
	if err := os.Chtimes(srvFiles.Cert, at.Add(time.Hour), at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if s, _ := serials(); s != srv1 {
		t.Errorf("half-written rotation served %s, want the last good %s", s, srv1)
	}
	// The key arrives: the new pair is served.
	p.write(filepath.Base(srvFiles.Key), leaf.KeyPEM)
	if err := os.Chtimes(srvFiles.Key, at.Add(time.Hour), at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if s, _ := serials(); s != parseLeaf(t, leaf).SerialNumber.String() {
		t.Errorf("completed rotation served %s", s)
	}
}

// A configuration whose files vanish after it was built fails the
// handshake rather than panicking, and recovers when they return.
func TestReloadMissingFiles(t *testing.T) {
	p := newPKI(t)
	f := p.files(RoleCoordinator, "c0", "localhost")
	srv := must(t)(f.Server(false))
	cli := must(t)(TLSFiles{CA: f.CA}.Client())
	saved, err := os.ReadFile(f.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.Cert); err != nil {
		t.Fatal(err)
	}
	if r := handshake(t, srv, cli); r.srvErr == nil || !strings.Contains(r.srvErr.Error(), "trust: ") {
		t.Errorf("server error %v, want a trust: error", r.srvErr)
	}
	p.write(filepath.Base(f.Cert), saved)
	if r := handshake(t, srv, cli); r.srvErr != nil || r.cliErr != nil {
		t.Errorf("after restoring: server %v, client %v", r.srvErr, r.cliErr)
	}
}
