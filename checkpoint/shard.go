package checkpoint

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// Format names the shard encoding.
const Format = "tmmu-shard-v1"

// Operator names the failures this package reports.
const Operator = "tmmu.checkpoint"

// Shard is one rank's model state after a step: everything a rank needs
// to continue bit for bit.
type Shard struct {
	Format string `cbor:"format"`
	// Step is the step the state is after. The data cursor is Step+1:
	// the batch of a step is a function of (Seed, step, rank).
	Step uint64 `cbor:"step"`
	// Rank and World are the writer's data-parallel coordinate and
	// degree: how its partitioned tensors were cut.
	Rank  uint64 `cbor:"rank"`
	World uint64 `cbor:"world"`
	// Seed is the job's seed; data order and any random draw derive from
	// (Seed, step, rank), so it is the whole RNG state.
	Seed uint64 `cbor:"seed"`
	// OptimizerStep is the optimizer's step count for the next step
	// (AdamW's bias correction).
	OptimizerStep uint64 `cbor:"optimizer_step"`
	// Tensors are the persistent tensors (parameters, optimizer state)
	// the rank holds, sorted by ID.
	Tensors []Tensor `cbor:"tensors"`
	// StateHash is the writer's sealed state hash after Step
	// (CommitExecution_v1); zero for executors that hold no state.
	StateHash ir.Hash `cbor:"state_hash"`
	// DataDigest is the digest of the dataset the steps read (package
	// data; empty for the synthetic task): together with Seed and Step
	// it is the data cursor, and a resume on other data is refused.
	DataDigest []byte `cbor:"data_digest,omitempty"`
}

// Tensor is the part of one persistent tensor a shard holds: the elements
// [Offset, Offset+len(Words)/4) of the whole tensor of Numel elements,
// as little-endian 32-bit words. Elements at Numel or beyond are a ZeRO
// partition's padding and are zero.
type Tensor struct {
	ID     string `cbor:"id"`
	Numel  uint64 `cbor:"numel"`
	Offset uint64 `cbor:"offset"`
	Words  []byte `cbor:"words"`
}

// Count returns the number of elements t holds.
func (t *Tensor) Count() uint64 { return uint64(len(t.Words)) / 4 }

// ErrCorrupt is wrapped by Decode when the bytes do not hash to the
// expected digest or do not decode: failure code CHECKPOINT_CORRUPT.
var ErrCorrupt = failure.CheckpointCorrupt

// Encode returns the canonical CBOR encoding of s and its SHA-256, the
// digest that names the object. Equal states encode to equal bytes.
func Encode(s *Shard) ([]byte, ir.Hash, error) {
	if s.Format == "" {
		s.Format = Format
	}
	if err := s.Validate(); err != nil {
		return nil, ir.Hash{}, err
	}
	b, err := ir.CanonicalCBOR(s)
	if err != nil {
		return nil, ir.Hash{}, fmt.Errorf("checkpoint: encoding a shard: %w", err)
	}
	return b, sha256.Sum256(b), nil
}

// Decode checks that data hashes to digest and decodes it. Bytes that do
// not hash to the digest, or that do not decode into a valid shard, are a
// CHECKPOINT_CORRUPT failure naming the digest.
func Decode(data []byte, digest ir.Hash) (*Shard, error) {
	if got := ir.Hash(sha256.Sum256(data)); got != digest {
		return nil, failure.New(failure.CheckpointCorrupt, Operator,
			"a checkpoint object does not hash to its digest", "digest", digest.Short(), "got", got.Short(), "bytes", len(data))
	}
	var s Shard
	if err := ir.UnmarshalCBOR(data, &s); err != nil {
		return nil, failure.New(failure.CheckpointCorrupt, Operator, "a checkpoint object does not decode", "digest", digest.Short()).Wrap(err)
	}
	if err := s.Validate(); err != nil {
		return nil, failure.New(failure.CheckpointCorrupt, Operator, "a checkpoint object is not a valid shard", "digest", digest.Short()).Wrap(err)
	}
	return &s, nil
}

