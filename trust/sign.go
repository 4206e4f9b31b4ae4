package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// Context is the domain-separation prefix of decision signatures: Sign and
// Verify work on Context followed by the message, so a decision signature
// is never valid for anything else signed with the same key, nor the
// reverse.
const Context = "tmmu decision v1\x00"

// withContext returns Context followed by msg.
func withContext(msg []byte) []byte {
	return append([]byte(Context), msg...)
}

// A Signer signs decisions with an ed25519 key.
type Signer struct {
	key ed25519.PrivateKey
}

// NewSigner returns a Signer with a fresh key.
func NewSigner() (*Signer, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("trust: signing key: %w", err)
	}
	return &Signer{key: key}, nil
}

// LoadSigner reads a key written by PrivatePEM: a PEM "PRIVATE KEY" block
// holding a PKCS #8 ed25519 key.
func LoadSigner(file string) (*Signer, error) {
	key, err := readKey[ed25519.PrivateKey](file, "an ed25519")
	if err != nil {
		return nil, err
	}
	return &Signer{key: key}, nil
}

// PrivatePEM returns the key as a PEM "PRIVATE KEY" block (PKCS #8).
func (s *Signer) PrivatePEM() ([]byte, error) { return keyPEM(s.key) }

// Public returns the public key that verifies s's signatures.
func (s *Signer) Public() ed25519.PublicKey {
	return s.key.Public().(ed25519.PublicKey)
}

// Sign returns the signature of Context followed by msg.
func (s *Signer) Sign(msg []byte) []byte {
	return ed25519.Sign(s.key, withContext(msg))
}

// A Verifier checks decision signatures against one or more public keys.
// Several keys let a cluster rotate its signing key: publish the new
// public key beside the old, switch the signer, then drop the old key.
type Verifier struct {
	keys []ed25519.PublicKey
}

// NewVerifier returns a Verifier that accepts a signature by any of keys.
func NewVerifier(keys ...ed25519.PublicKey) *Verifier {
	return &Verifier{keys: append([]ed25519.PublicKey(nil), keys...)}
}

// LoadVerifier reads one or more PEM "PUBLIC KEY" blocks (PKIX ed25519
// keys), as PublicPEM writes them. It fails on a block of another type or
// key, and when the file holds no key.
func LoadVerifier(file string) (*Verifier, error) {
	rest, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	var keys []ed25519.PublicKey
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("trust: %s holds a PEM %q block, want \"PUBLIC KEY\"", file, b.Type)
		}
		parsed, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("trust: %s: %w", file, err)
		}
		key, ok := parsed.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("trust: %s holds a %T, want an ed25519 key", file, parsed)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("trust: %s holds no public key", file)
	}
	return &Verifier{keys: keys}, nil
}

// PublicPEM encodes keys as consecutive PEM "PUBLIC KEY" blocks (PKIX), the
// format LoadVerifier reads. It fails when keys is empty or a key is not
// ed25519.PublicKeySize bytes.
func PublicPEM(keys ...ed25519.PublicKey) ([]byte, error) {
	if len(keys) == 0 {
		return nil, errors.New("trust: no public key")
	}
	var buf bytes.Buffer
	for _, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("trust: public key of %d bytes, want %d", len(k), ed25519.PublicKeySize)
		}
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("trust: %w", err)
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "PUBLIC KEY", Bytes: der}); err != nil {
			return nil, fmt.Errorf("trust: %w", err)
		}
	}
	return buf.Bytes(), nil
}

// Verify reports whether sig is a signature of Context followed by msg by
// any of v's keys. It is false for a nil Verifier, a signature of the
// wrong length, and keys of the wrong length are skipped.
func (v *Verifier) Verify(msg, sig []byte) bool {
	if v == nil || len(sig) != ed25519.SignatureSize {
		return false
	}
	m := withContext(msg)
	for _, k := range v.keys {
		if len(k) == ed25519.PublicKeySize && ed25519.Verify(k, m, sig) {
			return true
		}
	}
	return false
}
