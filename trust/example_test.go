package trust_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tmmu/tmmu/trust"
)

func ExampleCA_Issue() {
	ca, err := trust.NewCA("tmmu cluster CA", 10*365*24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	leaf, err := ca.Issue(trust.RoleWorker, "w3", nil, 365*24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	b, _ := pem.Decode(leaf.CertPEM)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cert.Subject.CommonName, cert.URIs[0])
	fmt.Println(trust.CertIdentity(cert))

	// A worker is a client only: it gets no server names.
	_, err = ca.Issue(trust.RoleWorker, "w3", []string{"localhost"}, 365*24*time.Hour)
	fmt.Println(err != nil)
	// Output:
	// w3 tmmu://worker/w3
	// worker w3 true
	// true
}

func ExampleSigner() {
	s, err := trust.NewSigner()
	if err != nil {
		log.Fatal(err)
	}
	next, err := trust.NewSigner()
	if err != nil {
		log.Fatal(err)
	}
	msg := []byte(`{"job":"gpt2","epoch":3,"outcome":"agreed"}`)
	sig := s.Sign(msg)

	// Mid-rotation, workers trust both the old and the next key.
	v := trust.NewVerifier(s.Public(), next.Public())
	fmt.Println(v.Verify(msg, sig))
	fmt.Println(v.Verify(msg, next.Sign(msg)))
	fmt.Println(v.Verify([]byte(`{"job":"gpt2","epoch":4}`), sig))
	// Signatures carry the domain-separation prefix: a plain ed25519
	// signature of the same bytes is not a decision signature.
	fmt.Println(v.Verify(msg, ed25519.Sign(ed25519.NewKeyFromSeed(make([]byte, 32)), msg)))
	// Output:
	// true
	// true
	// false
	// false
}

func ExampleGenerate() {
	dir, err := os.MkdirTemp("", "tmmu-secrets")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// natsAuth renders the NATS server's authorization block.
	natsAuth := func(users []trust.NATSUser) ([]byte, error) {
		var b strings.Builder
		b.WriteString("authorization { users = [\n")
		for _, u := range users {
			fmt.Fprintf(&b, "  { nkey: %q } # %s/%s\n", u.Nkey, u.Role, u.ID)
		}
		b.WriteString("] }\n")
		return []byte(b.String()), nil
	}
	users, err := trust.Generate(dir, trust.Plan{
		Coordinators: []string{"c0"},
		Workers:      []string{"w1", "w0"},
	}, natsAuth)
	if err != nil {
		log.Fatal(err)
	}
	for _, u := range users {
		fmt.Println(u.Role, u.ID, strings.HasPrefix(u.Nkey, "U"))
	}

	l := trust.Layout{Dir: dir}
	if err := l.TLS(trust.RoleWorker, "w0").Validate(); err != nil {
		log.Fatal(err)
	}
	rel, _ := filepath.Rel(dir, l.Cert(trust.RoleWorker, "w0"))
	fmt.Println(filepath.ToSlash(rel))
	// Output:
	// coordinator c0 true
	// worker w0 true
	// worker w1 true
	// worker/w0.crt
}
