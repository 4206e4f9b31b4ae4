package trust

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const day = 24 * time.Hour

// newCA returns a fresh CA or fails the test.
func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test CA", 30*day)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// parseLeaf returns the certificate of l.
func parseLeaf(t *testing.T, l Leaf) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(l.CertPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("leaf holds no PEM certificate: %q", l.CertPEM)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewCA(t *testing.T) {
	a, b := newCA(t), newCA(t)
	for _, ca := range []*CA{a, b} {
		c := ca.Cert
		if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
			t.Errorf("CA constraints: IsCA %v valid %v MaxPathLen %d zero %v",
				c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
		}
		if c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
			t.Errorf("CA key usage %v", c.KeyUsage)
		}
		if c.SerialNumber.BitLen() > 128 || c.SerialNumber.Sign() < 0 {
			t.Errorf("serial %v is not a 128-bit number", c.SerialNumber)
		}
		if err := c.CheckSignatureFrom(c); err != nil {
			t.Errorf("CA is not self-signed: %v", err)
		}
	}
	if a.Cert.SerialNumber.Cmp(b.Cert.SerialNumber) == 0 {
		t.Error("two CAs share a serial")
	}
	for _, bad := range []struct {
		cn       string
		validFor time.Duration
	}{{"", day}, {"x", 0}, {"x", -day}} {
		if _, err := NewCA(bad.cn, bad.validFor); err == nil || !strings.HasPrefix(err.Error(), "trust: ") {
			t.Errorf("NewCA(%q, %v) = %v, want a trust: error", bad.cn, bad.validFor, err)
		}
	}
}

