// Package families generates offline dynamic storage allocation instances
// by family, so that packing is measured, tuned and tested on instances no
// one picked by hand: every family is a generator with a size and a seed,
// never a fixed file.
//
//   - perfect: rectangles cut from a box H bytes tall and T ticks wide by
//     random guillotine cuts, in bytes or in time, until n pieces remain.
//     The pieces tile the box, so H bytes are live at every tick: the
//     lower bound is H and a placement at the lower bound exists (the
//     box itself). Greedy placers end 20 % to 60 % above it.
//   - halving: the same, with every cut in bytes at the middle of its
//     piece, so every size is a power of two: many pieces share a size
//     and meet in time by chance, which misleads a packer that rebuilds
//     the tiling from pieces of one size meeting.
//   - sliced: the same box, each cut taking any piece with even odds,
//     whatever its area, in time or in bytes: slivers one tick wide or
//     one grain tall, many of which live over the same sections by
//     chance, which misleads a packer that stacks such pieces.
//   - pinwheel: the box of perfect, where a piece picked is cut, with
//     even odds when it is large enough, into a pinwheel: four pieces
//     around a middle one, in either hand, that no cut in time or in
//     bytes separates. The tiling is not guillotine, so a packer that
//     rebuilds it from stacks and chains alone stops at every pinwheel.
//   - banded: perfect's cuts, nine in ten of them in bytes: long thin
//     bands, many of one size, live over the same long sections (much as
//     weights and optimizer state live through a whole step), so each
//     instant starts and ends few pieces but many live across it.
//   - dense: a perfect packing cut from a box with half as many ticks
//     as pieces: about two pieces start at each instant, so pieces of
//     unrelated parts of the tiling end and start together, and live
//     over the same sections, far more often than in perfect's box.
//   - coarse: a perfect packing cut from a box with a tenth as many
//     ticks as pieces, as a training step has far fewer ops than
//     tensors: most instants start and end many pieces, so pieces of
//     unrelated parts of the tiling live over the same sections, and
//     meet at one instant at the same size, by chance.
//   - holed: a perfect packing with pieces missing: each piece that does
//     not start at the first tick is left out with odds of 1 in 32. The
//     bytes live fall short of H wherever a piece is missing, but the
//     first tick is still full, so the lower bound is still H, and the
//     placement of the tiling still reaches it. A packer that rebuilds
//     the tiling from pieces whose sizes add up stops at every hole.
//   - transformer: the training step of GPT-2-shaped and Llama-shaped
//     models with 1 to 96 layers, in train_full under the planner's own
//     schedule and liveness, as a compiler's memory pass (MindSpore's
//     SOMAS) sees it: activations and gradients in one pool, and the
//     kernels of unfused ops (workspaces, transposed copies, attention
//     scores and probabilities, dropout masks, saved row statistics);
//     half the seeds accumulate gradients over two micro-batches. 125 to
//     about 22,000 buffers.
//   - mixed: a training-step pattern with sizes spread over five orders
//     of magnitude: long-lived buffers (weights, optimizer state, caches)
//     that start and end at random, activations saved in the forward pass
//     and freed in reverse in the backward pass, and short-lived
//     temporaries around every step.
//
// Instances are dsa.Instance values, so they plan through the same path
// as the public CSV instances (dsa.Instance.Model, dsa.ArenaConfig), and
// dsa.Instance.Write saves one as a CSV for other tools. The same family,
// size and seed give the same instance on every machine.
package families

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/tmmu/tmmu/dsa"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
)

// Names lists the families.
var Names = []string{"perfect", "halving", "sliced", "pinwheel", "banded", "dense", "coarse", "holed", "transformer", "mixed"}

// rng returns the generator of one instance: PCG seeded by the family and
// the seed, so instances of different families never share a stream.
func rng(family string, seed uint64) *rand.Rand {
	var h uint64 = 14695981039346656037
	for _, c := range []byte(family) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return rand.New(rand.NewPCG(h, seed))
}

