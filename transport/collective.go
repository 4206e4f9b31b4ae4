package transport

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// CollectiveBucket is the KV bucket of the collectives: key
// "<job>.<key hash>.<rank>.<part>" holds part of rank's contribution to
// one exchange (4 bytes of part count, then the bytes). Entries expire
// after CollectiveTTL.
const CollectiveBucket = "tmmu_coll"

// CollectiveTTL is how long a contribution is kept: long enough for a
// rank that restarts, or that lost its connection while NATS restarted,
// to read what the others sent before it came back.
const CollectiveTTL = 10 * time.Minute

// collectiveChunk is the largest part of a contribution: what one
// message carries, less room for the protocol.
func collectiveChunk(nc *nats.Conn) int {
	return max(int(nc.MaxPayload())-4096, 4096)
}

// Group is one rank's membership in a job's collective group: Exchange
// stores this rank's bytes for a key and returns every rank's for that
// key, in rank order. Contributions are stored in JetStream
// (CollectiveBucket), in parts when larger than a message, so a rank that
// asks late — it restarted, or its connection dropped while NATS
// restarted — still gets what the others sent earlier. Every member
// watches the job's contributions from NewGroup on, including those
// stored before.
type Group struct {
	kv      jetstream.KeyValue
	job     string
	rank    int
	size    int
	chunk   int
	timeout time.Duration
	stop    context.CancelFunc
	done    chan struct{}
	retries atomic.Uint64

	mu      sync.Mutex
	changed chan struct{}
	pending map[string]*gathering // by key hash
}

type gathering struct {
	parts [][][]byte // rank → parts
	got   []int      // rank → parts received
	want  []int      // rank → parts expected (0 = unknown)
	seen  time.Time
}

// NewGroup makes rank (of size) a member of job's collective group.
// timeout, when above 0, bounds each Exchange; with 0 an Exchange waits
// for every rank until its context ends (a worker cancels a step that a
// rollback abandoned, so a rank that died makes the others wait, not
// fail).
func (t *Transport) NewGroup(job string, rank, size int, timeout time.Duration) (*Group, error) {
	if err := ValidJob(job); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("transport: rank %d of a group of %d", rank, size)
	}
	ctx, stop := context.WithCancel(context.Background())
	type entry struct {
		key   string
		value []byte
	}
	entries, err := watch(ctx, t, t.coll, job+".>", func(e jetstream.KeyValueEntry) (entry, bool) {
		return entry{e.Key(), e.Value()}, e.Operation() == jetstream.KeyValuePut
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("transport: watching %s collectives: %w", job, err)
	}
	g := &Group{kv: t.coll, job: job, rank: rank, size: size, chunk: collectiveChunk(t.nc), timeout: timeout, stop: stop,
		done: make(chan struct{}), changed: make(chan struct{}), pending: map[string]*gathering{}}
	go func() {
		defer close(g.done)
		for e := range entries {
			g.receive(e.key, e.value)
		}
	}()
	return g, nil
}

// Retries returns how many times storing a contribution was retried.
func (g *Group) Retries() uint64 { return g.retries.Load() }

func (g *Group) Size() int { return g.size }
func (g *Group) Rank() int { return g.rank }

// Close stops watching.
func (g *Group) Close() error {
	g.stop()
	<-g.done
	return nil
}

func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:12])
}

func (g *Group) receive(key string, value []byte) {
	f := strings.Split(strings.TrimPrefix(key, g.job+"."), ".")
	if len(f) != 3 || len(value) < 4 {
		return
	}
	rank, err1 := strconv.Atoi(f[1])
	part, err2 := strconv.Atoi(f[2])
	parts := int(binary.LittleEndian.Uint32(value))
	if err1 != nil || err2 != nil || rank < 0 || rank >= g.size || parts < 1 || part < 0 || part >= parts {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.gathering(f[0])
	if p.want[rank] != parts {
		// First sight, or a restarted rank sent its contribution again
		// in another number of parts: start over for that rank.
		p.want[rank], p.got[rank], p.parts[rank] = parts, 0, make([][]byte, parts)
	}
	if p.parts[rank][part] == nil {
		p.got[rank]++
	}
	p.parts[rank][part] = value[4:]
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *Group) gathering(h string) *gathering {
	p := g.pending[h]
	if p == nil {
		p = &gathering{parts: make([][][]byte, g.size), got: make([]int, g.size), want: make([]int, g.size)}
		g.pending[h] = p
	}
	p.seen = time.Now()
	return p
}

// Exchange stores data under key and waits for every rank's. Storing is
// retried, with backoff, until it succeeds or ctx ends: a NATS restart
// delays an exchange, it does not fail it.
func (g *Group) Exchange(ctx context.Context, key string, data []byte) ([][]byte, error) {
	h := keyHash(key)
	parts := max(1, (len(data)+g.chunk-1)/g.chunk)
	for i := range parts {
		chunk := data[min(i*g.chunk, len(data)):min((i+1)*g.chunk, len(data))]
		v := make([]byte, 4+len(chunk))
		binary.LittleEndian.PutUint32(v, uint32(parts))
		copy(v[4:], chunk)
		k := fmt.Sprintf("%s.%s.%d.%d", g.job, h, g.rank, i)
		for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
			// Each attempt is bounded: a request sent while the
			// connection was down may never be answered.
			actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
			_, err := g.kv.Put(actx, k, v)
			cancel()
			if err == nil {
				break
			}
			if errors.Is(err, nats.ErrConnectionClosed) {
				return nil, fmt.Errorf("transport: collective %q: %w", key, err)
			}
			g.retries.Add(1)
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("transport: collective %q: %w (storing: %v)", key, ctx.Err(), err)
			case <-time.After(wait):
			}
		}
	}
	var expire <-chan time.Time
	if g.timeout > 0 {
		timer := time.NewTimer(g.timeout)
		defer timer.Stop()
		expire = timer.C
	}
	for {
		g.mu.Lock()
		p := g.gathering(h)
		done := true
		for r := range g.size {
			done = done && p.want[r] > 0 && p.got[r] == p.want[r]
		}
		if done {
			out := make([][]byte, g.size)
			for r := range g.size {
				for _, b := range p.parts[r] {
					out[r] = append(out[r], b...)
				}
			}
			delete(g.pending, h)
			g.forget()
			g.mu.Unlock()
			return out, nil
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-g.done:
			// The watch ended: the group was closed, or its connection
			// for good. Nothing more will arrive.
			return nil, fmt.Errorf("transport: collective %q: %w", key, ErrGroupClosed)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-expire:
			return nil, fmt.Errorf("transport: collective %q: %w: not every rank of %d sent its data within %s", key, ErrCollectiveTimeout, g.size, g.timeout)
		}
	}
}

// AttemptTimeout bounds one attempt to store something that is retried
// until it is stored.
const AttemptTimeout = 2 * time.Second

// ErrGroupClosed is wrapped by an Exchange whose group stopped watching
// (closed, or its NATS connection closed for good).
var ErrGroupClosed = errors.New("the collective group is closed")

// ErrCollectiveTimeout is wrapped by an Exchange that timed out.
var ErrCollectiveTimeout = errors.New("collective timed out")

// forget drops what was gathered for exchanges nobody asked for within
// the bucket's TTL (other ranks' old contributions replayed at start).
// g.mu is held.
func (g *Group) forget() {
	for h, p := range g.pending {
		if time.Since(p.seen) > CollectiveTTL {
			delete(g.pending, h)
		}
	}
}
