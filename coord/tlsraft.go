package coord

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// RaftTLS secures the raft transport with mutual TLS: every node listens
// with Server (which must require a client certificate of a coordinator,
// trust.TLSFiles.Server(true, trust.RoleCoordinator)) and dials its peers
// with Client (which presents the node's certificate and checks that the
// peer's is a coordinator's, trust.TLSFiles.Client(trust.RoleCoordinator)).
// A node without a valid certificate then cannot send a vote request, an
// append or a snapshot, nor receive one.
type RaftTLS struct {
	Server, Client *tls.Config
}

// tlsStream is a raft.StreamLayer over TLS.
type tlsStream struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
	refused   func(net.Addr, error) // a peer whose handshake failed (nil: none told)
}

// newTLSStream listens on bind with the server config; refused, if set,
// is told of every connection whose TLS handshake fails.
func newTLSStream(bind string, advertise net.Addr, t *RaftTLS, refused func(net.Addr, error)) (*tlsStream, error) {
	if t.Server == nil || t.Client == nil {
		return nil, errors.New("coord: raft TLS needs a server and a client config")
	}
	if t.Server.ClientAuth != tls.RequireAndVerifyClientCert {
		return nil, errors.New("coord: raft TLS must require and verify client certificates")
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = l.Addr()
	}
	if tcp, ok := advertise.(*net.TCPAddr); !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		l.Close()
		return nil, fmt.Errorf("coord: raft address %v is not advertisable", advertise)
	}
	return &tlsStream{Listener: tls.NewListener(l, t.Server), advertise: advertise, client: t.Client, refused: refused}, nil
}

// Accept returns the next connection; its handshake runs on its first
// read (in raft's goroutine for the connection, so a peer that never
// completes one holds up nobody else) and, failing, is told to refused.
func (s *tlsStream) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: c.(*tls.Conn), refused: s.refused}, nil
}

// handshakeConn completes its TLS handshake, within handshakeTimeout, on
// its first read.
type handshakeConn struct {
	*tls.Conn
	once    sync.Once
	err     error
	refused func(net.Addr, error)
}

const handshakeTimeout = 10 * time.Second

func (c *handshakeConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		c.SetDeadline(time.Now().Add(handshakeTimeout))
		if c.err = c.Handshake(); c.err != nil && c.refused != nil {
			c.refused(c.RemoteAddr(), c.err)
		}
		c.SetDeadline(time.Time{})
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(b)
}

// Causes of a failed raft handshake (handshakeCause).
const (
	causeTimeout       = "timeout"        // no handshake within handshakeTimeout: a slow or starved peer
	causeClosed        = "closed"         // the peer hung up mid-handshake (its own dial timed out)
	causeNoCertificate = "no_certificate" // refused: the peer showed no certificate
	causeWrongCA       = "wrong_ca"       // refused: a certificate this cluster's CA did not sign
	causeWrongRole     = "wrong_role"     // refused: a certificate of this CA, but not a coordinator's
	causeNotTLS        = "not_tls"        // refused: the peer does not speak TLS
	causeOther         = "other"          // refused: any other handshake failure
)

// handshakeCause classifies a failed server-side handshake; refused says
// whether the peer was turned away (a certificate or protocol problem)
// rather than too slow or gone, which genuine peers are under load.
func handshakeCause(err error) (cause string, refused bool) {
	var ne net.Error
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	msg := err.Error()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return causeTimeout, false
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed):
		return causeClosed, false
	case strings.Contains(msg, "didn't provide a certificate"):
		return causeNoCertificate, true
	case errors.As(err, &cv):
		return causeWrongCA, true
	case strings.Contains(msg, "trust: client"):
		return causeWrongRole, true
	case errors.As(err, &rh):
		return causeNotTLS, true
	}
	return causeOther, true
}

// Dial connects to a peer over TLS, checking its certificate.
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	cfg := s.client.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(string(address))
		if err != nil {
			return nil, err
		}
		cfg.ServerName = host
	}
	c, err := tls.DialWithDialer(d, "tcp", string(address), cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Addr returns the advertised address.
func (s *tlsStream) Addr() net.Addr { return s.advertise }
