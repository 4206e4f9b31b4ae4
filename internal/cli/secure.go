package cli

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/trust"
)

// Security holds a daemon's security flags: its certificate (mutual TLS
// with raft peers, NATS and etcd; the coordinators' API), its NATS nkey,
// and --secrets, a directory written by `tmmu secrets init` that fills in
// whatever was not given file by file. Without --insecure a daemon refuses
// to start unless every credential its role needs is there.
type Security struct {
	Insecure *bool
	Secrets  *string
	CA       *string
	Cert     *string
	Key      *string
	Nkey     *string
}

// SecurityFlags registers the security flags shared by the daemons.
func SecurityFlags(fs *flag.FlagSet) *Security {
	return &Security{
		Insecure: fs.Bool("insecure", false, "run without TLS, NATS nkeys, signed decisions and tokens (a trusted test network only)"),
		Secrets:  fs.String("secrets", "", "directory written by `tmmu secrets init`: every credential below not given is taken from it"),
		CA:       fs.String("tls-ca", "", "PEM CA certificate the cluster's certificates are issued by"),
		Cert:     fs.String("tls-cert", "", "this daemon's PEM certificate"),
		Key:      fs.String("tls-key", "", "this daemon's PEM private key"),
		Nkey:     fs.String("nats-nkey-file", "", "this identity's NATS nkey seed (the NATS user it connects as)"),
	}
}

// Fill sets every empty file flag from the --secrets layout for the
// daemon's role and id, where that file exists.
func (s *Security) Fill(role, id string, more map[*string]func(trust.Layout) string) {
	if *s.Secrets == "" {
		return
	}
	l := trust.Layout{Dir: *s.Secrets}
	set := func(p *string, path string) {
		if *p == "" {
			if _, err := os.Stat(path); err == nil {
				*p = path
			}
		}
	}
	set(s.CA, l.CACert())
	set(s.Cert, l.Cert(role, id))
	set(s.Key, l.Key(role, id))
	set(s.Nkey, l.Nkey(role, id))
	for p, f := range more {
		set(p, f(l))
	}
}

// TLS returns the daemon's certificate files.
func (s *Security) TLS() trust.TLSFiles {
	return trust.TLSFiles{CA: *s.CA, Cert: *s.Cert, Key: *s.Key}
}

// Require reports, all at once, the credentials a secure daemon lacks
// (nothing with --insecure): named flags whose values are empty, and the
// certificate files.
func (s *Security) Require(daemon string, need map[string]string) error {
	if *s.Insecure {
		return nil
	}
	var errs []error
	for flag, v := range map[string]string{"--tls-ca": *s.CA, "--tls-cert": *s.Cert, "--tls-key": *s.Key} {
		need[flag] = v
	}
	for _, f := range slices.Sorted(maps.Keys(need)) {
		if need[f] == "" {
			errs = append(errs, fmt.Errorf("%s is not set", f))
		}
	}
	if len(errs) == 0 {
		if err := s.TLS().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: missing credentials (write them with `tmmu secrets init DIR` and pass --secrets DIR, or run with --insecure on a trusted test network):\n  %w",
			daemon, errors.Join(errs...))
	}
	return nil
}

// NATSOptions returns the connect options of the daemon's NATS identity:
// TLS with its certificate (checking the server's is the NATS server's)
// and its nkey, as far as they are set.
func (s *Security) NATSOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if s.TLS().Enabled() {
		cfg, err := s.TLS().Client(trust.RoleNATS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(cfg))
	}
	if *s.Nkey != "" {
		o, err := nats.NkeyOptionFromSeed(*s.Nkey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey-file: %w", err)
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// EtcdTLS returns the TLS config for etcd (nil without TLS).
func (s *Security) EtcdTLS() (*tls.Config, error) {
	if !s.TLS().Enabled() {
		return nil, nil
	}
	return s.TLS().Client(trust.RoleEtcd)
}

// CoordinatorTransport returns the HTTP transport for the coordinators'
// API (for api.Client's HTTP client): nil without TLS, else TLS that
// checks the server's certificate is a coordinator's.
func (s *Security) CoordinatorTransport() (http.RoundTripper, error) {
	return CoordinatorTransport(s.TLS())
}

// CoordinatorTransport returns an HTTP transport for the coordinators'
// API over TLS with files (nil when they name no CA).
func CoordinatorTransport(files trust.TLSFiles) (http.RoundTripper, error) {
	if !files.Enabled() {
		return nil, nil
	}
	cfg, err := files.Client(trust.RoleCoordinator)
	if err != nil {
		return nil, err
	}
	// Connections are kept for every caller that shares the transport
	// (the workers of an in-process cluster): a TLS handshake per
	// request would cost more than the request.
	return &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, MaxIdleConns: 256, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}, nil
}
