package trust

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tmmu/tmmu/internal/atomicfile"
)

// A Layout names the files `tmmu secrets init DIR` writes (see Generate).
// Every path is under Dir. Role and id arguments are not checked here;
// Generate only writes valid ones.
type Layout struct {
	Dir string
}

// CACert returns DIR/ca.crt, the cluster CA certificate.
func (l Layout) CACert() string { return filepath.Join(l.Dir, "ca.crt") }

// CAKey returns DIR/ca.key, the cluster CA key.
func (l Layout) CAKey() string { return filepath.Join(l.Dir, "ca.key") }

// Cert returns DIR/<role>/<id>.crt, the certificate of (role, id).
func (l Layout) Cert(role, id string) string { return filepath.Join(l.Dir, role, id+".crt") }

// Key returns DIR/<role>/<id>.key, the key of (role, id).
func (l Layout) Key(role, id string) string { return filepath.Join(l.Dir, role, id+".key") }

// TLS returns the TLS files of (role, id): the CA, its certificate and key.
func (l Layout) TLS(role, id string) TLSFiles {
	return TLSFiles{CA: l.CACert(), Cert: l.Cert(role, id), Key: l.Key(role, id)}
}

// Nkey returns DIR/<role>/<id>.nk, the NATS nkey seed of (role, id).
func (l Layout) Nkey(role, id string) string { return filepath.Join(l.Dir, role, id+".nk") }

// SigningKey returns DIR/coordinator/signing.key, the decision signing key.
func (l Layout) SigningKey() string { return filepath.Join(l.Dir, RoleCoordinator, "signing.key") }

// VerifyKey returns DIR/signing.pub, the public keys that verify decisions.
func (l Layout) VerifyKey() string { return filepath.Join(l.Dir, "signing.pub") }

// APIToken returns DIR/operator/api-token, the coordinator API's bearer
// token for operators.
func (l Layout) APIToken() string { return filepath.Join(l.Dir, RoleOperator, "api-token") }

// ReadToken returns DIR/read-token, the bearer token of read-only API
// access (dashboards, metrics).
func (l Layout) ReadToken() string { return filepath.Join(l.Dir, "read-token") }

// NATSAuth returns DIR/nats/auth.conf, the NATS server's authorization
// configuration.
func (l Layout) NATSAuth() string { return filepath.Join(l.Dir, RoleNATS, "auth.conf") }

// A NATSUser is a NATS identity Generate created or found: a role, an id
// and the public key ("U...") of its nkey.
type NATSUser struct {
	Role, ID, Nkey string
}

// A Plan says what Generate makes.
type Plan struct {
	// Coordinators are coordinator ids. Each gets a coordinator certificate
	// (hosts: its id, "localhost", "127.0.0.1", plus Hosts) and an nkey.
	Coordinators []string
	// Workers are worker ids. Each gets a worker certificate (no hosts) and
	// an nkey.
	Workers []string
	// Operators are operator ids, by default ["operator"]. Each gets a
	// client certificate.
	Operators []string
	// Hosts are extra SANs of every server certificate (coordinators, nats,
	// etcd): DNS names or IP addresses.
	Hosts []string
	// ValidFor is how long leaf certificates are valid, by default 365
	// days. The CA is valid for 10 years.
	ValidFor time.Duration
	// FilesReadable writes key files 0644 instead of 0600 (inside the 0700
	// directory), for containers that run as another uid and bind-mount
	// single files.
	FilesReadable bool
}

// Validity defaults of Generate.
const (
	defaultLeafValidity = 365 * 24 * time.Hour
	caValidity          = 10 * 365 * 24 * time.Hour
	caCommonName        = "tmmu cluster CA"
)

// normalize returns p with its defaults filled in, or every problem with it.
func (p Plan) normalize() (Plan, error) {
	if len(p.Operators) == 0 {
		p.Operators = []string{"operator"}
	}
	if p.ValidFor == 0 {
		p.ValidFor = defaultLeafValidity
	}
	var errs []error
	if p.ValidFor < 0 {
		errs = append(errs, fmt.Errorf("trust: plan: validity %v is negative", p.ValidFor))
	}
	for _, g := range []struct {
		role string
		ids  []string
	}{{RoleCoordinator, p.Coordinators}, {RoleWorker, p.Workers}, {RoleOperator, p.Operators}} {
		seen := make(map[string]bool)
		for _, id := range g.ids {
			if err := checkID(id); err != nil {
				errs = append(errs, fmt.Errorf("trust: plan: %s: %w", g.role, err))
			}
			if seen[id] {
				errs = append(errs, fmt.Errorf("trust: plan: %s %q listed twice", g.role, id))
			}
			seen[id] = true
		}
	}
	if slices.Contains(p.Coordinators, "signing") {
		// DIR/coordinator/signing.key is the decision signing key.
		errs = append(errs, errors.New(`trust: plan: coordinator id "signing" is reserved`))
	}
	if slices.Contains(p.Hosts, "") {
		errs = append(errs, errors.New("trust: plan: empty host"))
	}
	return p, errors.Join(errs...)
}

