package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/internal/atomicfile"
	"github.com/tmmu/tmmu/ir"
)

// Store holds checkpoint objects by name. Implementations are safe for
// concurrent use.
type Store interface {
	// Put stores data under name. Putting a name that already holds
	// exactly these bytes is a no-op; one that holds other bytes (a
	// corrupted copy) is overwritten.
	Put(ctx context.Context, name string, data []byte) error
	// Get returns the bytes under name (ErrNotFound when there are none).
	Get(ctx context.Context, name string) ([]byte, error)
	// Delete removes name; deleting a missing name is not an error.
	Delete(ctx context.Context, name string) error
	// List returns the objects whose names start with prefix.
	List(ctx context.Context, prefix string) ([]Object, error)
}

// Object is a stored object's name and size.
type Object struct {
	Name string
	Size uint64
}

// ErrNotFound is returned by Store.Get for a name that holds nothing.
var ErrNotFound = errors.New("checkpoint: no such object")

// ErrStoreFull is wrapped by Store.Put when the store has no room: a
// CHECKPOINT_STORE_FULL failure.
var ErrStoreFull = failure.CheckpointStoreFull

func storeFull(name string, size int, cause error) error {
	return failure.New(failure.CheckpointStoreFull, Operator, "the checkpoint store has no room for an object",
		"object", name, "bytes", size).Wrap(cause)
}

// ObjectName returns the name of rank's shard of job at step, with
// digest its SHA-256: "<job>/<step>/<rank>/<digest hex>". One writer per
// name (a rank), and the digest makes the name content-addressed.
func ObjectName(job string, step, rank uint64, digest ir.Hash) string {
	return fmt.Sprintf("%s/%d/%d/%s", job, step, rank, digest)
}

// JobPrefix is the prefix of every object name of job.
func JobPrefix(job string) string { return job + "/" }

// ParseName splits an object name made by ObjectName.
func ParseName(name string) (job string, step, rank uint64, digest ir.Hash, err error) {
	f := strings.Split(name, "/")
	if len(f) != 4 {
		return "", 0, 0, ir.Hash{}, fmt.Errorf("checkpoint: object name %q: want job/step/rank/digest", name)
	}
	if step, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return "", 0, 0, ir.Hash{}, fmt.Errorf("checkpoint: object name %q: step: %w", name, err)
	}
	if rank, err = strconv.ParseUint(f[2], 10, 64); err != nil {
		return "", 0, 0, ir.Hash{}, fmt.Errorf("checkpoint: object name %q: rank: %w", name, err)
	}
	if digest, err = ir.ParseHash(f[3]); err != nil {
		return "", 0, 0, ir.Hash{}, fmt.Errorf("checkpoint: object name %q: %w", name, err)
	}
	return f[0], step, rank, digest, nil
}

func checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") || strings.ContainsAny(name, "\\\x00") {
		return fmt.Errorf("checkpoint: bad object name %q", name)
	}
	return nil
}

// DirStore keeps objects as files under a directory: the store for a
// single machine (or a shared file system). Files are written to a
// temporary name, synced and renamed, so a name holds whole objects only.
type DirStore struct {
	root     string
	mu       sync.Mutex // serialises the MaxBytes check with its write
	maxBytes uint64
}

// SetMaxBytes bounds the bytes the store holds (0: no bound but the
// disk's): a Put past it fails with ErrStoreFull, as a full disk does.
func (d *DirStore) SetMaxBytes(n uint64) {
	d.mu.Lock()
	d.maxBytes = n
	d.mu.Unlock()
}

// NewDirStore returns a store under root, creating the directory.
func NewDirStore(root string) (*DirStore, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return &DirStore{root: root}, nil
}

func (d *DirStore) path(name string) string { return filepath.Join(d.root, filepath.FromSlash(name)) }

// Put writes data under name (see Store.Put).
func (d *DirStore) Put(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	p := d.path(name)
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.maxBytes > 0 {
		used, err := d.used()
		if err != nil {
			return err
		}
		if used+uint64(len(data)) > d.maxBytes {
			return storeFull(name, len(data), fmt.Errorf("%d of %d bytes used", used, d.maxBytes))
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return d.ioErr(name, len(data), err)
	}
	if err := atomicfile.Write(p, data, 0o600); err != nil {
		return d.ioErr(name, len(data), err)
	}
	return nil
}

func (d *DirStore) ioErr(name string, size int, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return storeFull(name, size, err)
	}
	return fmt.Errorf("checkpoint: writing %s: %w", name, err)
}

func (d *DirStore) used() (uint64, error) {
	var n uint64
	err := filepath.WalkDir(d.root, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		fi, err := e.Info()
		if err == nil {
			n += uint64(fi.Size())
		}
		return err
	})
	return n, err
}

