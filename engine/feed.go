package engine

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

// Data is what an executor feeds its graph instead of the synthetic
// counting task: a training stream and, for validation, a stream and
// how many of its batches a validation reads. The streams' Batch is the
// global batch (the graph's batch times the data-parallel size); this
// rank reads rows DataRank·B … of each.
type Data struct {
	Train      *data.Stream
	Val        *data.Stream
	ValBatches uint64
}

// lmInputs are a language model's inputs: token ids and labels [B,S]
// (int32), and positions [S] when the graph has them.
type lmInputs struct {
	tokens, labels string
	B, S           uint64
}

// lmInputsOf finds a generator language model's inputs.
func lmInputsOf(g *ir.Graph) (lmInputs, error) {
	in := lmInputs{tokens: "tokens", labels: "labels"}
	ti, ok := g.TensorIndex(in.tokens)
	if !ok {
		return in, fmt.Errorf("engine: the graph has no input \"tokens\"")
	}
	shape := g.Tensors[ti].Shape
	if len(shape) != 2 {
		return in, fmt.Errorf("engine: tokens has shape %v, want [batch, seq]", shape)
	}
	in.B, in.S = shape[0], shape[1]
	li, ok := g.TensorIndex(in.labels)
	if !ok || !equalShape(g.Tensors[li].Shape, shape) {
		return in, fmt.Errorf("engine: the graph has no input \"labels\" of tokens' shape %v", shape)
	}
	return in, nil
}