// Generate writes, or completes, the layout in dir:
//
//   - the CA, kept if present: an existing CA is loaded, never replaced;
//   - the NATS server certificate (id "nats"; hosts "nats", "localhost",
//     "127.0.0.1" and p.Hosts) and the etcd one (id "etcd", likewise);
//   - a certificate and key for each coordinator, worker and operator;
//   - an nkey seed for each coordinator and worker;
//   - the decision signing key and its public key;
//   - the API token and the read token.
//
// Files that exist are kept as they are, so running Generate again with
// more workers adds only what is missing. A certificate without its key
// (or a key without its certificate, a CA certificate without the CA key,
// the public signing key without the private one) is an error rather than
// a pair to replace. Directories it creates are 0700; key, seed and token
// files 0600 (0644 with p.FilesReadable); certificates and public keys
// 0644. Files are written whole (a temporary file renamed into place).
//
// It then calls natsAuth with every NATSUser in the layout: the
// coordinators and workers whose seeds are on disk, including those of
// earlier runs no longer in p, sorted by role then id. It writes what
// natsAuth returns to Layout.NATSAuth, every time, with the mode of a key
// file; a nil natsAuth writes nothing. Generate returns the users.
//
// Generate checks the whole plan before it writes anything.
func Generate(dir string, p Plan, natsAuth func([]NATSUser) ([]byte, error)) ([]NATSUser, error) {
	p, err := p.normalize()
	if err != nil {
		return nil, err
	}
	g := generator{l: Layout{Dir: dir}, validFor: p.ValidFor, keyMode: 0o600}
	if p.FilesReadable {
		g.keyMode = 0o644
	}
	for _, d := range []string{RoleCoordinator, RoleWorker, RoleOperator, RoleNATS, RoleEtcd} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("trust: %w", err)
		}
	}
	if err := g.ca(); err != nil {
		return nil, err
	}
	server := func(id string) []string {
		return dedupe(append([]string{id, "localhost", "127.0.0.1"}, p.Hosts...))
	}
	steps := []func() error{
		func() error { return g.leaf(RoleNATS, RoleNATS, server(RoleNATS)) },
		func() error { return g.leaf(RoleEtcd, RoleEtcd, server(RoleEtcd)) },
	}
	for _, id := range p.Coordinators {
		steps = append(steps,
			func() error { return g.leaf(RoleCoordinator, id, server(id)) },
			func() error { return g.nkey(RoleCoordinator, id) })
	}
	for _, id := range p.Workers {
		steps = append(steps,
			func() error { return g.leaf(RoleWorker, id, nil) },
			func() error { return g.nkey(RoleWorker, id) })
	}
	for _, id := range p.Operators {
		steps = append(steps, func() error { return g.leaf(RoleOperator, id, nil) })
	}
	steps = append(steps, g.signing,
		func() error { return g.token(g.l.APIToken()) },
		func() error { return g.token(g.l.ReadToken()) })
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	users, err := g.users()
	if err != nil {
		return nil, err
	}
	if natsAuth != nil {
		conf, err := natsAuth(users)
		if err != nil {
			return nil, fmt.Errorf("trust: NATS auth: %w", err)
		}
		if err := writeFile(g.l.NATSAuth(), conf, g.keyMode); err != nil {
			return nil, err
		}
	}
	return users, nil
}