// holedOdds: one piece in holedOdds is missing from a holed tiling.
const holedOdds = 32

// PerfectHeight is the height of the box perfect packings are cut from:
// their lower bound and optimum.
const PerfectHeight = 1 << 20

// perfectGrain is the granularity of byte cuts: sizes are multiples of it,
// as tensor sizes are multiples of an element or a vector width.
const perfectGrain = 64

// Perfect cuts n pieces from a box PerfectHeight bytes tall and 4n ticks
// wide (n ≥ 1). Each cut takes a piece at random, weighted by its area,
// and splits it at a uniform point in time or in bytes (the longer side
// relative to the box, so pieces stay of every shape); a piece too thin to
// split in the chosen direction is split in the other one, or left whole.
// The optimum is PerfectHeight, the lower bound.
func Perfect(n int, seed uint64) *dsa.Instance { return tiling("perfect", n, seed, perfectCuts) }

// Halving is Perfect with every cut in bytes at the middle of its piece:
// every size is PerfectHeight over a power of two, so many pieces have
// the same size and meet in time where no cut of the tiling put them
// together, as tensors of power-of-two shapes do. The optimum is
// PerfectHeight, the lower bound.
func Halving(n int, seed uint64) *dsa.Instance { return tiling("halving", n, seed, halvingCuts) }

// Sliced cuts n pieces from the box of Perfect, but each cut takes a
// piece chosen uniformly, whatever its area, and splits it in time or in
// bytes with even odds: pieces are cut again long after they are thin,
// so the box fills with slivers one tick wide or one grain tall, many of
// which live over the same sections or meet at one instant by chance.
// The optimum is PerfectHeight, the lower bound.
func Sliced(n int, seed uint64) *dsa.Instance { return tiling("sliced", n, seed, slicedCuts) }

// Pinwheel cuts n pieces (n ≥ 1) from the box of Perfect, as Perfect
// does, but a piece picked that is at least 3 ticks wide and 3 grains
// tall is cut, with even odds while four more pieces fit in n, into a
// pinwheel of five: a middle piece at a uniform place inside it, and
// four around it, each reaching one side of the piece and the middle, in
// either hand (one is the other's mirror in time). No cut in time or in
// bytes runs through a pinwheel. The optimum is PerfectHeight, the lower
// bound.
func Pinwheel(n int, seed uint64) *dsa.Instance { return tiling("pinwheel", n, seed, pinwheelCuts) }

// Banded is Perfect with nine cuts in ten in bytes (the piece still
// picked by its area; one too thin is cut in time): pieces are long thin
// bands, many of the same size, that live over the same sections where
// one was cut into several. The optimum is PerfectHeight, the lower
// bound.
func Banded(n int, seed uint64) *dsa.Instance { return tiling("banded", n, seed, bandedCuts) }

// Dense is Perfect cut from a box max(n/2, 1) ticks wide: the same cuts,
// with two pieces to a tick, so that pieces of unrelated parts of the
// tiling end and start at one instant, and live over the same sections,
// by chance. The optimum is PerfectHeight, the lower bound.
func Dense(n int, seed uint64) *dsa.Instance { return tiling("dense", n, seed, denseCuts) }

// Coarse is Perfect cut from a box max(n/10, 1) ticks wide: the same
// cuts, but with ten pieces to a tick, most cuts in time fall on an
// instant other cuts fall on too. The optimum is PerfectHeight, the
// lower bound.
func Coarse(n int, seed uint64) *dsa.Instance { return tiling("coarse", n, seed, coarseCuts) }

// Holed is Perfect with pieces missing: n pieces are cut as Perfect cuts
// them (n ≥ 1), and each that does not start at the first tick is then
// left out with odds of 1 in 32, so the instance holds about 31/32 n
// buffers. The first tick stays full, so the lower bound is still
// PerfectHeight, and so is the optimum.
func Holed(n int, seed uint64) *dsa.Instance { return tiling("holed", n, seed, holedCuts) }