// Validate checks the format, the rank against the world, and every
// tensor: sorted unique ids, whole words, and a slice that starts inside
// the tensor.
func (s *Shard) Validate() error {
	var errs []error
	if s.Format != Format {
		errs = append(errs, fmt.Errorf("checkpoint: format %q, want %q", s.Format, Format))
	}
	if s.World == 0 || s.Rank >= s.World {
		errs = append(errs, fmt.Errorf("checkpoint: rank %d of world %d", s.Rank, s.World))
	}
	for i := range s.Tensors {
		t := &s.Tensors[i]
		if i > 0 && s.Tensors[i-1].ID >= t.ID {
			errs = append(errs, fmt.Errorf("checkpoint: tensors not sorted by id at %q", t.ID))
		}
		if len(t.Words)%4 != 0 {
			errs = append(errs, fmt.Errorf("checkpoint: tensor %q has %d bytes, not whole words", t.ID, len(t.Words)))
		}
		if t.Offset > t.Numel || (t.Offset == t.Numel && t.Numel > 0) {
			errs = append(errs, fmt.Errorf("checkpoint: tensor %q starts at element %d of %d", t.ID, t.Offset, t.Numel))
		}
	}
	return errors.Join(errs...)
}

// Slice is the part of a persistent tensor one rank holds: Count
// elements from Offset of the whole tensor of Numel elements (a ZeRO
// partition holds ceil(Numel/world) elements, padded past Numel).
type Slice struct {
	ID     string
	Numel  uint64
	Offset uint64
	Count  uint64
}

