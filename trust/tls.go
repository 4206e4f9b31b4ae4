package trust

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
)

// TLSFiles names the PEM files of one TLS identity: the cluster CA, and
// this process's certificate and key. The zero value means TLS is off.
type TLSFiles struct {
	CA, Cert, Key string
}

// Enabled reports whether TLS is on, that is whether CA is set.
func (f TLSFiles) Enabled() bool { return f.CA != "" }

// Validate reports every problem with f at once (errors.Join): a CA set
// without a certificate or key, a certificate or key set without a CA,
// files that cannot be read, a CA file with no certificate in it, and a
// certificate and key that do not form a pair. The zero value is valid.
// Validate is meant for a daemon's configuration, which always has its own
// certificate; Client also accepts a CA alone.
func (f TLSFiles) Validate() error { return f.check(true) }

// check is Validate; with needPair false a CA without a certificate and key
// is accepted (a client that presents no certificate).
func (f TLSFiles) check(needPair bool) error {
	var errs []error
	switch {
	case f.CA == "" && (f.Cert != "" || f.Key != ""):
		errs = append(errs, errors.New("trust: TLS certificate or key set without a CA"))
	case f.CA != "" && (needPair || f.Cert != "" || f.Key != ""):
		if f.Cert == "" {
			errs = append(errs, fmt.Errorf("trust: TLS CA %s set without a certificate", f.CA))
		}
		if f.Key == "" {
			errs = append(errs, fmt.Errorf("trust: TLS CA %s set without a key", f.CA))
		}
	}
	if f.CA != "" {
		if _, err := loadPool(f.CA); err != nil {
			errs = append(errs, err)
		}
	}
	read := func(file string) []byte {
		if file == "" {
			return nil
		}
		data, err := os.ReadFile(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("trust: %w", err))
		}
		return data
	}
	certPEM, keyPEM := read(f.Cert), read(f.Key)
	if certPEM != nil && keyPEM != nil {
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			errs = append(errs, fmt.Errorf("trust: %s and %s: %w", f.Cert, f.Key, err))
		}
	}
	return errors.Join(errs...)
}

// loadPool returns a pool of the certificates in the PEM file.
func loadPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("trust: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// checkRoles returns an error unless every role is one of the Role constants.
func checkRoles(roles []string) error {
	var errs []error
	for _, r := range roles {
		errs = append(errs, checkRole(r))
	}
	return errors.Join(errs...)
}

// Server returns a TLS server configuration (TLS 1.3 at least) that serves
// the certificate in f.Cert, re-read when its files change (see
// Certificate reloading in the package documentation).
//
// With requireClient, clients must present a certificate issued by the CA
// in f.CA (tls.RequireAndVerifyClientCert); without it, a client may
// present one, and one it presents must verify (tls.VerifyClientCertIfGiven).
// With roles, a client whose certificate's role (CertIdentity) is not among
// them is refused, with an error naming the role and id it has; roles need
// requireClient.
//
// f must be enabled and valid (Validate).
func (f TLSFiles) Server(requireClient bool, roles ...string) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, errors.New("trust: TLS server: no CA configured")
	}
	if err := errors.Join(f.Validate(), checkRoles(roles)); err != nil {
		return nil, err
	}
	if len(roles) > 0 && !requireClient {
		return nil, fmt.Errorf("trust: TLS server: client roles %q need requireClient", roles)
	}
	pool, err := loadPool(f.CA)
	if err != nil {
		return nil, err
	}
	kp := &keyPair{certFile: f.Cert, keyFile: f.Key}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientCAs:  pool,
		ClientAuth: tls.VerifyClientCertIfGiven,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.get()
		},
	}
	if requireClient {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if len(roles) > 0 {
		cfg.VerifyConnection = verifyRole("client", roles)
	}
	return cfg, nil
}

// Client returns a TLS client configuration (TLS 1.3 at least) that trusts
// the CA in f.CA and, when f.Cert and f.Key are set, presents that
// certificate, re-read when its files change. With roles, a server whose
// certificate's role (CertIdentity) is not among them is refused.
// Hostname verification stays on: tls.Dial and friends take ServerName
// from the dialled address.
//
// f.CA must be set; f.Cert and f.Key are both set or both empty.
func (f TLSFiles) Client(roles ...string) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, errors.New("trust: TLS client: no CA configured")
	}
	if err := errors.Join(f.check(false), checkRoles(roles)); err != nil {
		return nil, err
	}
	pool, err := loadPool(f.CA)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
	if f.Cert != "" {
		kp := &keyPair{certFile: f.Cert, keyFile: f.Key}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return kp.get()
		}
	}
	if len(roles) > 0 {
		cfg.VerifyConnection = verifyRole("server", roles)
	}
	return cfg, nil
}

// verifyRole returns a tls.Config.VerifyConnection callback that refuses a
// peer (named by side in errors) whose certificate's role is not in roles.
// It runs after the usual chain verification.
func verifyRole(side string, roles []string) func(tls.ConnectionState) error {
	roles = slices.Clone(roles)
	want := strings.Join(roles, " or ")
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("trust: %s presented no certificate; want role %s", side, want)
		}
		leaf := cs.PeerCertificates[0]
		role, id, ok := CertIdentity(leaf)
		if !ok {
			return fmt.Errorf("trust: %s certificate %q carries no tmmu identity; want role %s",
				side, leaf.Subject.CommonName, want)
		}
		if !slices.Contains(roles, role) {
			return fmt.Errorf("trust: %s %s/%s refused; want role %s", side, role, id, want)
		}
		return nil
	}
}

// A keyPair serves a certificate and key from files, re-reading both when
// either file's modification time or size changes. When the files do not
// load (one rewritten before the other, or gone), it keeps serving the
// last pair that did, and tries again on the next call.
type keyPair struct {
	certFile, keyFile string

	mu    sync.Mutex
	stamp [2]fileStamp
	cert  *tls.Certificate
}

// A fileStamp is what keyPair compares to notice a rewritten file.
type fileStamp struct {
	modNano, size int64
}

// stampOf returns the stamps of files.
func stampOf(files [2]string) ([2]fileStamp, error) {
	var st [2]fileStamp
	for i, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return st, err
		}
		st[i] = fileStamp{fi.ModTime().UnixNano(), fi.Size()}
	}
	return st, nil
}

// get returns the current certificate, loading it if the files changed.
func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, err := stampOf([2]string{k.certFile, k.keyFile})
	if err == nil && k.cert != nil && st == k.stamp {
		return k.cert, nil
	}
	if err == nil {
		var c tls.Certificate
		if c, err = tls.LoadX509KeyPair(k.certFile, k.keyFile); err == nil {
			k.cert, k.stamp = &c, st
			return k.cert, nil
		}
	}
	if k.cert != nil {
		return k.cert, nil
	}
	return nil, fmt.Errorf("trust: %w", err)
}