// How a tiling chooses its cuts.
type cuts uint8

const (
	perfectCuts  cuts = iota // a piece by area, the longer side, anywhere
	halvingCuts              // the same, bytes cut at the middle
	slicedCuts               // any piece, either side, anywhere
	pinwheelCuts             // as perfect, or a pinwheel
	holedCuts                // as perfect, then pieces left out
	coarseCuts               // as perfect, a tenth as many ticks
	denseCuts                // as perfect, half as many ticks
	bandedCuts               // as perfect, nine cuts in ten in bytes
)

// tiling cuts n pieces from the box of family (perfect, halving, sliced,
// pinwheel, banded, dense, coarse or holed); see Perfect.
func tiling(family string, n int, seed uint64, how cuts) *dsa.Instance {
	r := rng(family, seed)
	type rect struct {
		t0, t1 int64  // ticks
		b0, b1 uint64 // bytes
	}
	width := int64(4 * max(n, 1))
	switch how {
	case coarseCuts:
		width = int64(max(n/10, 1))
	case denseCuts:
		width = int64(max(n/2, 1))
	}
	rects := []rect{{0, width, 0, PerfectHeight}}
	area := func(x rect) float64 { return float64(x.t1-x.t0) * float64(x.b1-x.b0) }
	total := area(rects[0])
	for len(rects) < n {
		var k int
		var inTime bool
		if how == slicedCuts {
			k = r.IntN(len(rects))
			inTime = r.IntN(2) == 0
		} else {
			// Pick a piece with probability proportional to its area,
			// and its longer side relative to the box.
			at := r.Float64() * total
			for k < len(rects)-1 && at >= area(rects[k]) {
				at -= area(rects[k])
				k++
			}
			relT := float64(rects[k].t1-rects[k].t0) / float64(width)
			relB := float64(rects[k].b1-rects[k].b0) / PerfectHeight
			inTime = r.Float64()*(relT+relB) < relT
			if how == bandedCuts {
				inTime = r.IntN(10) == 0
			}
		}
		x := rects[k]
		if how == pinwheelCuts && len(rects)+4 <= n && x.t1-x.t0 >= 3 && x.b1-x.b0 >= 3*perfectGrain && r.IntN(2) == 0 {
			// The middle piece spans [m0, m1) × [c0, c1), strictly
			// inside x; the four around it each reach one side of x.
			m0 := x.t0 + 1 + r.Int64N(x.t1-x.t0-2)
			m1 := m0 + 1 + r.Int64N(x.t1-m0-1)
			grains := (x.b1 - x.b0) / perfectGrain
			g0 := 1 + r.Uint64N(grains-2)
			g1 := g0 + 1 + r.Uint64N(grains-g0-1)
			c0, c1 := x.b0+perfectGrain*g0, x.b0+perfectGrain*g1
			// One hand: bottom from the left side to m1, right from
			// the bottom to c1, top from m0 to the right side, left
			// from c0 to the top. The other: its mirror in time.
			wheel := [5]rect{
				{x.t0, m1, x.b0, c0}, {m1, x.t1, x.b0, c1}, {m0, x.t1, c1, x.b1}, {x.t0, m0, c0, x.b1}, {m0, m1, c0, c1},
			}
			if r.IntN(2) == 0 {
				wheel = [5]rect{
					{m0, x.t1, x.b0, c0}, {x.t0, m0, x.b0, c1}, {x.t0, m1, c1, x.b1}, {m1, x.t1, c0, x.b1}, {m0, m1, c0, c1},
				}
			}
			rects[k] = wheel[0]
			rects = append(rects, wheel[1:]...)
			continue
		}
		canT, canB := x.t1-x.t0 >= 2, x.b1-x.b0 >= 2*perfectGrain
		if inTime && !canT || !inTime && !canB {
			inTime = !inTime
		}
		if inTime && !canT || !inTime && !canB {
			continue // a unit piece (rare when picked by area): pick again
		}
		var a, b rect
		if inTime {
			cut := x.t0 + 1 + r.Int64N(x.t1-x.t0-1)
			a, b = rect{x.t0, cut, x.b0, x.b1}, rect{cut, x.t1, x.b0, x.b1}
		} else {
			grains := (x.b1 - x.b0) / perfectGrain
			cut := x.b0 + perfectGrain*(1+r.Uint64N(grains-1))
			if how == halvingCuts {
				cut = x.b0 + perfectGrain*(grains/2)
			}
			if x.b1-cut < perfectGrain {
				cut = x.b1 - perfectGrain
			}
			a, b = rect{x.t0, x.t1, x.b0, cut}, rect{x.t0, x.t1, cut, x.b1}
		}
		rects[k] = a
		rects = append(rects, b)
	}
	// Shuffle, so that file order says nothing about the tiling.
	r.Shuffle(len(rects), func(i, j int) { rects[i], rects[j] = rects[j], rects[i] })
	if how == holedCuts {
		rects = slices.DeleteFunc(rects, func(x rect) bool { return x.t0 > 0 && r.IntN(holedOdds) == 0 })
	}
	in := &dsa.Instance{Name: fmt.Sprintf("%s-%d-s%d", family, n, seed), Buffers: make([]dsa.Buffer, len(rects))}
	for i, x := range rects {
		in.Buffers[i] = dsa.Buffer{ID: strconv.Itoa(i), Lower: x.t0, Upper: x.t1, Size: x.b1 - x.b0}
	}
	return in
}

