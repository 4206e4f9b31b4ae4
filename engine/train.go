package engine

import (
	"math"
	"strings"

	"github.com/tmmu/tmmu/ir"
)

// Init gives a parameter element its initial value: id and shape are the
// whole (unpartitioned) parameter's, i its flat element index.
type Init func(id string, shape []uint64, i uint64) float32

// DefaultInit is GPT-2's: vectors whose id ends in ".w" or ".weight"
// (norm weights) are ones, other vectors (biases) zeros, and matrices
// N(0, 0.02), drawn
// from a hash of (id, i) so that a rank holding a partition draws the
// same values as an unpartitioned run.
func DefaultInit(id string, shape []uint64, i uint64) float32 {
	if len(shape) <= 1 {
		if strings.HasSuffix(id, ".w") || strings.HasSuffix(id, ".weight") {
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
// A parameter the engine's Options.Weights hold is copied from there
// instead of drawn from init.
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
		w, loaded := e.opts.Weights[id]
		if loaded && uint64(len(w)) != total {
			return unsupported("initial weights: parameter %q has %d elements, the weights %d", id, total, len(w))
		}
		for k := range v {
			if g := first + uint64(k); g < total {
				if loaded {
					v[k] = w[g]
				} else {
					v[k] = init(id, shape, g)
				}
			}
		}
		if err := e.WriteTensor(id, e.encode(ti, v)); err != nil {
			return err
		}
	}
	return nil
}

// encode returns tensor ti's words holding values v (rounded toward
// zero for integer tensors).
func (e *Engine) encode(ti int32, v []float32) []uint32 {
	switch e.g.Tensors[ti].DType {
	case ir.I32:
		w := make([]uint32, len(v))
		for i, x := range v {
			w[i] = uint32(int32(x))
		}
		return w
	case ir.I64:
		w := make([]uint32, 2*len(v))
		for i, x := range v {
			w[2*i], w[2*i+1] = uint32(int32(x)), uint32(int32(x)>>31)
		}
		return w
	case ir.Bool, ir.U8:
		w := make([]uint32, (len(v)+3)/4)
		for i, x := range v {
			w[i/4] |= uint32(byte(x)) << (8 * (i % 4))
		}
		return w
	}
	return Words(v)
}

// partitioned returns the whole shape of a parameter this rank holds a
// ZeRO-3 partition of: the input of a dp.all_gather into a whole copy.
func (e *Engine) partitioned(id string) ([]uint64, bool) {
	for i := range e.g.Nodes {
		n := &e.g.Nodes[i]
		if n.Op == ir.OpDPAllGather && n.Inputs[0] == id && n.Outputs[0] != id {
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
		start := rowStart(seed, step, r, vocab)
		for i := range seq {
			tokens[r*seq+i] = int32((start + i) % vocab)
			labels[r*seq+i] = int32((start + i + 1) % vocab)
		}
	}
	return tokens, labels
}

// rowStart is the first token of row r of step's global batch.
func rowStart(seed, step, r, vocab uint64) uint64 {
	h := step*0x9e3779b97f4a7c15 ^ (r+1)*0xbf58476d1ce4e5b9 ^ seed*0x94d049bb133111eb
	return splitmix(&h) % vocab
}

// batchInto writes rows [lo, lo+len(tok)/seq) of Batch's tokens and
// labels into tok and lab, as words.
func batchInto(seed, step, lo, seq, vocab uint64, tok, lab []uint32) {
	for r := range uint64(len(tok)) / seq {
		start := rowStart(seed, step, lo+r, vocab)
		for i := range seq {
			tok[r*seq+i] = uint32((start + i) % vocab)
			lab[r*seq+i] = uint32((start + i + 1) % vocab)
		}
	}
}

// FeedLM writes this rank's slice of the synthetic global batch of step
// (Batch) into the graph's inputs "tokens" [B,S] and "labels" [B,S]
// (rows DataRank·B …), and 0…S-1 into "positions" when the graph has
// it.
func (e *Engine) FeedLM(step, vocab uint64) error {
	in, err := lmInputsOf(e.g)
	if err != nil {
		return err
	}
	B, S := in.B, in.S
	if len(e.feed.tokens) != int(B*S) {
		e.feed.tokens, e.feed.labels = make([]uint32, B*S), make([]uint32, B*S)
	}
	batchInto(e.opts.Seed, step, e.opts.DataRank*B, S, vocab, e.feed.tokens, e.feed.labels)
	return e.writeLM(S)
}
