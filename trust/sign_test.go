package trust

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// newSigner returns a fresh Signer or fails the test.
func newSigner(t *testing.T) *Signer {
	t.Helper()
	s, err := NewSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// writeTemp writes data to a file in a new temporary directory.
func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "f.pem")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestSignVerify(t *testing.T) {
	old, cur, other := newSigner(t), newSigner(t), newSigner(t)
	msg := []byte("job j epoch 3 agreed")
	sig := cur.Sign(msg)
	tampered := bytes.Clone(msg)
	tampered[0] ^= 1

	// The public key file of a rotation: old and current keys.
	pub, err := PublicPEM(old.Public(), cur.Public())
	if err != nil {
		t.Fatal(err)
	}
	rotation, err := LoadVerifier(writeTemp(t, pub))
	if err != nil {
		t.Fatal(err)
	}
	// The current key, as a coordinator would load it from disk.
	priv, err := cur.PrivatePEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadSigner(writeTemp(t, priv))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		v        *Verifier
		msg, sig []byte
		want     bool
	}{
		{"ok", NewVerifier(cur.Public()), msg, sig, true},
		{"tampered message", NewVerifier(cur.Public()), tampered, sig, false},
		{"tampered signature", NewVerifier(cur.Public()), msg, append(bytes.Clone(sig[:63]), sig[63]^1), false},
		{"other key", NewVerifier(other.Public()), msg, sig, false},
		{"rotation: old key", rotation, msg, old.Sign(msg), true},
		{"rotation: current key", rotation, msg, sig, true},
		{"rotation: other key", rotation, msg, other.Sign(msg), false},
		{"loaded signer", NewVerifier(cur.Public()), msg, loaded.Sign(msg), true},
		{"no context: raw ed25519", NewVerifier(cur.Public()), msg, ed25519.Sign(cur.key, msg), false},
		{"context in the message", NewVerifier(cur.Public()), []byte(Context + string(msg)), sig, false},
		{"nil verifier", nil, msg, sig, false},
		{"no keys", NewVerifier(), msg, sig, false},
		{"short key skipped", NewVerifier(ed25519.PublicKey{1, 2}, cur.Public()), msg, sig, true},
		{"short signature", NewVerifier(cur.Public()), msg, sig[:10], false},
		{"nil signature", NewVerifier(cur.Public()), msg, nil, false},
		{"empty message", NewVerifier(cur.Public()), nil, cur.Sign(nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.Verify(tc.msg, tc.sig); got != tc.want {
				t.Errorf("Verify = %v, want %v", got, tc.want)
			}
		})
	}
	// The signature really is over Context followed by the message.
	if !ed25519.Verify(cur.Public(), []byte(Context+string(msg)), sig) {
		t.Error("signature is not over Context+msg")
	}
}

func TestSigningKeyFilesRefused(t *testing.T) {
	s := newSigner(t)
	priv, _ := s.PrivatePEM()
	pub, _ := PublicPEM(s.Public())
	ca := newCA(t)
	caKey, _ := ca.KeyPEM()
	ecPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ca.Cert.RawSubjectPublicKeyInfo})
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name   string
		load   func(string) error
		file   string
		reason string
	}{
		{"signer: missing", loadSigner, missing, "no such file"},
		{"signer: public key", loadSigner, writeTemp(t, pub), `"PUBLIC KEY"`},
		{"signer: ECDSA key", loadSigner, writeTemp(t, caKey), "want an ed25519 key"},
		{"signer: junk", loadSigner, writeTemp(t, []byte("junk")), "no PEM block"},
		{"verifier: missing", loadVerifier, missing, "no such file"},
		{"verifier: empty", loadVerifier, writeTemp(t, nil), "no public key"},
		{"verifier: private key", loadVerifier, writeTemp(t, priv), `"PRIVATE KEY"`},
		{"verifier: ECDSA key", loadVerifier, writeTemp(t, ecPub), "want an ed25519 key"},
		{"verifier: garbled", loadVerifier, writeTemp(t, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1}})), "trust: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.load(tc.file)
			if err == nil || !strings.HasPrefix(err.Error(), "trust: ") || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("= %v, want a trust: error with %q", err, tc.reason)
			}
		})
	}
	if _, err := PublicPEM(); err == nil {
		t.Error("PublicPEM() with no key succeeded")
	}
	if _, err := PublicPEM(ed25519.PublicKey{1}); err == nil {
		t.Error("PublicPEM of a short key succeeded")
	}
}

func loadSigner(f string) error   { _, err := LoadSigner(f); return err }
func loadVerifier(f string) error { _, err := LoadVerifier(f); return err }

func TestTokensAndNkeys(t *testing.T) {
	a, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewToken()
	if raw, err := hex.DecodeString(a); err != nil || len(raw) != 32 || a != strings.ToLower(a) {
		t.Errorf("token %q is not 32 bytes in lower-case hex", a)
	}
	if a == b {
		t.Error("two tokens are equal")
	}

	seed, pub, err := NewUserNkey()
	if err != nil {
		t.Fatal(err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		t.Errorf("public key %q is not a user nkey", pub)
	}
	if got, err := userNkey(seed); err != nil || got != pub {
		t.Errorf("seed's public key %q, %v; want %q", got, err, pub)
	}
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	if _, err := userNkey(acctSeed); err == nil {
		t.Error("an account seed passed as a user seed")
	}
}