// Transformer returns a transformer's training step as a compiler's
// memory pass (MindSpore's SOMAS) sees it, with the given layers (1 to
// 96): every tensor that is not persistent in one pool (activations and
// gradients; a parameter's gradient lives from its backward op to its
// optimizer op), under the planner's own schedule and liveness, and the
// kernels each op runs as on a device without fused kernels. Each op's
// position becomes four ticks, one per kernel it may run, and adds:
//   - a matmul: a workspace (split-K partials, a quarter to all of its
//     output), and for half of them the raw product a bias add then
//     reads; its backward: a transposed copy of an operand and a
//     workspace, and a partial weight gradient added into the gradient;
//   - attention, unfused: the scores and the probabilities (batch ×
//     heads × sequence²), the probabilities and a dropout mask (a byte
//     an element) saved until its backward, which holds the gradients of
//     both;
//   - a normalisation: the mean and reciprocal deviation of each row,
//     saved until its backward, and a scratch row buffer;
//   - the loss: the probabilities over the vocabulary, saved until its
//     backward;
//   - an optimizer step: a workspace of the parameter's size for half of
//     them.
//
// Even seeds take GPT-2's shape, odd ones Llama's (RMSNorm, SwiGLU,
// bf16); seeds 2 and 3 mod 4 accumulate gradients over two
// micro-batches. The seed also picks the width, batch and sequence among
// realistic ones, and which kernels are there.
func Transformer(layers int, seed uint64) (*dsa.Instance, error) {
	if layers < 1 || layers > MaxLayers {
		return nil, fmt.Errorf("families: transformer layers %d outside 1..%d", layers, MaxLayers)
	}
	r := rng("transformer", seed)
	var m *ir.Model
	var err error
	var batch, heads, seq, elt uint64
	shape := "gpt2"
	if seed%2 == 0 {
		c := models.DefaultGPT2Config()
		c.Layers, c.Train = uint64(layers), true
		c.Hidden = []uint64{256, 512, 768, 1024}[r.IntN(4)]
		c.Heads = c.Hidden / 64
		c.Seq = []uint64{128, 256, 512, 1024}[r.IntN(4)]
		c.Context, c.Batch = c.Seq, uint64(1+r.IntN(4))
		c.Vocab = 8192 + uint64(r.IntN(4))*8192
		m, err = models.GPT2(c)
		batch, heads, seq, elt = c.Batch, c.Heads, c.Seq, 4
	} else {
		shape = "llama"
		c := models.DefaultLlamaConfig()
		c.Layers, c.Train = uint64(layers), true
		c.Hidden = []uint64{256, 512, 1024}[r.IntN(3)]
		c.Heads = c.Hidden / 64
		c.KVHeads = c.Heads
		c.Intermediate = c.Hidden * 8 / 3 / 64 * 64
		c.Seq = []uint64{128, 256, 512}[r.IntN(3)]
		c.Batch = uint64(1 + r.IntN(2))
		c.Vocab = 8192 + uint64(r.IntN(4))*8192
		m, err = models.Llama(c)
		batch, heads, seq, elt = c.Batch, c.Heads, c.Seq, 2
	}
	if err != nil {
		return nil, err
	}
	g, err := ir.Compile(m)
	if err != nil {
		return nil, err
	}
	l, err := planner.AnalyzeLiveness(g, planner.TrainFull)
	if err != nil {
		return nil, err
	}
	in := &dsa.Instance{Name: fmt.Sprintf("transformer-%s-%dL-s%d", shape, layers, seed)}
	var step []dsa.Buffer // one micro-batch's forward and backward, then the optimizer
	add := func(id string, lo, hi int64, size uint64) {
		if size > 0 {
			step = append(step, dsa.Buffer{ID: id, Lower: lo, Upper: hi, Size: size})
		}
	}
	const k = 4 // ticks per op: one per kernel
	pooled := []int{ir.ArenaIndex(ir.ArenaActivations), ir.ArenaIndex(ir.ArenaGradients)}
	for _, t := range l.Tensors {
		if g.Root[t] != t || !slices.Contains(pooled, int(g.Arena[t])) || l.StorageBirth[t] < 0 {
			continue
		}
		add(g.Tensors[t].ID, k*int64(l.StorageBirth[t]), k*(int64(l.StorageDeath[t])+1), g.StorageBytes[t])
	}
	// Each forward op that saves state for its backward is paired with
	// the backward op of the same kind, in reverse order.
	backward := map[string][]int64{}
	for p := len(l.Order) - 1; p >= 0; p-- {
		op := string(g.Nodes[l.Order[p]].Op)
		if base, ok := strings.CutSuffix(op, "_backward"); ok {
			backward[base] = append(backward[base], int64(p))
		}
	}
	seen := map[string]int{}
	rows := batch * seq
	scores := batch * heads * seq * seq
	for p, n := range l.Order {
		t0 := k * int64(p)
		id := func(what string) string { return fmt.Sprintf("%s%d", what, p) }
		var out, in0 uint64
		for _, t := range g.Outputs(n) {
			out = max(out, g.Bytes[t])
		}
		if ins := g.Inputs(n); len(ins) > 0 {
			in0 = g.Bytes[ins[0]]
		}
		op := string(g.Nodes[n].Op)
		// saved returns the tick at which the paired backward op ends, or
		// -1 when op has none.
		saved := func() int64 {
			b := backward[op]
			i := seen[op]
			seen[op]++
			if i >= len(b) {
				return -1
			}
			return k * (b[i] + 1)
		}
		// workspace is a GEMM's: split-K partials, a quarter to all of
		// its output, 512-byte aligned.
		workspace := func() uint64 { return (out/4 + uint64(r.IntN(4))*out/4 + 511) / 512 * 512 }
		switch {
		case op == "matmul" && g.Nodes[n].Phase.Norm() == ir.Forward:
			add(id("ws"), t0, t0+1, workspace())
			if r.IntN(2) == 0 {
				add(id("raw"), t0, t0+2, out)
			}
		case op == "matmul":
			add(id("tr"), t0, t0+2, in0)
			add(id("ws"), t0+1, t0+2, workspace())
			add(id("dw"), t0+2, t0+4, out)
		case op == "causal_attention":
			add(id("scores"), t0, t0+2, scores*elt)
			if end := saved(); end > 0 {
				add(id("probs"), t0+1, end, scores*elt)
				add(id("mask"), t0+2, end, scores)
			}
		case op == "causal_attention_backward":
			add(id("dprobs"), t0, t0+2, scores*elt)
			add(id("dscores"), t0+1, t0+3, scores*elt)
		case op == "layernorm" || op == "rmsnorm":
			add(id("row"), t0, t0+1, max(out/64, 256)/256*256)
			if end := saved(); end > 0 {
				add(id("mean"), t0, end, 4*rows)
				add(id("rstd"), t0, end, 4*rows)
			}
		case strings.HasSuffix(op, "norm_backward"):
			add(id("row"), t0, t0+2, max(out/64, 256)/256*256)
		case op == "cross_entropy":
			if end := saved(); end > 0 {
				add(id("softmax"), t0, end, in0)
			}
		case op == "embedding":
			add(id("ws"), t0, t0+1, workspace())
		case op == "adamw":
			if r.IntN(2) == 0 {
				add(id("ws"), t0, t0+2, in0)
			}
		}
	}
	// Seeds 2 and 3 mod 4 accumulate gradients over two micro-batches:
	// what dies before the optimizer runs once per micro-batch, what
	// lives into it (the parameters' gradients) is born in the first and
	// accumulated in the second.
	opt := int64(len(l.Order))
	for p, n := range l.Order {
		if g.Nodes[n].Phase.Norm() == ir.Optimizer {
			opt = int64(p)
			break
		}
	}
	micro := int64(1 + seed/2%2)
	span := k * opt // ticks of one micro-batch
	for _, b := range step {
		switch {
		case b.Upper <= span:
			for m := range micro {
				c := b
				c.Lower, c.Upper = b.Lower+m*span, b.Upper+m*span
				if m > 0 {
					c.ID = fmt.Sprintf("%s/%d", b.ID, m)
				}
				in.Buffers = append(in.Buffers, c)
			}
		case b.Lower < span:
			b.Upper += (micro - 1) * span
			in.Buffers = append(in.Buffers, b)
		default:
			b.Lower, b.Upper = b.Lower+(micro-1)*span, b.Upper+(micro-1)*span
			in.Buffers = append(in.Buffers, b)
		}
	}
	return in, nil
}

