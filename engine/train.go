package engine

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
)

// unshared returns p with every storage given bytes of its own: each
// arena's storages are laid end to end (aligned), so no two tensors share
// a byte whatever their lifetimes. Executing it is the reference the
// planned layout must reproduce bit for bit.
func unshared(g *ir.Graph, p *planner.Plan) *planner.Plan {
	q := *p
	q.Tensors = slices.Clone(p.Tensors)
	q.Arenas = slices.Clone(p.Arenas)
	end := map[string]uint64{}
	base := map[string]uint64{} // root id → its new offset
	place := func(i int) int {
		k, _ := slices.BinarySearchFunc(q.Tensors, g.Tensors[i].ID, func(t planner.TensorPlacement, id string) int { return strings.Compare(t.ID, id) })
		return k
	}
	for i := range g.Tensors {
		r := g.Root[i]
		if r != int32(i) {
			continue
		}
		t := &q.Tensors[place(i)]
		align := max(t.Alignment, 256)
		off := (end[t.Arena] + align - 1) / align * align
		base[t.ID] = off
		end[t.Arena] = off + g.StorageBytes[i]
	}
	for i := range g.Tensors {
		t := &q.Tensors[place(i)]
		t.Offset = base[g.Tensors[g.Root[i]].ID] + g.RootOffset[i]
	}
	for i := range q.Arenas {
		q.Arenas[i].ReservedBytes = end[q.Arenas[i].Name]
	}
	return &q
}

// Init gives a parameter element its initial value: id and shape are the
// whole (unpartitioned) parameter's, i its flat element index.
type Init func(id string, shape []uint64, i uint64) float32

// DefaultInit is GPT-2's: vectors whose id ends in ".w" (norm weights)
// are ones, other vectors (biases) zeros, and matrices N(0, 0.02), drawn
// from a hash of (id, i) so that a rank holding a partition draws the
// same values as an unpartitioned run.
func DefaultInit(id string, shape []uint64, i uint64) float32 {
	if len(shape) == 1 {
		if len(id) > 2 && id[len(id)-2:] == ".w" {
			return 1
		}
		return 0
	}
	h := fnv64(id) ^ (i+1)*0x9e3779b97f4a7c15
	u1 := float64(splitmix(&h)>>11+1) / (1 << 53)
	u2 := float64(splitmix(&h)>>11) / (1 << 53)
	return float32(0.02 * math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2))
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func splitmix(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// InitState writes every parameter from init and zeroes the optimizer
// state. A parameter partitioned by ZeRO-3 (the input of a dp.all_gather
// into a whole copy) holds elements [rank·n, rank·n+n) of the whole one.
func (e *Engine) InitState(init Init) error {
	if init == nil {
		init = DefaultInit
	}
	for _, id := range e.persistent() {
		ti, _ := e.g.TensorIndex(id)
		t := &e.g.Tensors[ti]
		if t.Role != ir.Parameter {
			if err := e.ZeroTensor(id); err != nil {
				return err
			}
			continue
		}
		n, _ := ir.Numel(t.Shape)
		shape, first := t.Shape, uint64(0)
		if w, ok := e.partitioned(id); ok {
			shape, first = w, e.opts.DataRank*n
		}
		total, _ := ir.Numel(shape)
		v := make([]float32, n)
		for k := range v {
			if g := first + uint64(k); g < total {
				v[k] = init(id, shape, g)
			}
		}
		if err := e.WriteTensor(id, Words(v)); err != nil {
			return err
		}
	}
	return nil
}

// partitioned returns the whole shape of a parameter this rank holds a
// ZeRO-3 partition of: the input of a dp.all_gather into a whole copy.
func (e *Engine) partitioned(id string) ([]uint64, bool) {
	for i := range e.g.Nodes {
		n := &e.g.Nodes[i]
		if n.Op == "dp.all_gather" && n.Inputs[0] == id && n.Outputs[0] != id {
			ti, _ := e.g.TensorIndex(n.Outputs[0])
			return e.g.Tensors[ti].Shape, true
		}
	}
	return nil, false
}

// Batch is a deterministic language-modelling task: row r of the global
// batch at step s counts up modulo vocab from a start drawn from
// (seed, s, r), and the labels are the next tokens. A model learns it
// quickly, so the loss falls within a few steps.
func Batch(seed, step, rows, seq, vocab uint64) (tokens, labels []int32) {
	tokens = make([]int32, rows*seq)
	labels = make([]int32, rows*seq)
	for r := range rows {
		h := step*0x9e3779b97f4a7c15 ^ (r+1)*0xbf58476d1ce4e5b9 ^ seed*0x94d049bb133111eb
		start := splitmix(&h) % vocab
		for i := range seq {
			tokens[r*seq+i] = int32((start + i) % vocab)
			labels[r*seq+i] = int32((start + i + 1) % vocab)
		}
	}
	return tokens, labels
}

// FeedLM writes this rank's slice of the global batch of step into the
// graph's inputs "tokens" [B,S] and "labels" [B,S] (rows DataRank·B …),
// and 0…S-1 into "positions" when the graph has it. Token ids are
// checked against the vocabulary (the rows of "wte" or the embedding
// table) before anything is written.
func (e *Engine) FeedLM(step, vocab uint64) error {
	ti, ok := e.g.TensorIndex("tokens")
	if !ok {
		return fmt.Errorf("engine: the graph has no input \"tokens\"")
	}
	shape := e.g.Tensors[ti].Shape
	if len(shape) != 2 {
		return fmt.Errorf("engine: tokens has shape %v, want [batch, seq]", shape)
	}
	B, S := shape[0], shape[1]
	tok, lab := Batch(e.opts.Seed, step, B*e.opts.DataSize, S, vocab)
	lo, hi := e.opts.DataRank*B*S, (e.opts.DataRank+1)*B*S
	words := func(v []int32) []uint32 {
		w := make([]uint32, len(v))
		for i, x := range v {
			w[i] = uint32(x)
		}
		return w
	}
	if err := e.WriteTensor("tokens", words(tok[lo:hi])); err != nil {
		return err
	}
	if err := e.WriteTensor("labels", words(lab[lo:hi])); err != nil {
		return err
	}
	if pi, ok := e.g.TensorIndex("positions"); ok {
		n, _ := ir.Numel(e.g.Tensors[pi].Shape)
		pos := make([]uint32, n)
		for i := range pos {
			pos[i] = uint32(uint64(i) % S)
		}
		return e.WriteTensor("positions", pos)
	}
	return nil
}
