package coord

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// IRBucket is the JetStream object store bucket where the coordinators
// keep the jobs' IRs, each under its SHA-256: the raft log and snapshots
// hold only the digest, so a large submission never becomes a large log
// entry that followers must take within raft's timeouts.
const IRBucket = "tmmu_ir"

// irPrefix is the prefix of the IR objects' names.
const irPrefix = "ir/"

func irName(d ir.Hash) string { return irPrefix + d.String() }

// ErrNoIRStore is returned while the node has no IR store (NATS is not up
// yet): submissions and replans wait for it.
var ErrNoIRStore = errors.New("coord: the IR store is not open yet (NATS)")

// irCache keeps recently used IRs in memory, up to maxIRCache bytes.
type irCache struct {
	mu    sync.Mutex
	m     map[ir.Hash][]byte
	order []ir.Hash
	bytes int
}

const maxIRCache = 256 << 20

func (c *irCache) get(d ir.Hash) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[d]
	return b, ok
}

func (c *irCache) put(d ir.Hash, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[d]; ok || len(b) > maxIRCache {
		return
	}
	if c.m == nil {
		c.m = map[ir.Hash][]byte{}
	}
	for c.bytes+len(b) > maxIRCache && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.bytes -= len(c.m[old])
		delete(c.m, old)
	}
	c.m[d] = b
	c.order = append(c.order, d)
	c.bytes += len(b)
}

// SetIRStore sets the store of the jobs' IRs: the object store bucket
// IRBucket (every coordinator the same), once NATS is up.
func (n *Node) SetIRStore(s checkpoint.Store) { n.irStore.Store(&s) }

func (n *Node) irs() checkpoint.Store {
	if p := n.irStore.Load(); p != nil {
		return *p
	}
	return nil
}

// putModel stores an IR and returns its digest.
func (n *Node) putModel(ctx context.Context, data []byte) (ir.Hash, error) {
	s := n.irs()
	if s == nil {
		return ir.Hash{}, ErrNoIRStore
	}
	d := ir.Hash(sha256.Sum256(data))
	if err := s.Put(ctx, irName(d), data); err != nil {
		return ir.Hash{}, fmt.Errorf("coord: storing the IR %s: %w", d.Short(), err)
	}
	n.irCache.put(d, data)
	return d, nil
}

// model returns the canonical CBOR of ref: inline, cached, or read from
// the IR store and checked against its digest.
func (n *Node) model(ctx context.Context, ref api.ModelRef) ([]byte, error) {
	if ref.Inline != nil {
		return ref.Inline, nil
	}
	if b, ok := n.irCache.get(ref.Digest); ok {
		return b, nil
	}
	s := n.irs()
	if s == nil {
		return nil, ErrNoIRStore
	}
	b, err := s.Get(ctx, irName(ref.Digest))
	if err != nil {
		return nil, fmt.Errorf("coord: reading the IR %s: %w", ref.Digest.Short(), err)
	}
	if ir.Hash(sha256.Sum256(b)) != ref.Digest {
		return nil, failure.New(failure.InvalidEncoding, api.OpCoordinator, "the IR store holds other bytes under an IR's digest", "digest", ref.Digest.String())
	}
	n.irCache.put(ref.Digest, b)
	return b, nil
}

// decodeModel returns the IR of ref, decoded.
func (n *Node) decodeModel(ctx context.Context, ref api.ModelRef) (*ir.Model, error) {
	b, err := n.model(ctx, ref)
	if err != nil {
		return nil, err
	}
	return ir.DecodeCBOR(b)
}

// collectIRs deletes the stored IRs no job of s refers to (a job was
// deleted), except those of submissions still being planned.
func (n *Node) collectIRs(ctx context.Context, s *api.State) error {
	st := n.irs()
	if st == nil {
		return nil
	}
	keep := map[ir.Hash]bool{}
	for _, j := range s.Jobs {
		keep[j.Spec.ModelDigest] = true
		for _, e := range j.Epochs {
			keep[e.ModelDigest] = true
		}
	}
	for _, d := range n.pendingDigests() {
		keep[d] = true
	}
	objs, err := st.List(ctx, irPrefix)
	if err != nil {
		return err
	}
	for _, o := range objs {
		d, err := ir.ParseHash(strings.TrimPrefix(o.Name, irPrefix))
		if err != nil || keep[d] {
			continue
		}
		if err := st.Delete(ctx, o.Name); err != nil {
			return err
		}
	}
	return nil
}