// Mixed returns a training-step-like instance of about n buffers (n ≥ 10)
// with sizes spread from 256 bytes to 256 MiB: a tenth long-lived (start
// and end at random, most spanning much of the step), the rest split
// between activations saved in a forward pass and freed in reverse order
// in the backward pass, and temporaries live for one to three ticks.
func Mixed(n int, seed uint64) *dsa.Instance {
	n = max(n, 10)
	r := rng("mixed", seed)
	size := func(lo, hi float64) uint64 { // log-uniform in [2^lo, 2^hi), 256-byte multiples
		v := uint64(1) << uint(lo+r.Float64()*(hi-lo))
		v += r.Uint64N(v)
		return max(v/256*256, 256)
	}
	steps := int64(n / 3)
	horizon := 2*steps + 2
	in := &dsa.Instance{Name: fmt.Sprintf("mixed-%d-s%d", n, seed)}
	add := func(lo, hi int64, sz uint64) {
		in.Buffers = append(in.Buffers, dsa.Buffer{ID: strconv.Itoa(len(in.Buffers)), Lower: lo, Upper: hi, Size: sz})
	}
	long := n / 10
	for range long {
		a, b := r.Int64N(horizon), r.Int64N(horizon)
		if r.IntN(2) == 0 { // most span much of the step
			a, b = r.Int64N(horizon/8+1), horizon-r.Int64N(horizon/8+1)
		}
		add(min(a, b), max(a, b)+1, size(16, 28))
	}
	saved := (n - long) / 2
	for k := range saved {
		// Forward tick f, freed at the mirrored backward tick.
		f := int64(k) * steps / int64(max(saved, 1))
		add(f, 2*steps+1-f, size(10, 24))
	}
	for len(in.Buffers) < n {
		t := r.Int64N(horizon - 3)
		add(t, t+1+r.Int64N(3), size(8, 26))
	}
	return in
}