// Layout returns the slices of the persistent tensors a rank of a
// data-parallel group holds in view (its rank-local graph): every
// persistent tensor that owns its storage, sorted by id. A tensor with as
// many elements as the one of the same id in global is whole; one with
// ceil(numel/size) elements is rank's ZeRO partition. Anything else (a
// tensor-parallel split) is UNSUPPORTED_EXECUTION.
func Layout(view *ir.Graph, global *ir.Model, rank, size uint64) ([]Slice, error) {
	whole := make(map[string]uint64, len(global.Tensors))
	for i := range global.Tensors {
		t := &global.Tensors[i]
		if n, ok := ir.Numel(t.Shape); ok {
			whole[t.ID] = n
		}
	}
	size = max(size, 1)
	var out []Slice
	for i := range view.Tensors {
		t := &view.Tensors[i]
		if !t.Role.Persistent() || t.View != nil || view.Root[i] != int32(i) {
			continue
		}
		n, _ := ir.Numel(t.Shape) // a compiled graph's shapes do not overflow
		w, ok := whole[t.ID]
		switch {
		case !ok:
			return nil, failure.New(failure.UnsupportedExecution, Operator, fmt.Sprintf("persistent tensor %q is not in the job's graph", t.ID), "tensor", t.ID)
		case n == w:
			out = append(out, Slice{ID: t.ID, Numel: w, Count: n})
		case n == (w+size-1)/size:
			out = append(out, Slice{ID: t.ID, Numel: w, Offset: rank * n, Count: n})
		default:
			return nil, failure.New(failure.UnsupportedExecution, Operator,
				fmt.Sprintf("tensor %q holds %d of %d elements: only whole tensors and ZeRO partitions over %d ranks are checkpointed", t.ID, n, w, size), "tensor", t.ID)
		}
	}
	slices.SortFunc(out, func(a, b Slice) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// FromState builds the shard of a rank's state: state holds each slice's
// Count words by tensor id.
func FromState(layout []Slice, state map[string][]uint32) ([]Tensor, error) {
	out := make([]Tensor, 0, len(layout))
	for _, s := range layout {
		w, ok := state[s.ID]
		if !ok || uint64(len(w)) != s.Count {
			return nil, fmt.Errorf("checkpoint: tensor %q: the executor holds %d words, the layout %d", s.ID, len(w), s.Count)
		}
		out = append(out, Tensor{ID: s.ID, Numel: s.Numel, Offset: s.Offset, Words: wordsToBytes(w)})
	}
	return out, nil
}

// Recut returns, for each slice of layout, its Count words assembled
// from the source shards (all from one checkpoint, any world): elements
// past Numel are zero. Every element below Numel must be held by some
// source, and the sources must agree on each tensor's size and on the
// step, seed and optimizer step.
func Recut(sources []*Shard, layout []Slice) (map[string][]uint32, error) {
	if err := consistent(sources); err != nil {
		return nil, err
	}
	held := map[string][]*Tensor{}
	for _, s := range sources {
		for i := range s.Tensors {
			t := &s.Tensors[i]
			held[t.ID] = append(held[t.ID], t)
		}
	}
	out := make(map[string][]uint32, len(layout))
	for _, sl := range layout {
		words := make([]uint32, sl.Count)
		lo, hi := sl.Offset, min(sl.Offset+sl.Count, sl.Numel)
		// Sources in offset order: next is the first element no source
		// before covered, and a gap before a source is never covered.
		ts := slices.Clone(held[sl.ID])
		slices.SortStableFunc(ts, func(a, b *Tensor) int { return cmp.Compare(a.Offset, b.Offset) })
		next := lo
		for _, t := range ts {
			if t.Numel != sl.Numel {
				return nil, failure.New(failure.CheckpointCorrupt, Operator,
					fmt.Sprintf("tensor %q has %d elements in the checkpoint and %d in the plan", sl.ID, t.Numel, sl.Numel), "tensor", sl.ID)
			}
			a, b := max(lo, t.Offset), min(hi, t.Offset+t.Count())
			if a >= b || b <= next {
				continue
			}
			if a > next {
				break
			}
			for k := next; k < b; k++ {
				words[k-lo] = binary.LittleEndian.Uint32(t.Words[(k-t.Offset)*4:])
			}
			next = b
		}
		if next < hi {
			return nil, failure.New(failure.CheckpointCorrupt, Operator,
				fmt.Sprintf("no shard of the checkpoint holds elements [%d,%d) of tensor %q", next, hi, sl.ID), "tensor", sl.ID)
		}
		out[sl.ID] = words
	}
	return out, nil
}

// Gather returns every tensor of a checkpoint whole (Numel words by id),
// assembled from its shards: the model state independent of how it was
// cut.
func Gather(sources []*Shard) (map[string][]uint32, error) {
	if err := consistent(sources); err != nil {
		return nil, err
	}
	var layout []Slice
	seen := map[string]bool{}
	for _, s := range sources {
		for _, t := range s.Tensors {
			if !seen[t.ID] {
				seen[t.ID] = true
				layout = append(layout, Slice{ID: t.ID, Numel: t.Numel, Count: t.Numel})
			}
		}
	}
	return Recut(sources, layout)
}

func consistent(sources []*Shard) error {
	if len(sources) == 0 {
		return errors.New("checkpoint: no shards")
	}
	a := sources[0]
	for _, s := range sources[1:] {
		if s.Step != a.Step || s.Seed != a.Seed || s.OptimizerStep != a.OptimizerStep || s.World != a.World {
			return failure.New(failure.CheckpointCorrupt, Operator,
				fmt.Sprintf("the shards disagree: step %d/%d, seed %d/%d, optimizer step %d/%d, world %d/%d",
					a.Step, s.Step, a.Seed, s.Seed, a.OptimizerStep, s.OptimizerStep, a.World, s.World))
		}
	}
	return nil
}

// Words returns the shard's tensors as words by id (a same-world restore).
func (s *Shard) Words() map[string][]uint32 {
	out := make(map[string][]uint32, len(s.Tensors))
	for _, t := range s.Tensors {
		out[t.ID] = bytesToWords(t.Words)
	}
	return out
}

func wordsToBytes(w []uint32) []byte {
	b := make([]byte, 4*len(w))
	for i, x := range w {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func bytesToWords(b []byte) []uint32 {
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}
