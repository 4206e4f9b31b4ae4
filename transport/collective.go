package transport

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// CollectiveSubject returns "tmmu.<job>.coll", where the ranks of a job
// exchange collective data (core NATS, not stored).
func CollectiveSubject(job string) (string, error) { return subject(job, "coll") }

// Group is one rank's membership in a job's collective group over NATS:
// Exchange publishes this rank's bytes for a key and returns every rank's
// for that key, in rank order. Messages larger than the server's maximum
// payload are sent in parts. Messages for keys not asked for yet are kept
// until they are.
//
// Every member must subscribe (NewGroup) before any member publishes:
// workers build their executors, and so their groups, before reporting
// ready for their first step, and no rank passes that step's barrier
// until every rank has reported.
type Group struct {
	nc      *nats.Conn
	subject string
	rank    int
	size    int
	timeout time.Duration
	sub     *nats.Subscription

	mu      sync.Mutex
	changed chan struct{}
	pending map[string]*gathering
}

type gathering struct {
	parts [][][]byte // rank → parts
	got   []int      // rank → parts received
	want  []int      // rank → parts expected (0 = unknown)
}

// DefaultCollectiveTimeout bounds one Exchange.
const DefaultCollectiveTimeout = time.Minute

// NewGroup subscribes rank (of size) to job's collective subject.
// timeout bounds each Exchange (0 = DefaultCollectiveTimeout).
func (t *Transport) NewGroup(job string, rank, size int, timeout time.Duration) (*Group, error) {
	subj, err := CollectiveSubject(job)
	if err != nil {
		return nil, err
	}
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("transport: rank %d of a group of %d", rank, size)
	}
	if timeout <= 0 {
		timeout = DefaultCollectiveTimeout
	}
	g := &Group{nc: t.nc, subject: subj, rank: rank, size: size, timeout: timeout,
		changed: make(chan struct{}), pending: map[string]*gathering{}}
	g.sub, err = t.nc.Subscribe(subj, g.receive)
	if err != nil {
		return nil, fmt.Errorf("transport: subscribing to %s: %w", subj, err)
	}
	if err := g.sub.SetPendingLimits(-1, -1); err != nil {
		g.sub.Unsubscribe()
		return nil, err
	}
	// The server has the interest once a flush returns.
	if err := t.nc.Flush(); err != nil {
		g.sub.Unsubscribe()
		return nil, fmt.Errorf("transport: subscribing to %s: %w", subj, err)
	}
	return g, nil
}

func (g *Group) Size() int { return g.size }
func (g *Group) Rank() int { return g.rank }

// Close unsubscribes.
func (g *Group) Close() error { return g.sub.Unsubscribe() }

const (
	hdrKey   = "Tmmu-Key"
	hdrRank  = "Tmmu-Rank"
	hdrPart  = "Tmmu-Part"
	hdrParts = "Tmmu-Parts"
)

func (g *Group) receive(m *nats.Msg) {
	key := m.Header.Get(hdrKey)
	rank, err1 := strconv.Atoi(m.Header.Get(hdrRank))
	part, err2 := strconv.Atoi(m.Header.Get(hdrPart))
	parts, err3 := strconv.Atoi(m.Header.Get(hdrParts))
	if err1 != nil || err2 != nil || err3 != nil || rank < 0 || rank >= g.size || parts < 1 || part < 0 || part >= parts {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.gathering(key)
	if p.want[rank] == 0 {
		p.want[rank] = parts
		p.parts[rank] = make([][]byte, parts)
	}
	if p.want[rank] != parts || p.parts[rank][part] != nil {
		return
	}
	p.parts[rank][part] = m.Data
	p.got[rank]++
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *Group) gathering(key string) *gathering {
	p := g.pending[key]
	if p == nil {
		p = &gathering{parts: make([][][]byte, g.size), got: make([]int, g.size), want: make([]int, g.size)}
		g.pending[key] = p
	}
	return p
}

// Exchange publishes data under key and waits for every rank's.
func (g *Group) Exchange(ctx context.Context, key string, data []byte) ([][]byte, error) {
	chunk := int(g.nc.MaxPayload()) - 1024
	if chunk < 1024 {
		chunk = 1024
	}
	parts := max(1, (len(data)+chunk-1)/chunk)
	for i := range parts {
		m := nats.NewMsg(g.subject)
		m.Header.Set(hdrKey, key)
		m.Header.Set(hdrRank, strconv.Itoa(g.rank))
		m.Header.Set(hdrPart, strconv.Itoa(i))
		m.Header.Set(hdrParts, strconv.Itoa(parts))
		m.Data = data[min(i*chunk, len(data)):min((i+1)*chunk, len(data))]
		if err := g.nc.PublishMsg(m); err != nil {
			return nil, fmt.Errorf("transport: collective %q: %w", key, err)
		}
	}
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	for {
		g.mu.Lock()
		p := g.gathering(key)
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
			delete(g.pending, key)
			g.mu.Unlock()
			return out, nil
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, fmt.Errorf("transport: collective %q: not every rank of %d sent its data within %s", key, g.size, g.timeout)
		}
	}
}