// Spec names one generated instance.
type Spec struct {
	Family string
	// Size is the buffers of a tiling (perfect, halving, sliced,
	// pinwheel, banded, dense, coarse; the pieces cut, for holed) or a mixed
	// instance, or the layers of a transformer.
	Size int
	Seed uint64
}

func (s Spec) String() string { return fmt.Sprintf("%s-%d-s%d", s.Family, s.Size, s.Seed) }

// tilings are the families of pieces cut from a box, by name.
var tilings = map[string]func(n int, seed uint64) *dsa.Instance{
	"perfect": Perfect, "halving": Halving, "sliced": Sliced, "pinwheel": Pinwheel,
	"banded": Banded, "dense": Dense, "coarse": Coarse, "holed": Holed,
}

// Generate builds the instance a Spec names.
func Generate(s Spec) (*dsa.Instance, error) {
	if tiling, ok := tilings[s.Family]; ok {
		if s.Size < 1 {
			return nil, fmt.Errorf("families: %s needs at least 1 buffer, not %d", s.Family, s.Size)
		}
		return tiling(s.Size, s.Seed), nil
	}
	switch s.Family {
	case "transformer":
		return Transformer(s.Size, s.Seed)
	case "mixed":
		if s.Size < 10 {
			return nil, fmt.Errorf("families: mixed needs at least 10 buffers, not %d", s.Size)
		}
		return Mixed(s.Size, s.Seed), nil
	}
	return nil, fmt.Errorf("families: unknown family %q (families: %s)", s.Family, strings.Join(Names, ", "))
}

