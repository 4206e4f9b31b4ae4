package transport

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// CollectiveBucket is the KV bucket of the collectives: key
// "<job>.<key hash>.<rank>.<part>.<token>" holds part of rank's
// contribution to one exchange (4 bytes of part count, then the bytes), as
// the identity of token stored it. Entries expire after CollectiveTTL.
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
	t       *Transport
	job     string
	token   string // this rank's identity's
	rank    int
	size    int
	chunk   int
	timeout time.Duration
	stop    context.CancelFunc
	done    chan struct{}
	retries atomic.Uint64
	onRetry atomic.Pointer[RetryHook]

	mu      sync.Mutex
	changed chan struct{}
	pending map[string]*gathering // by key hash
}

type gathering struct {
	from []map[string]*contribution // rank → identity token → its contribution
	// first is, by rank, the token seen first (what counts while the
	// group knows no roster).
	first []string
	seen  time.Time
}

// contribution is one identity's parts of one rank's data.
type contribution struct {
	parts [][]byte
	got   int // parts received
	want  int // parts expected
}

func (c *contribution) complete() bool { return c != nil && c.want > 0 && c.got == c.want }

// NewGroup makes rank (of size) a member of job's collective group.
// timeout, when above 0, bounds each Exchange; with 0 an Exchange waits
// for every rank until its context ends (a worker cancels a step that a
// rollback abandoned, so a rank that died makes the others wait, not
// fail). Contributions are stored under the transport's identity
// (WithIdentity); of a rank's, the group counts those of the identity
// SetRoster names for it (with no roster, the first identity seen).
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
	g := &Group{t: t, job: job, token: IdentityToken(t.o.identity), rank: rank, size: size, chunk: collectiveChunk(t.nc), timeout: timeout, stop: stop,
		done: make(chan struct{}), changed: make(chan struct{}), pending: map[string]*gathering{}}
	go func() {
		defer close(g.done)
		for e := range entries {
			g.receive(e.key, e.value)
		}
	}()
	return g, nil
}

// RetryHook is told of each failed try to store a contribution: the
// exchange's key, the tries of that part so far (from 1) and the error
// (a NATS outage, a bucket that is full or gone).
type RetryHook func(key string, tries int, err error)

// OnRetry sets the hook told of failed stores (nil: none).
func (g *Group) OnRetry(h RetryHook) {
	if h == nil {
		g.onRetry.Store(nil)
		return
	}
	g.onRetry.Store(&h)
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
	if len(f) != 4 || len(value) < 4 || len(f[3]) != tokenLen {
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
	c := p.from[rank][f[3]]
	if c == nil {
		c = &contribution{}
		p.from[rank][f[3]] = c
		if p.first[rank] == "" {
			p.first[rank] = f[3]
		}
	}
	if c.want != parts {
		// First sight, or a restarted rank sent its contribution again
		// in another number of parts: start over for that rank.
		c.want, c.got, c.parts = parts, 0, make([][]byte, parts)
	}
	if c.parts[part] == nil {
		c.got++
	}
	c.parts[part] = value[4:]
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *Group) gathering(h string) *gathering {
	p := g.pending[h]
	if p == nil {
		p = &gathering{from: make([]map[string]*contribution, g.size), first: make([]string, g.size)}
		for r := range p.from {
			p.from[r] = map[string]*contribution{}
		}
		g.pending[h] = p
	}
	p.seen = time.Now()
	return p
}

// counted returns, by rank, the contribution that counts: the roster's
// holder's, or with no roster of the group's size the first seen.
func (g *Group) counted(p *gathering) []*contribution {
	roster := g.t.roster(g.job)
	out := make([]*contribution, g.size)
	for r := range g.size {
		tok := p.first[r]
		if len(roster) == g.size {
			tok = IdentityToken(roster[r])
		}
		out[r] = p.from[r][tok]
	}
	return out
}

// SetRoster names, by rank, the identities whose contributions to job's
// collectives count (the holders of the epoch being run): a worker sets
// it once its epoch is agreed. A roster of another size than a group's is
// not used for it.
func (t *Transport) SetRoster(job string, holders []string) {
	t.rosterMu.Lock()
	t.rosters[job] = slices.Clone(holders)
	t.rosterMu.Unlock()
}

func (t *Transport) roster(job string) []string {
	t.rosterMu.Lock()
	defer t.rosterMu.Unlock()
	return t.rosters[job]
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
		k := fmt.Sprintf("%s.%s.%d.%d.%s", g.job, h, g.rank, i, g.token)
		for try, wait := 1, 20*time.Millisecond; ; try, wait = try+1, min(2*wait, time.Second) {
			// Each attempt is bounded: a request sent while the
			// connection was down may never be answered.
			actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
			_, err := g.t.coll.Put(actx, k, v)
			cancel()
			if err == nil {
				break
			}
			if errors.Is(err, nats.ErrConnectionClosed) {
				return nil, fmt.Errorf("transport: collective %q: %w", key, err)
			}
			g.retries.Add(1)
			if h := g.onRetry.Load(); h != nil {
				(*h)(key, try, err)
			}
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
		counted := g.counted(p)
		done := true
		for _, c := range counted {
			done = done && c.complete()
		}
		if done {
			out := make([][]byte, g.size)
			for r, c := range counted {
				for _, b := range c.parts {
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