// Get reads the file under name.
func (d *DirStore) Get(ctx context.Context, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(d.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return b, err
}

// Delete removes the file under name.
func (d *DirStore) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := os.Remove(d.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// Drop directories left empty (best effort).
	for dir := filepath.Dir(d.path(name)); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// List walks the files whose names start with prefix.
func (d *DirStore) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	err := filepath.WalkDir(d.root, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || e.IsDir() || strings.HasPrefix(e.Name(), atomicfile.TempPrefix) {
			return err
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !strings.HasPrefix(name, prefix) {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		out = append(out, Object{Name: name, Size: uint64(fi.Size())})
		return nil
	})
	return out, err
}

// DefaultBucket is the JetStream object store bucket of checkpoints.
const DefaultBucket = "tmmu_checkpoints"

// NATSConfig configures a NATS object store.
type NATSConfig struct {
	Bucket   string // default DefaultBucket
	MaxBytes int64  // 0: no limit but the server's
	Replicas int    // default 1 (set it to the cluster's size where NATS is clustered)
	Storage  jetstream.StorageType
}

// NATSStore keeps objects in a JetStream object store bucket: the store
// NATS already gives a tmmu cluster, replicated when NATS is clustered.
type NATSStore struct {
	os jetstream.ObjectStore
}

// NewNATSStore opens the bucket, creating it from cfg when it does not
// exist (an existing bucket is used as it is).
func NewNATSStore(ctx context.Context, js jetstream.JetStream, cfg NATSConfig) (*NATSStore, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	os, err := js.ObjectStore(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		os, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: cfg.Bucket, Description: "tmmu checkpoints: one object per job, step and rank",
			MaxBytes: max(cfg.MaxBytes, 0), Replicas: max(cfg.Replicas, 1), Storage: cfg.Storage})
		if errors.Is(err, jetstream.ErrBucketExists) {
			os, err = js.ObjectStore(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: object store %s: %w", cfg.Bucket, err)
	}
	return &NATSStore{os: os}, nil
}

// WaitNATSStore opens the bucket as NewNATSStore does, trying again every
// second while NATS or its JetStream is not up yet, until ctx ends.
func WaitNATSStore(ctx context.Context, js jetstream.JetStream, cfg NATSConfig) (*NATSStore, error) {
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := NewNATSStore(sctx, js, cfg)
		cancel()
		if err == nil || ctx.Err() != nil {
			return st, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Put stores data under name (see Store.Put).
func (n *NATSStore) Put(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	// An object already stored under the name is kept only when the
	// object store's own digest says it is these bytes (not a corrupted
	// copy).
	if info, err := n.os.GetInfo(ctx, name); err == nil && !info.Deleted && info.Size == uint64(len(data)) && info.Digest == natsDigest(data) {
		return nil
	}
	if _, err := n.os.PutBytes(ctx, name, data); err != nil {
		if full(err) {
			return storeFull(name, len(data), err)
		}
		return fmt.Errorf("checkpoint: storing %s: %w", name, err)
	}
	return nil
}

// natsDigest is the object store's digest of data: "SHA-256=" and the
// URL-safe base64 of its SHA-256.
func natsDigest(data []byte) string {
	h := sha256.New()
	h.Write(data)
	return jetstream.GetObjectDigestValue(h)
}

// full reports whether a JetStream error says the stream has no room.
func full(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == 10023 { // JSInsufficientResourcesErr
		return true
	}
	s := err.Error() // a stream at its MaxBytes: "maximum bytes exceeded" (10077)
	return strings.Contains(s, "maximum bytes exceeded") || strings.Contains(s, "insufficient resources") || strings.Contains(s, "resource limits exceeded")
}

// Get returns the object under name; the client checks the object store's
// own digest as it reads, and Decode checks tmmu's.
func (n *NATSStore) Get(ctx context.Context, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	b, err := n.os.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		return nil, failure.New(failure.CheckpointCorrupt, Operator, "the object store's digest of an object does not match its chunks", "object", name).Wrap(err)
	}
	return b, err
}

// Delete removes the object under name.
func (n *NATSStore) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := n.os.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	return nil
}

// List returns the live objects whose names start with prefix.
func (n *NATSStore) List(ctx context.Context, prefix string) ([]Object, error) {
	infos, err := n.os.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, i := range infos {
		if !i.Deleted && strings.HasPrefix(i.Name, prefix) {
			out = append(out, Object{Name: i.Name, Size: i.Size})
		}
	}
	return out, nil
}

// Overwrite replaces the bytes under name without the size check of Put:
// a test's way to plant a corrupted object.
func (n *NATSStore) Overwrite(ctx context.Context, name string, data []byte) error {
	_, err := n.os.PutBytes(ctx, name, data)
	return err
}