// Suite lists the bench's family instances: perfect packings of 100 to
// 10,000 buffers, halving, sliced, pinwheel, banded, dense, coarse and
// holed ones of 100 to 5,000 and mixed instances of 300 to 20,000
// buffers, two seeds each, and transformers of 1 to 96 layers, four seeds
// each (both shapes, with one micro-batch and two). maxBuffers > 0 leaves
// out tilings and mixed instances larger than it (transformers are kept:
// their buffer count depends on the shape the seed picks).
func Suite(maxBuffers int) []Spec {
	var out []Spec
	for _, family := range Names {
		sizes, seeds := suiteOf(family)
		for _, n := range sizes {
			for seed := range seeds {
				if maxBuffers <= 0 || family == "transformer" || n <= maxBuffers {
					out = append(out, Spec{family, n, seed})
				}
			}
		}
	}
	return out
}

// suiteOf returns the sizes the suite holds of family and how many seeds
// of each (0 to seeds-1).
func suiteOf(family string) (sizes []int, seeds uint64) {
	switch family {
	case "perfect":
		return []int{100, 300, 1000, 2000, 5000, 10000}, 2
	case "transformer":
		return []int{1, 4, 12, 24, 48, 96}, 4
	case "mixed":
		return []int{300, 2000, 20000}, 2
	}
	return []int{100, 300, 1000, 2000, 5000}, 2
}

// Limits of Select: the most instances it lists, and the largest tiling
// or mixed instance (cutting a tiling takes time quadratic in its pieces)
// and transformer it takes.
const (
	MaxSelected = 100_000
	MaxBuffers  = 1 << 16
	MaxLayers   = 96
)

// Errors of Select, wrapped with the details.
var (
	ErrFamily = errors.New("families: unknown family")
	ErrSize   = errors.New("families: size out of range")
	ErrCount  = errors.New("families: too many instances")
)