func equalShape(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// SetData makes the executor feed d from its next step on. For a
// language model the streams must be token streams of the graph's
// sequence length, for an image classifier image sets of its samples'
// shape; either way with a global batch of the graph's batch times the
// data-parallel size.
func (x *Executor) SetData(d Data) error {
	for _, s := range []*data.Stream{d.Train, d.Val} {
		if s == nil {
			continue
		}
		if im := x.images; im != nil {
			if s.D.Kind != data.Images || !equalShape(s.D.SampleShape, im.sample) {
				return failure.New(failure.InvalidDataset, OpExecute, fmt.Sprintf("the graph takes images of shape %v; the dataset holds %s of %v", im.sample, s.D.Kind, s.D.SampleShape), "file", strings.Join(s.D.Files(), ","))
			}
			if s.Batch != im.B*x.e.opts.DataSize {
				return fmt.Errorf("engine: a stream of %d rows for a graph of %d on %d data-parallel ranks", s.Batch, im.B, x.e.opts.DataSize)
			}
			continue
		}
		in, err := lmInputsOf(x.e.g)
		if err != nil {
			return unsupported("feeding a dataset: %v (datasets feed language models with inputs tokens and labels [batch, seq], and image classifiers with images and labels)", err)
		}
		if s.D.Kind != data.Tokens {
			return failure.New(failure.InvalidDataset, OpExecute, fmt.Sprintf("a %s dataset for a language model's token inputs", s.D.Kind), "file", strings.Join(s.D.Files(), ","))
		}
		if s.Seq != in.S || s.Batch != in.B*x.e.opts.DataSize {
			return fmt.Errorf("engine: a stream of %d rows of %d tokens for a graph of %d rows of %d on %d data-parallel ranks", s.Batch, s.Seq, in.B, in.S, x.e.opts.DataSize)
		}
	}
	if d.Val != nil && d.ValBatches == 0 {
		d.ValBatches = 1
	}
	x.data = d
	return nil
}

// feedTokens writes this rank's rows of the k-th batch of s (k = 0
// first) into the graph's tokens and labels, and the positions.
func (e *Engine) feedTokens(s *data.Stream, k uint64) error {
	in, err := lmInputsOf(e.g)
	if err != nil {
		return err
	}
	n := in.B * in.S
	if uint64(len(e.feed.tokens)) != n {
		e.feed.tokens, e.feed.labels = make([]uint32, n), make([]uint32, n)
		e.feed.i32tok, e.feed.i32lab = make([]int32, n), make([]int32, n)
	}
	if err := s.Tokens(k, e.opts.DataRank*in.B, e.feed.i32tok, e.feed.i32lab); err != nil {
		return err
	}
	for i := range e.feed.i32tok {
		e.feed.tokens[i], e.feed.labels[i] = uint32(e.feed.i32tok[i]), uint32(e.feed.i32lab[i])
	}
	return e.writeLM(in.S)
}

// writeLM writes the fed tokens and labels, and 0…S-1 into "positions"
// when the graph has it.
func (e *Engine) writeLM(S uint64) error {
	if err := e.writeInput("tokens", e.feed.tokens, &e.feed.wide[0]); err != nil {
		return err
	}
	if err := e.writeInput("labels", e.feed.labels, &e.feed.wide[1]); err != nil {
		return err
	}
	if pi, ok := e.g.TensorIndex("positions"); ok {
		n, _ := ir.Numel(e.g.Tensors[pi].Shape)
		if uint64(len(e.feed.positions)) != n {
			e.feed.positions = make([]uint32, n)
			for i := range e.feed.positions {
				e.feed.positions[i] = uint32(uint64(i) % S)
			}
		}
		return e.WriteTensor("positions", e.feed.positions)
	}
	return nil
}

// writeInput writes integer values (one word each) into input id,
// widened to two words each for an int64 tensor (through buf, reused).
func (e *Engine) writeInput(id string, vals []uint32, buf *[]uint32) error {
	ti, ok := e.g.TensorIndex(id)
	if !ok || e.g.Tensors[ti].DType != ir.I64 {
		return e.WriteTensor(id, vals)
	}
	*buf = (*buf)[:0]
	for _, v := range vals {
		*buf = append(*buf, v, uint32(int32(v)>>31))
	}
	return e.WriteTensor(id, *buf)
}

// Validate computes the validation loss after step: the mean of the
// loss over the validation stream's first ValBatches batches, forward
// nodes only (the state is not changed). It returns false when the
// executor has no validation data, or reports no loss (confidential and
// regulated data modes).
func (x *Executor) Validate(ctx context.Context, step uint64) (float64, bool, error) {
	if x.data.Val == nil || x.quiet {
		return 0, false, nil
	}
	sum := 0.0
	for k := range x.data.ValBatches {
		var err error
		if x.images != nil {
			err = x.e.feedImages(*x.images, x.data.Val, k)
		} else {
			err = x.e.feedTokens(x.data.Val, k)
		}
		if err != nil {
			return 0, false, err
		}
		res, err := x.e.Evaluate(ctx, fmt.Sprintf("val%d.%d", step, k))
		if err != nil {
			return 0, false, err
		}
		loss := res.Watched["loss"]
		if len(loss) != 1 {
			return 0, false, fmt.Errorf("engine: loss has %d elements", len(loss))
		}
		sum += float64(math.Float32frombits(loss[0]))
	}
	return sum / float64(x.data.ValBatches), true, nil
}

// imageInputs are an image classifier's inputs: images [B, ...sample]
// (fp32) and labels [B] (integer).
type imageInputs struct {
	B      uint64
	sample []uint64
}

// feedImages writes this rank's rows of the k-th batch of s into the
// graph's images and labels.
func (e *Engine) feedImages(im imageInputs, s *data.Stream, k uint64) error {
	n, _ := ir.Numel(im.sample)
	if uint64(len(e.feed.pixels)) != im.B*n {
		e.feed.pixels, e.feed.i32lab = make([]float32, im.B*n), make([]int32, im.B)
		e.feed.labels = make([]uint32, im.B)
	}
	if err := s.SamplesInto(k, e.opts.DataRank*im.B, e.feed.pixels, e.feed.i32lab); err != nil {
		return err
	}
	return e.writeImages()
}

// feedSyntheticImages writes a deterministic batch for step: pixels
// uniform in [−1, 1) and labels below classes, drawn from (seed, step,
// global row), so every world size sees the same global batch.
func (e *Engine) feedSyntheticImages(im imageInputs, step, classes uint64) error {
	n, _ := ir.Numel(im.sample)
	if uint64(len(e.feed.pixels)) != im.B*n {
		e.feed.pixels, e.feed.i32lab = make([]float32, im.B*n), make([]int32, im.B)
		e.feed.labels = make([]uint32, im.B)
	}
	for r := range im.B {
		h := rowStart(e.opts.Seed, step, e.opts.DataRank*im.B+r, 1<<62)
		e.feed.i32lab[r] = int32(h % classes)
		x := h
		for i := range n {
			e.feed.pixels[r*n+i] = float32(splitmix(&x)>>40)/float32(1<<23) - 1
		}
	}
	return e.writeImages()
}

func (e *Engine) writeImages() error {
	for i, l := range e.feed.i32lab {
		e.feed.labels[i] = uint32(l)
	}
	if err := e.WriteTensor("images", Words(e.feed.pixels)); err != nil {
		return err
	}
	return e.writeInput("labels", e.feed.labels, &e.feed.wide[1])
}
