package engine

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/tmmu/tmmu/ir"
)

// Collectives exchanges data among the ranks of one group. Exchange is
// called by every member with the same key, in the same order; it
// returns every member's data in rank order. Reductions are done by each
// member over that list in rank order, so every member computes the same
// bits.
type Collectives interface {
	Size() int
	Rank() int
	Exchange(ctx context.Context, key string, data []byte) ([][]byte, error)
}

// Local is an in-process group: ranks living in one process (the demo,
// tests) really hand each other their bytes.
type Local struct {
	mu      sync.Mutex
	cond    *sync.Cond
	size    int
	round   uint64
	key     string
	data    [][]byte
	arrived int
	result  [][]byte
	err     error
}

// NewLocal returns an in-process group of size members; Member(r) is rank r.
func NewLocal(size int) *Local {
	l := &Local{size: size, data: make([][]byte, size)}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Member returns rank r's view of the group.
func (l *Local) Member(r int) Collectives { return &member{l: l, rank: r} }

type member struct {
	l    *Local
	rank int
}

func (m *member) Size() int { return m.l.size }
func (m *member) Rank() int { return m.rank }

func (m *member) Exchange(ctx context.Context, key string, data []byte) ([][]byte, error) {
	l := m.l
	l.mu.Lock()
	defer l.mu.Unlock()
	round := l.round
	if l.arrived == 0 {
		l.key = key
	} else if l.key != key {
		l.err = fmt.Errorf("engine: collective mismatch: rank %d calls %q while others call %q", m.rank, key, l.key)
		l.cond.Broadcast()
		return nil, l.err
	}
	if l.err != nil {
		return nil, l.err
	}
	l.data[m.rank] = data
	l.arrived++
	if l.arrived == l.size {
		l.result = l.data
		l.data = make([][]byte, l.size)
		l.arrived = 0
		l.round++
		l.cond.Broadcast()
		return l.result, nil
	}
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.cond.Broadcast()
	})
	defer stop()
	for l.round == round && l.err == nil && ctx.Err() == nil {
		l.cond.Wait()
	}
	if l.round != round {
		return l.result, nil
	}
	if l.err != nil {
		return nil, l.err
	}
	return nil, ctx.Err()
}

// collective is a dp.* node: how this rank's input is exchanged and what
// it writes.
type collective struct {
	op      ir.Op
	in, out operand
	inPlace bool
	size    uint64 // group size
}

func (l *lowerer) collective(n *ir.Node) (*collective, error) {
	switch n.Op {
	case ir.OpDPAllReduce, ir.OpDPReduceScatter, ir.OpDPAllGather:
	default:
		return nil, unsupported("node %q: collective %s is not executable yet (tensor- and pipeline-parallel views are planned, not run)", n.ID, n.Op)
	}
	if len(n.Inputs) != 1 || len(n.Outputs) != 1 {
		return nil, unsupported("collective %q: %d inputs, %d outputs", n.ID, len(n.Inputs), len(n.Outputs))
	}
	o, err := l.ops(n.Inputs[0], n.Outputs[0])
	if err != nil {
		return nil, err
	}
	size := uint64(n.Attrs["group_size"])
	if l.e.opts.Collectives == nil || uint64(l.e.opts.Collectives.Size()) != size || l.e.opts.DataSize != size {
		have := 0
		if l.e.opts.Collectives != nil {
			have = l.e.opts.Collectives.Size()
		}
		return nil, unsupported("collective %q needs a data-parallel group of %d ranks; the engine has %d", n.ID, size, have)
	}
	c := &collective{op: n.Op, in: o[0], out: o[1], size: size, inPlace: n.Inputs[0] == n.Outputs[0]}
	in, out := c.in.numel, c.out.numel
	part := (max(in, out) + size - 1) / size
	switch {
	case n.Op == ir.OpDPAllReduce && in != out,
		n.Op == ir.OpDPReduceScatter && out != part,
		n.Op == ir.OpDPAllGather && !c.inPlace && in != part:
		return nil, unsupported("collective %q (%s): %d elements in, %d out over %d ranks", n.ID, n.Op, in, out, size)
	}
	return c, nil
}

// run exchanges and writes the result. dp reductions average (the
// gradient of the mean loss over the global batch); gathers concatenate.
func (c *collective) run(ctx context.Context, e *Engine, key string) error {
	be := e.opts.Backend
	if err := be.Wait(); err != nil {
		return deviceError(err)
	}
	rank := e.opts.DataRank
	n, size := c.in.numel, c.size
	part := (max(c.in.numel, c.out.numel) + size - 1) / size
	send, err := be.Read(c.in.region, c.in.word*4, n*4)
	if err != nil {
		return deviceError(err)
	}
	if c.op == ir.OpDPAllGather && c.inPlace {
		// The whole tensor is in place; this rank's partition is new.
		lo := min(rank*part, n)
		hi := min(lo+part, n)
		send = send[lo*4 : hi*4]
	}
	all, err := e.opts.Collectives.Exchange(ctx, key, send)
	if err != nil {
		return err
	}
	out := make([]byte, c.out.numel*4)
	switch c.op {
	case ir.OpDPAllReduce:
		reduce(out, all, 0, c.out.numel, size)
	case ir.OpDPReduceScatter:
		reduce(out, all, rank*part, c.out.numel, size)
	case ir.OpDPAllGather:
		var at uint64
		for _, b := range all {
			k := copy(out[at:], b)
			at += uint64(k)
		}
	}
	if err := be.Write(c.out.region, c.out.word*4, out); err != nil {
		return deviceError(err)
	}
	return nil
}

// reduce writes into out the average over ranks of each rank's elements
// [from, from+count) (elements past a rank's data count as zero), summed
// in rank order.
func reduce(out []byte, all [][]byte, from, count, size uint64) {
	for i := range count {
		var s float32
		for _, b := range all {
			if j := (from + i) * 4; j+4 <= uint64(len(b)) {
				s += math.Float32frombits(le32(b[j:]))
			}
		}
		put32(out[4*i:], math.Float32bits(s/float32(size)))
	}
}
