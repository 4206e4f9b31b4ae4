package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"time"
)

// Roles of a certificate. The identity is carried as the URI SAN
// "tmmu://<role>/<id>"; the subject's common name is <id>.
const (
	RoleCoordinator = "coordinator"
	RoleWorker      = "worker"
	RoleOperator    = "operator"
	RoleNATS        = "nats"
	RoleEtcd        = "etcd"
)

// uriScheme is the scheme of the identity URI SAN.
const uriScheme = "tmmu"

// backdate is how far before now certificates start to be valid, so a peer
// whose clock is slightly behind accepts a freshly issued one.
const backdate = 5 * time.Minute

// knownRole reports whether role is one of the Role constants.
func knownRole(role string) bool {
	switch role {
	case RoleCoordinator, RoleWorker, RoleOperator, RoleNATS, RoleEtcd:
		return true
	}
	return false
}

// serverRole reports whether certificates of role may act as TLS servers.
func serverRole(role string) bool {
	return role == RoleCoordinator || role == RoleNATS || role == RoleEtcd
}

// checkRole returns an error unless role is one of the Role constants.
func checkRole(role string) error {
	if !knownRole(role) {
		return fmt.Errorf("trust: unknown role %q", role)
	}
	return nil
}

// checkID returns an error unless id is 1 to 64 of [A-Za-z0-9_.-].
func checkID(id string) error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("trust: id %q must be 1 to 64 characters", id)
	}
	for _, r := range id {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9',
			r == '_', r == '.', r == '-':
		default:
			return fmt.Errorf("trust: id %q has %q; want only [A-Za-z0-9_.-]", id, r)
		}
	}
	return nil
}

// identityURI returns the URI SAN of (role, id).
func identityURI(role, id string) *url.URL {
	return &url.URL{Scheme: uriScheme, Host: role, Path: "/" + id}
}

// CertIdentity returns the role and id of a certificate issued by CA.Issue.
// ok is false when c is nil, carries no tmmu:// URI SAN or more than one, or
// the one it carries does not name a known role and a valid id.
func CertIdentity(c *x509.Certificate) (role, id string, ok bool) {
	if c == nil {
		return "", "", false
	}
	var found *url.URL
	for _, u := range c.URIs {
		if u.Scheme != uriScheme {
			continue
		}
		if found != nil {
			return "", "", false
		}
		found = u
	}
	if found == nil || found.Opaque != "" || found.User != nil || found.Port() != "" ||
		found.RawQuery != "" || found.Fragment != "" || len(found.Path) < 2 || found.Path[0] != '/' {
		return "", "", false
	}
	role, id = found.Hostname(), found.Path[1:]
	if !knownRole(role) || checkID(id) != nil {
		return "", "", false
	}
	return role, id, true
}

// A CA is the cluster's certificate authority: a self-signed ECDSA P-256
// certificate and its key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// serial returns a random 128-bit certificate serial number.
func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("trust: serial: %w", err)
	}
	return n, nil
}

// NewCA creates a self-signed CA valid for validFor from now: ECDSA P-256,
// key usage certificate and CRL signing, path length 0 (it signs leaves
// only), a random 128-bit serial.
func NewCA(commonName string, validFor time.Duration) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("trust: CA common name is empty")
	}
	if validFor <= 0 {
		return nil, fmt.Errorf("trust: CA validity %v must be positive", validFor)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("trust: CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("trust: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("trust: CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadCA reads a CA written by CertPEM and KeyPEM. It fails unless the
// certificate is a CA certificate and the key is its key.
func LoadCA(certFile, keyFile string) (*CA, error) {
	cert, err := readCert(certFile)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("trust: %s is not a CA certificate", certFile)
	}
	key, err := readKey[*ecdsa.PrivateKey](keyFile, "an ECDSA")
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("trust: %s is not the key of %s", keyFile, certFile)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// CertPEM returns the CA certificate as a PEM "CERTIFICATE" block.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM returns the CA key as a PEM "PRIVATE KEY" block (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) {
	return keyPEM(ca.Key)
}

// keyPEM encodes key as a PEM "PRIVATE KEY" block (PKCS #8).
func keyPEM(key any) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// A Leaf is a certificate and its key in PEM.
type Leaf struct {
	CertPEM, KeyPEM []byte
}

// Issue issues a leaf certificate for (role, id), valid for validFor from
// now but never past the CA's own expiry, with a fresh ECDSA P-256 key.
// The subject's common name is id and the identity is the URI SAN
// "tmmu://<role>/<id>" (see CertIdentity).
//
// Server-capable roles (coordinator, nats, etcd) get the extended key
// usages server and client authentication, and hosts as SANs: IP addresses
// where a host parses as one, DNS names otherwise. Client-only roles
// (worker, operator) get client authentication only, and Issue refuses
// hosts for them: a worker certificate never passes hostname verification
// as a server.
//
// id must be 1 to 64 of [A-Za-z0-9_.-], role one of the Role constants and
// validFor positive.
func (ca *CA) Issue(role, id string, hosts []string, validFor time.Duration) (Leaf, error) {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return Leaf{}, errors.New("trust: issue: no CA")
	}
	if err := checkRole(role); err != nil {
		return Leaf{}, err
	}
	if err := checkID(id); err != nil {
		return Leaf{}, err
	}
	if validFor <= 0 {
		return Leaf{}, fmt.Errorf("trust: validity %v must be positive", validFor)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if serverRole(role) {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	} else if len(hosts) > 0 {
		return Leaf{}, fmt.Errorf("trust: a %s certificate is client-only and takes no hosts (got %q)", role, hosts)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, fmt.Errorf("trust: key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return Leaf{}, err
	}
	now := time.Now()
	notAfter := now.Add(validFor)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: id},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usage,
		BasicConstraintsValid: true,
		URIs:                  []*url.URL{identityURI(role, id)},
	}
	for _, h := range hosts {
		switch ip := net.ParseIP(h); {
		case h == "":
			return Leaf{}, errors.New("trust: empty host")
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return Leaf{}, fmt.Errorf("trust: issue %s/%s: %w", role, id, err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  kp,
	}, nil
}

// readPEM returns the bytes of the first PEM block in file, which must be
// of type typ.
func readPEM(file, typ string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, fmt.Errorf("trust: %s holds no PEM block", file)
	}
	if b.Type != typ {
		return nil, fmt.Errorf("trust: %s holds a PEM %q block, want %q", file, b.Type, typ)
	}
	return b.Bytes, nil
}

// readKey parses the PKCS #8 key in file's PEM "PRIVATE KEY" block, which
// must be a K (kind names it in the error).
func readKey[K any](file, kind string) (K, error) {
	var key K
	der, err := readPEM(file, "PRIVATE KEY")
	if err != nil {
		return key, err
	}
	parsed, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return key, fmt.Errorf("trust: %s: %w", file, err)
	}
	key, ok := parsed.(K)
	if !ok {
		return key, fmt.Errorf("trust: %s holds a %T, want %s key", file, parsed, kind)
	}
	return key, nil
}

// readCert parses the first PEM certificate in file.
func readCert(file string) (*x509.Certificate, error) {
	der, err := readPEM(file, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("trust: %s: %w", file, err)
	}
	return c, nil
}