func TestLoadCA(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	ca, other := newCA(t), newCA(t)
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := other.KeyPEM()
	leaf, err := ca.Issue(RoleWorker, "w0", nil, day)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := write("ca.crt", ca.CertPEM()), write("ca.key", key)
	got, err := LoadCA(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.Equal(ca.Cert) || !got.Key.Equal(ca.Key) {
		t.Error("LoadCA returned another CA")
	}
	for name, files := range map[string][2]string{
		"other key":     {certFile, write("other.key", otherKey)},
		"leaf as CA":    {write("leaf.crt", leaf.CertPEM), write("leaf.key", leaf.KeyPEM)},
		"key for cert":  {keyFile, keyFile},
		"missing":       {filepath.Join(dir, "nope.crt"), keyFile},
		"not PEM":       {write("junk.crt", []byte("junk")), keyFile},
		"cert for key":  {certFile, certFile},
		"garbled DER":   {write("bad.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2}})), keyFile},
		"garbled PKCS8": {certFile, write("bad.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2}}))},
	} {
		if _, err := LoadCA(files[0], files[1]); err == nil || !strings.HasPrefix(err.Error(), "trust: ") {
			t.Errorf("%s: LoadCA = %v, want a trust: error", name, err)
		}
	}
}

func TestIssueIdentity(t *testing.T) {
	ca := newCA(t)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	for _, tc := range []struct {
		role, id string
		hosts    []string
		usage    []x509.ExtKeyUsage
		dns      []string
		ips      []string
	}{
		{RoleCoordinator, "c0", []string{"c0", "localhost", "127.0.0.1", "::1"}, server, []string{"c0", "localhost"}, []string{"127.0.0.1", "::1"}},
		{RoleNATS, "nats", []string{"nats"}, server, []string{"nats"}, nil},
		{RoleEtcd, "etcd", nil, server, nil, nil},
		{RoleWorker, "w-1.a_B", nil, client, nil, nil},
		{RoleOperator, strings.Repeat("o", 64), nil, client, nil, nil},
	} {
		t.Run(tc.role+"/"+tc.id, func(t *testing.T) {
			leaf, err := ca.Issue(tc.role, tc.id, tc.hosts, day)
			if err != nil {
				t.Fatal(err)
			}
			c := parseLeaf(t, leaf)
			role, id, ok := CertIdentity(c)
			if !ok || role != tc.role || id != tc.id {
				t.Errorf("CertIdentity = %q, %q, %v; want %q, %q, true", role, id, ok, tc.role, tc.id)
			}
			if c.Subject.CommonName != tc.id {
				t.Errorf("CN %q, want %q", c.Subject.CommonName, tc.id)
			}
			if c.IsCA || !slices.Equal(c.ExtKeyUsage, tc.usage) {
				t.Errorf("IsCA %v, ext key usage %v; want false, %v", c.IsCA, c.ExtKeyUsage, tc.usage)
			}
			var ips []string
			for _, ip := range c.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(c.DNSNames, tc.dns) || !slices.Equal(ips, tc.ips) {
				t.Errorf("SANs %q %q, want %q %q", c.DNSNames, ips, tc.dns, tc.ips)
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: tc.usage}); err != nil {
				t.Errorf("does not verify against the CA: %v", err)
			}
			if c.NotAfter.After(ca.Cert.NotAfter) {
				t.Errorf("expires %v, after the CA (%v)", c.NotAfter, ca.Cert.NotAfter)
			}
		})
	}
	// A leaf never outlives its CA.
	leaf, err := ca.Issue(RoleWorker, "w0", nil, 1000*day)
	if err != nil {
		t.Fatal(err)
	}
	if c := parseLeaf(t, leaf); !c.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("long-lived leaf expires %v, want the CA's %v", c.NotAfter, ca.Cert.NotAfter)
	}
}

func TestIssueRefuses(t *testing.T) {
	ca := newCA(t)
	for _, tc := range []struct {
		name     string
		ca       *CA
		role, id string
		hosts    []string
		validFor time.Duration
		want     string
	}{
		{"worker with hosts", ca, RoleWorker, "w0", []string{"localhost"}, day, "client-only"},
		{"operator with hosts", ca, RoleOperator, "op", []string{"10.0.0.1"}, day, "client-only"},
		{"unknown role", ca, "admin", "a", nil, day, "unknown role"},
		{"empty role", ca, "", "a", nil, day, "unknown role"},
		{"empty id", ca, RoleWorker, "", nil, day, "1 to 64"},
		{"long id", ca, RoleWorker, strings.Repeat("w", 65), nil, day, "1 to 64"},
		{"slash", ca, RoleWorker, "w/0", nil, day, "[A-Za-z0-9_.-]"},
		{"space", ca, RoleWorker, "w 0", nil, day, "[A-Za-z0-9_.-]"},
		{"non-ASCII", ca, RoleWorker, "wé", nil, day, "[A-Za-z0-9_.-]"},
		{"zero validity", ca, RoleWorker, "w0", nil, 0, "positive"},
		{"negative validity", ca, RoleWorker, "w0", nil, -day, "positive"},
		{"empty host", ca, RoleCoordinator, "c0", []string{"c0", ""}, day, "empty host"},
		{"nil CA", nil, RoleWorker, "w0", nil, day, "no CA"},
		{"CA without key", &CA{Cert: ca.Cert}, RoleWorker, "w0", nil, day, "no CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaf, err := tc.ca.Issue(tc.role, tc.id, tc.hosts, tc.validFor)
			if err == nil || !strings.HasPrefix(err.Error(), "trust: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Issue = %v, want a trust: error with %q", err, tc.want)
			}
			if leaf.CertPEM != nil || leaf.KeyPEM != nil {
				t.Error("a refused Issue returned PEM")
			}
		})
	}
}

func TestCertIdentity(t *testing.T) {
	uris := func(ss ...string) *x509.Certificate {
		c := &x509.Certificate{}
		for _, s := range ss {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			c.URIs = append(c.URIs, u)
		}
		return c
	}
	for _, tc := range []struct {
		name     string
		c        *x509.Certificate
		role, id string
	}{
		{"one", uris("tmmu://worker/w0"), RoleWorker, "w0"},
		{"beside another scheme", uris("spiffe://x/y", "tmmu://etcd/etcd"), RoleEtcd, "etcd"},
		{"nil", nil, "", ""},
		{"none", uris(), "", ""},
		{"other scheme only", uris("spiffe://worker/w0"), "", ""},
		{"two", uris("tmmu://worker/w0", "tmmu://worker/w1"), "", ""},
		{"two, one bad", uris("tmmu://worker/w0", "tmmu://admin/a"), "", ""},
		{"unknown role", uris("tmmu://admin/a"), "", ""},
		{"no id", uris("tmmu://worker/"), "", ""},
		{"nested path", uris("tmmu://worker/a/b"), "", ""},
		{"port", uris("tmmu://worker:1/w0"), "", ""},
		{"query", uris("tmmu://worker/w0?x=1"), "", ""},
		{"user", uris("tmmu://u@worker/w0"), "", ""},
		{"opaque", uris("tmmu:worker/w0"), "", ""},
		{"ip SAN is not an identity", &x509.Certificate{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			role, id, ok := CertIdentity(tc.c)
			if role != tc.role || id != tc.id || ok != (tc.role != "") {
				t.Errorf("CertIdentity = %q, %q, %v; want %q, %q, %v", role, id, ok, tc.role, tc.id, tc.role != "")
			}
		})
	}
}