// Select lists the instances of the named families (every family when
// none is named), in the order of Names whatever the names' order, each
// at its sizes and every seed, sizes first. Without sizes a family takes
// the suite's, without seeds the suite's (0 and 1; 0 to 3 for
// transformers), so Select(names, nil, nil) is Suite(0) with those
// families alone. With sizes, a family takes those in its range (tilings
// 1 to MaxBuffers, mixed 10 to MaxBuffers, transformers 1 to MaxLayers),
// in their order: a size no selected family takes, or a named family that
// takes none of them, is ErrSize (where no family is named, a family
// that takes none is left out). More than MaxSelected instances are
// ErrCount, and an unknown family ErrFamily.
func Select(names []string, sizes []int, seeds []uint64) ([]Spec, error) {
	for _, name := range names {
		if !slices.Contains(Names, name) {
			return nil, fmt.Errorf("%w %q (families: %s)", ErrFamily, name, strings.Join(Names, ", "))
		}
	}
	selected := Names
	if len(names) > 0 {
		selected = slices.DeleteFunc(slices.Clone(Names), func(f string) bool { return !slices.Contains(names, f) })
	}
	for _, size := range sizes {
		if !slices.ContainsFunc(selected, func(f string) bool { return takes(f, size) }) {
			// The families that take one range, together.
			var ranges []string
			var named [][]string
			for _, f := range selected {
				lo, hi, what := sizeRange(f)
				r := fmt.Sprintf("%d to %d %s", lo, hi, what)
				if k := slices.Index(ranges, r); k >= 0 {
					named[k] = append(named[k], f)
					continue
				}
				ranges, named = append(ranges, r), append(named, []string{f})
			}
			for k, r := range ranges {
				verb := " takes "
				if len(named[k]) > 1 {
					verb = " take "
				}
				ranges[k] = strings.Join(named[k], ", ") + verb + r
			}
			return nil, fmt.Errorf("%w: %s, not %d", ErrSize, strings.Join(ranges, "; "), size)
		}
	}
	var out []Spec
	for _, family := range selected {
		fsizes, n := suiteOf(family)
		fseeds := seeds
		if fseeds == nil {
			for seed := range n {
				fseeds = append(fseeds, seed)
			}
		}
		if sizes != nil {
			fsizes = slices.DeleteFunc(slices.Clone(sizes), func(size int) bool { return !takes(family, size) })
		}
		if len(fsizes) == 0 {
			if len(names) == 0 {
				continue
			}
			lo, hi, what := sizeRange(family)
			return nil, fmt.Errorf("%w: %s takes %d to %d %s, none of %s", ErrSize, family, lo, hi, what, FormatSizes(sizes))
		}
		if len(out)+len(fsizes)*len(fseeds) > MaxSelected {
			return nil, fmt.Errorf("%w: more than %d selected (%s adds %s × %s to %d)", ErrCount, MaxSelected, family, counted(len(fsizes), "size"), counted(len(fseeds), "seed"), len(out))
		}
		for _, size := range fsizes {
			for _, seed := range fseeds {
				out = append(out, Spec{family, size, seed})
			}
		}
	}
	return out, nil
}

// FormatSizes writes sizes as Select's errors name them: "100, 2000".
func FormatSizes(sizes []int) string {
	list := make([]string, len(sizes))
	for k, size := range sizes {
		list[k] = strconv.Itoa(size)
	}
	return strings.Join(list, ", ")
}

// counted writes n and what it counts: "1 size", "2 sizes".
func counted(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// sizeRange returns the sizes family takes and what they count.
func sizeRange(family string) (lo, hi int, what string) {
	switch family {
	case "transformer":
		return 1, MaxLayers, "layers"
	case "mixed":
		return 10, MaxBuffers, "buffers"
	}
	return 1, MaxBuffers, "buffers"
}

// takes reports whether size is in family's range.
func takes(family string, size int) bool {
	lo, hi, _ := sizeRange(family)
	return size >= lo && size <= hi
}
