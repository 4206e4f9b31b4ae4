package coord

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tmmu/tmmu/trust"
)

// TestHandshakeCauses runs real TLS handshakes against a coordinator's
// raft server config and classifies how each failed: a peer too slow to
// finish or one that hangs up is not refused (genuine peers do both on
// a starved host); no certificate, another CA's, a worker's and bytes
// that are not TLS are.
func TestHandshakeCauses(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	if _, err := trust.Generate(dir, trust.Plan{Coordinators: []string{"c0"}, Workers: []string{"w0"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := trust.Generate(other, trust.Plan{Coordinators: []string{"c0"}}, nil); err != nil {
		t.Fatal(err)
	}
	l, o := trust.Layout{Dir: dir}, trust.Layout{Dir: other}
	srv, err := l.TLS(trust.RoleCoordinator, "c0").Server(true, trust.RoleCoordinator)
	if err != nil {
		t.Fatal(err)
	}
	client := func(files trust.TLSFiles) func(net.Conn) {
		return func(c net.Conn) {
			cfg, err := files.Client(trust.RoleCoordinator)
			if err != nil {
				t.Error(err)
				return
			}
			cfg.ServerName = "c0"
			tls.Client(c, cfg).Handshake()
			c.Close()
		}
	}
	cases := []struct {
		name, cause string
		refused     bool
		peer        func(net.Conn)
	}{
		{"silent peer", causeTimeout, false, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() }},
		{"peer hangs up", causeClosed, false, func(c net.Conn) { c.Close() }},
		{"no certificate", causeNoCertificate, true, client(trust.TLSFiles{CA: l.CACert()})},
		{"another CA", causeWrongCA, true, client(trust.TLSFiles{CA: l.CACert(), Cert: o.Cert(trust.RoleCoordinator, "c0"), Key: o.Key(trust.RoleCoordinator, "c0")})},
		{"a worker", causeWrongRole, true, client(l.TLS(trust.RoleWorker, "w0"))},
		{"not TLS", causeNotTLS, true, func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); io.Copy(io.Discard, c); c.Close() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			done := make(chan struct{})
			go func() { defer close(done); c.peer(b) }()
			defer func() { <-done }()
			s := tls.Server(a, srv)
			s.SetDeadline(time.Now().Add(300 * time.Millisecond))
			err := s.Handshake()
			a.Close()
			if err == nil {
				t.Fatal("the handshake succeeded")
			}
			if cause, refused := handshakeCause(err); cause != c.cause || refused != c.refused {
				t.Fatalf("%v: cause %s (refused %v), want %s (refused %v)", err, cause, refused, c.cause, c.refused)
			}
		})
	}
}
