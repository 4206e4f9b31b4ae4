package trust

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/nats-io/nkeys"
)

// NewToken returns a bearer token: 32 random bytes in lower-case hex.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("trust: token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// NewUserNkey returns a fresh NATS user nkey: its seed (the secret, as
// nkeys encodes it, "SU...") and its public key ("U...").
func NewUserNkey() (seed []byte, public string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", fmt.Errorf("trust: nkey: %w", err)
	}
	if seed, err = kp.Seed(); err != nil {
		return nil, "", fmt.Errorf("trust: nkey: %w", err)
	}
	if public, err = kp.PublicKey(); err != nil {
		return nil, "", fmt.Errorf("trust: nkey: %w", err)
	}
	return seed, public, nil
}

// userNkey returns the public key of a NATS user seed.
func userNkey(seed []byte) (string, error) {
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return "", err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("not a user nkey (public key %s)", pub)
	}
	return pub, nil
}