// dedupe returns s without repeats, in order of first appearance.
func dedupe(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// A generator carries out Generate's steps.
type generator struct {
	l         Layout
	validFor  time.Duration
	keyMode   fs.FileMode
	authority *CA
}

// ca loads the CA or, when neither of its files exists, creates it.
func (g *generator) ca() error {
	have, err := pair(g.l.CACert(), g.l.CAKey())
	if err != nil {
		return err
	}
	if have {
		g.authority, err = LoadCA(g.l.CACert(), g.l.CAKey())
		return err
	}
	ca, err := NewCA(caCommonName, caValidity)
	if err != nil {
		return err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	if err := writeFile(g.l.CAKey(), key, g.keyMode); err != nil {
		return err
	}
	g.authority = ca
	return writeFile(g.l.CACert(), ca.CertPEM(), 0o644)
}

// leaf issues the certificate of (role, id) unless it exists.
func (g *generator) leaf(role, id string, hosts []string) error {
	cert, key := g.l.Cert(role, id), g.l.Key(role, id)
	if have, err := pair(cert, key); err != nil || have {
		return err
	}
	leaf, err := g.authority.Issue(role, id, hosts, g.validFor)
	if err != nil {
		return err
	}
	if err := writeFile(key, leaf.KeyPEM, g.keyMode); err != nil {
		return err
	}
	return writeFile(cert, leaf.CertPEM, 0o644)
}

// nkey writes a user nkey seed for (role, id) unless one exists.
func (g *generator) nkey(role, id string) error {
	file := g.l.Nkey(role, id)
	if have, err := exists(file); err != nil || have {
		return err
	}
	seed, _, err := NewUserNkey()
	if err != nil {
		return err
	}
	return writeFile(file, seed, g.keyMode)
}

// signing makes the signing key and its public key, or completes and
// checks them.
func (g *generator) signing() error {
	keyFile, pubFile := g.l.SigningKey(), g.l.VerifyKey()
	haveKey, err := exists(keyFile)
	if err != nil {
		return err
	}
	havePub, err := exists(pubFile)
	if err != nil {
		return err
	}
	var s *Signer
	switch {
	case haveKey && havePub:
		if s, err = LoadSigner(keyFile); err != nil {
			return err
		}
		v, err := LoadVerifier(pubFile)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(v.keys, func(k ed25519.PublicKey) bool { return k.Equal(s.Public()) }) {
			return fmt.Errorf("trust: %s does not hold the public key of %s", pubFile, keyFile)
		}
		return nil
	case havePub:
		return fmt.Errorf("trust: %s exists but %s does not; restore the signing key or remove both", pubFile, keyFile)
	case haveKey:
		if s, err = LoadSigner(keyFile); err != nil {
			return err
		}
	default:
		if s, err = NewSigner(); err != nil {
			return err
		}
		key, err := s.PrivatePEM()
		if err != nil {
			return err
		}
		if err := writeFile(keyFile, key, g.keyMode); err != nil {
			return err
		}
	}
	pub, err := PublicPEM(s.Public())
	if err != nil {
		return err
	}
	return writeFile(pubFile, pub, 0o644)
}

// token writes a new token to file unless it exists. The file holds the
// token alone, without a newline.
func (g *generator) token(file string) error {
	if have, err := exists(file); err != nil || have {
		return err
	}
	tok, err := NewToken()
	if err != nil {
		return err
	}
	return writeFile(file, []byte(tok), g.keyMode)
}

// users returns the NATS users whose seeds are in the layout, sorted by
// role then id.
func (g *generator) users() ([]NATSUser, error) {
	var users []NATSUser
	for _, role := range []string{RoleCoordinator, RoleWorker} {
		entries, err := os.ReadDir(filepath.Join(g.l.Dir, role))
		if err != nil {
			return nil, fmt.Errorf("trust: %w", err)
		}
		for _, e := range entries {
			id, ok := strings.CutSuffix(e.Name(), ".nk")
			if !ok || !e.Type().IsRegular() {
				continue
			}
			file := g.l.Nkey(role, id)
			if err := checkID(id); err != nil {
				return nil, fmt.Errorf("trust: %s: %w", file, err)
			}
			pub, err := g.l.PublicNkey(role, id)
			if err != nil {
				return nil, err
			}
			users = append(users, NATSUser{Role: role, ID: id, Nkey: pub})
		}
	}
	slices.SortFunc(users, func(a, b NATSUser) int {
		return cmp.Or(cmp.Compare(a.Role, b.Role), cmp.Compare(a.ID, b.ID))
	})
	return users, nil
}

// PublicNkey returns the public key of (role, id)'s nkey seed file.
func (l Layout) PublicNkey(role, id string) (string, error) {
	file := l.Nkey(role, id)
	seed, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("trust: %w", err)
	}
	pub, err := userNkey(bytes.TrimSpace(seed))
	if err != nil {
		return "", fmt.Errorf("trust: %s: %w", file, err)
	}
	return pub, nil
}

// exists reports whether file exists.
func exists(file string) (bool, error) {
	_, err := os.Lstat(file)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("trust: %w", err)
}

// pair reports whether both a and b exist; exactly one existing is an error.
func pair(a, b string) (bool, error) {
	haveA, err := exists(a)
	if err != nil {
		return false, err
	}
	haveB, err := exists(b)
	if err != nil {
		return false, err
	}
	if haveA != haveB {
		have, missing := a, b
		if haveB {
			have, missing = b, a
		}
		return false, fmt.Errorf("trust: %s exists but %s does not; restore it or remove %s", have, missing, have)
	}
	return haveA, nil
}

// writeFile writes data to file with mode, whole (atomicfile.Write).
func writeFile(file string, data []byte, mode fs.FileMode) error {
	if err := atomicfile.Write(file, data, mode); err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	return nil
}
