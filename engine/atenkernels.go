package engine

import (
	"math"
)

// Kernels of imported (aten) ops, cpu. They address their tensors
// through views: after the operands' (slot, word) pairs, params hold one
// view per operand, viewWords words each,
//
//	dtype, rank, offset, shape[maxRank], strides[maxRank]
//
// (element offset and strides from the tensor's first element; dtype
// one of the dt* codes), then the kernel's own words ("extra" below).
// Each invocation t writes its own outputs, as every kernel here does,
// so the result does not depend on how invocations are spread over
// cores. A rangeKernel runs invocations [lo, hi) in a loop (it reads its
// views once); the work of invocation t is the same as a SIMT kernel's.
//
// Element types: fp32 words; int32 words; int64 as two words (the low
// one read, the high one written as the sign; values must fit 32 bits);
// bool and uint8 as bytes, four to a word.
//
//	a_unary    x, y; n, code, f a, f b           y = op(x)
//	a_binary   x, z, y; n, code, f a             y = op(x, z), broadcast by strides
//	a_div_scalar  x, y; n, f z                  y = x / z
//	a_fill     y; n, f value
//	a_arange   y; n, f start, f step
//	a_triu     x, y; n, diagonal (signed), lower   over the last two dimensions (lower: tril)
//	a_bernoulli  y; n, f p, node, seed lo, seed hi, step lo, step hi
//	                                             y = 1 with probability p, from (seed, step, node, element)
//	a_reduce   x, y; n, mask, code, f scale     y[j] = op over the masked dims of x
//	a_softmax  x, y; rows, dim, log              along dimension dim
//	a_softmax_bwd  g, out, y; rows, dim, log
//	a_layernorm    x, w, b, y, mean, rstd; rows, h, f eps, hasw, hasb
//	a_ln_bwd_x     dy, x, mean, rstd, w, dx; rows, h, hasw
//	a_ln_bwd_wb    dy, x, mean, rstd, dw, db; rows, h, hasw, hasb
//	a_embedding    table, idx, y; n, h, padding
//	a_emb_bwd      dy, idx, dt; rows, h, vocab, padding     column t of dt
//	a_nll          logp, target, out, total; rows, classes, ignore, reduction
//	a_nll_bwd      gout, target, total, gin; rows, classes, ignore, reduction
//	a_im2col       x, cols; conv, n0, nimg, g     cols[(ci,i,j), m·P+p] of images n0…
//	a_col2im       dcols, dx; conv, n, nimg, g    image n, group g of dx from the columns of nimg images
//	a_conv         x, w, y; conv
//	a_conv_bwd_x   dy, w, dx; conv
//	a_conv_bwd_w   dy, x, dw; conv, r0, r1 (image rows n·Ho+oh summed, onto dw when r0 > 0)
//	a_bn_stats     x, mean, invstd, rmean, rvar; channels, f eps, f momentum, update
//	               (update: the running statistics, with the unbiased variance)
//	a_bn_apply     x, mean, invstd, w, b, y; n, hasw, hasb
//	a_bn_bwd_sums  dy, x, mean, invstd, sdy, sdyx; channels
//	a_bn_bwd_x     dy, x, mean, invstd, w, sdy, sdyx, dx; n, count, hasw
//	a_maxpool      x, y, idx; pool
//	a_maxpool_bwd  dy, idx, dx; pool
//
// conv is N, C, H, W, Co, KH, KW, Ho, Wo, sh, sw, ph, pw, dh, dw, groups;
// pool is N, C, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw.
type rangeKernel func(k *invocation, lo, hi uint32)

const (
	viewWords = 3 + 2*maxRank
	maxRank   = 8
)

// Element types of views.
const (
	dtF32 = iota
	dtI32
	dtI64
	dtU8
)

// tview is one operand's view as a kernel reads it.
type tview struct {
	mem    []uint32
	base   uint32 // word offset of the tensor's first element
	dt     uint32
	rank   int
	off    uint32
	shape  [maxRank]uint32
	stride [maxRank]uint32
}

// views returns the views of a launch's n operands and its extra words.
func (k *invocation) views(n int) ([]tview, []uint32) {
	vs := k.tv[:n]
	for j := range vs {
		at := 2*n + viewWords*j
		v := &vs[j]
		v.mem, v.base = k.mem[k.p[2*j]], k.p[2*j+1]
		v.dt, v.rank, v.off = k.p[at], int(k.p[at+1]), k.p[at+2]
		copy(v.shape[:], k.p[at+3:at+3+maxRank])
		copy(v.stride[:], k.p[at+3+maxRank:at+3+2*maxRank])
	}
	return vs, k.p[2*n+viewWords*n:]
}

// at returns the storage element of the view's t-th element in
// row-major order.
func (v *tview) at(t uint32) uint32 {
	e := v.off
	for d := v.rank - 1; d >= 0; d-- {
		s := v.shape[d]
		e += (t % s) * v.stride[d]
		t /= s
	}
	return e
}

// get reads storage element e as a float32.
func (v *tview) get(e uint32) float32 {
	switch v.dt {
	case dtF32:
		return math.Float32frombits(v.mem[v.base+e])
	case dtI32:
		return float32(int32(v.mem[v.base+e]))
	case dtI64:
		return float32(int32(v.mem[v.base+2*e]))
	}
	b := 4*v.base + e
	return float32((v.mem[b/4] >> (8 * (b % 4))) & 0xff)
}

// geti reads storage element e as an integer.
func (v *tview) geti(e uint32) int32 {
	switch v.dt {
	case dtF32:
		return int32(math.Float32frombits(v.mem[v.base+e]))
	case dtI32:
		return int32(v.mem[v.base+e])
	case dtI64:
		return int32(v.mem[v.base+2*e])
	}
	b := 4*v.base + e
	return int32((v.mem[b/4] >> (8 * (b % 4))) & 0xff)
}

// set writes x at storage element e. Byte elements are written a word at
// a time by the invocation that owns the word (setBytes).
func (v *tview) set(e uint32, x float32) {
	switch v.dt {
	case dtF32:
		v.mem[v.base+e] = math.Float32bits(x)
	case dtI32:
		v.mem[v.base+e] = uint32(int32(x))
	case dtI64:
		i := int32(x)
		v.mem[v.base+2*e] = uint32(i)
		v.mem[v.base+2*e+1] = uint32(i >> 31)
	default:
		b := 4*v.base + e
		w := &v.mem[b/4]
		sh := 8 * (b % 4)
		y := uint32(0)
		if x != 0 {
			y = 1
			if x > 1 && x < 256 {
				y = uint32(x)
			}
		}
		*w = *w&^(0xff<<sh) | y<<sh
	}
}

// bytesPerInvocation: kernels whose output is a byte tensor run one
// invocation per four elements (a word), so no two invocations write one
// word.
func byteOut(v *tview) bool { return v.dt == dtU8 }

// forEach runs f for the elements of invocation t: t itself, or the four
// elements of word t for a byte output y of n elements.
// elements is the range of the n output elements that invocations
// [lo, hi) write (forEach's, for a range): the same invocations, so
// that a range of words of a byte output stays whole.
func elements(y *tview, n, lo, hi uint32) (uint32, uint32) {
	a, b := lo, hi
	if byteOut(y) {
		a, b = 4*lo, 4*hi
	}
	b = min(b, n)
	return a, max(a, b)
}

// walker visits a view's storage elements in row-major order: seek to
// element t, then next, with no division per element.
type walker struct {
	v   *tview
	idx [maxRank]uint32
	e   uint32 // the storage element of the current one
}

func (w *walker) seek(v *tview, t uint32) {
	w.v, w.e = v, v.off
	for d := v.rank - 1; d >= 0; d-- {
		s := v.shape[d]
		w.idx[d] = t % s
		w.e += w.idx[d] * v.stride[d]
		t /= s
	}
}

func (w *walker) next() {
	v := w.v
	for d := v.rank - 1; d >= 0; d-- {
		w.idx[d]++
		w.e += v.stride[d]
		if w.idx[d] < v.shape[d] {
			return
		}
		w.e -= w.idx[d] * v.stride[d]
		w.idx[d] = 0
	}
}

func forEach(y *tview, n, t uint32, f func(i uint32)) {
	if !byteOut(y) {
		if t < n {
			f(t)
		}
		return
	}
	for i := 4 * t; i < 4*t+4 && i < n; i++ {
		f(i)
	}
}

// Unary codes.
const (
	uCopy = iota
	uRelu
	uGeluTanh
	uGeluErf
	uAffine // a·x + b
	uNeg
	uExp
	uLog
	uSqrt
	uRsqrt
	uSigmoid
	uTanh
	uSilu
	uHardswish
	uHardsigmoid
	uNot // logical not
)

// Binary codes.
const (
	bAdd = iota // x + a·z
	bSub        // x − a·z
	bMul
	bDiv
	bThresholdBwd // z ≤ a ? 0 : x   (threshold_backward(grad x, self z, threshold a))
	bGeluTanhBwd  // x·gelu'(z), tanh
	bGeluErfBwd   // x·gelu'(z), erf
	bMaskedFill   // z ≠ 0 ? a : x
	bSiluBwd      // x·silu'(z)
	bHardswishBwd
	bHardsigmoidBwd
	bSigmoidBwd // x·z·(1−z), z the output
	bTanhBwd    // x·(1−z²), z the output
	bRsub       // a·z − x ... (rsub(x, z, alpha) = z − a·x), see lowering
)

func unary(code uint32, x, a, b float32) float32 {
	switch code {
	case uCopy:
		return x
	case uRelu:
		if x > 0 {
			return x
		}
		return 0
	case uGeluTanh:
		return 0.5 * x * (1 + tanh32(geluC*(x+0.044715*x*x*x)))
	case uGeluErf:
		return float32(0.5 * float64(x) * (1 + math.Erf(float64(x)/math.Sqrt2)))
	case uAffine:
		return a*x + b
	case uNeg:
		return -x
	case uExp:
		return exp32(x)
	case uLog:
		return log32(x)
	case uSqrt:
		return sqrt32(x)
	case uRsqrt:
		return 1 / sqrt32(x)
	case uSigmoid:
		return 1 / (1 + exp32(-x))
	case uTanh:
		return tanh32(x)
	case uSilu:
		return x / (1 + exp32(-x))
	case uHardswish:
		return x * min(max(x+3, 0), 6) / 6
	case uHardsigmoid:
		return min(max(x+3, 0), 6) / 6
	case uNot:
		if x == 0 {
			return 1
		}
		return 0
	}
	return float32(math.NaN())
}

func binary(code uint32, x, z, a float32) float32 {
	switch code {
	case bAdd:
		if a == 1 {
			return x + z
		}
		return x + a*z
	case bSub:
		if a == 1 {
			return x - z
		}
		return x - a*z
	case bMul:
		return x * z
	case bDiv:
		return x / z
	case bThresholdBwd:
		if z <= a {
			return 0
		}
		return x
	case bGeluTanhBwd:
		th := tanh32(geluC * (z + 0.044715*z*z*z))
		d := 0.5*(1+th) + 0.5*z*(1-th*th)*geluC*(1+3*0.044715*z*z)
		return x * d
	case bGeluErfBwd:
		zz := float64(z)
		cdf := 0.5 * (1 + math.Erf(zz/math.Sqrt2))
		pdf := math.Exp(-0.5*zz*zz) / math.Sqrt(2*math.Pi)
		return x * float32(cdf+zz*pdf)
	case bMaskedFill:
		if z != 0 {
			return a
		}
		return x
	case bSiluBwd:
		s := 1 / (1 + exp32(-z))
		return x * (s * (1 + z*(1-s)))
	case bHardswishBwd:
		switch {
		case z < -3:
			return 0
		case z <= 3:
			return x * (z/3 + 0.5)
		}
		return x
	case bHardsigmoidBwd:
		if z > -3 && z < 3 {
			return x / 6
		}
		return 0
	case bSigmoidBwd:
		return x * z * (1 - z)
	case bTanhBwd:
		return x * (1 - z*z)
	case bRsub:
		return a*z - x
	}
	return float32(math.NaN())
}

// Reduce codes.
const (
	rSum = iota
	rMean
	rMax
)

var rangeKernels = map[string]rangeKernel{
	"a_unary": func(k *invocation, lo, hi uint32) {
		v, w := k.views(2)
		x, y := &v[0], &v[1]
		n, code, a, b := w[0], w[1], math.Float32frombits(w[2]), math.Float32frombits(w[3])
		e0, e1 := elements(y, n, lo, hi)
		var wx, wy walker
		wx.seek(x, e0)
		wy.seek(y, e0)
		for range e1 - e0 {
			y.set(wy.e, unary(code, x.get(wx.e), a, b))
			wx.next()
			wy.next()
		}
	},
	"a_binary": func(k *invocation, lo, hi uint32) {
		v, w := k.views(3)
		x, z, y := &v[0], &v[1], &v[2]
		n, code, a := w[0], w[1], math.Float32frombits(w[2])
		e0, e1 := elements(y, n, lo, hi)
		var wx, wz, wy walker
		wx.seek(x, e0)
		wz.seek(z, e0)
		wy.seek(y, e0)
		for range e1 - e0 {
			y.set(wy.e, binary(code, x.get(wx.e), z.get(wz.e), a))
			wx.next()
			wz.next()
			wy.next()
		}
	},
	"a_div_scalar": func(k *invocation, lo, hi uint32) {
		v, w := k.views(2)
		x, y := &v[0], &v[1]
		n, z := w[0], math.Float32frombits(w[1])
		e0, e1 := elements(y, n, lo, hi)
		var wx, wy walker
		wx.seek(x, e0)
		wy.seek(y, e0)
		for range e1 - e0 {
			y.set(wy.e, x.get(wx.e)/z)
			wx.next()
			wy.next()
		}
	},
	"a_bernoulli": func(k *invocation, lo, hi uint32) {
		v, w := k.views(1)
		y := &v[0]
		n, p := w[0], math.Float32frombits(w[1])
		for t := lo; t < hi; t++ {
			forEach(y, n, t, func(i uint32) {
				u := float32(maskHash(w[2], w[3], w[4], w[5], w[6], i)>>8) / (1 << 24)
				val := float32(0)
				if u < p {
					val = 1
				}
				y.set(y.at(i), val)
			})
		}
	},
	"a_fill": func(k *invocation, lo, hi uint32) {
		v, w := k.views(1)
		y := &v[0]
		n, val := w[0], math.Float32frombits(w[1])
		for t := lo; t < hi; t++ {
			forEach(y, n, t, func(i uint32) { y.set(y.at(i), val) })
		}
	},
	"a_arange": func(k *invocation, lo, hi uint32) {
		v, w := k.views(1)
		y := &v[0]
		n, start, step := w[0], math.Float32frombits(w[1]), math.Float32frombits(w[2])
		for t := lo; t < hi; t++ {
			forEach(y, n, t, func(i uint32) { y.set(y.at(i), start+float32(i)*step) })
		}
	},
	"a_triu": func(k *invocation, lo, hi uint32) {
		v, w := k.views(2)
		x, y := &v[0], &v[1]
		n, diag, lower := w[0], int64(int32(w[1])), w[2] != 0
		cols := int64(y.shape[y.rank-1])
		rows := int64(y.shape[y.rank-2])
		for t := lo; t < hi; t++ {
			forEach(y, n, t, func(i uint32) {
				c := int64(i) % cols
				r := (int64(i) / cols) % rows
				val := float32(0)
				if !lower && c-r >= diag || lower && c-r <= diag {
					val = x.get(x.at(i))
				}
				y.set(y.at(i), val)
			})
		}
	},
	"a_reduce": func(k *invocation, lo, hi uint32) {
		v, w := k.views(2)
		x, y := &v[0], &v[1]
		n, mask, code, scale := w[0], w[1], w[2], math.Float32frombits(w[3])
		// The reduced elements of output t: x's index is t's index in the
		// kept dims and every index in the reduced ones, row-major.
		var red uint32 = 1
		for d := range x.rank {
			if mask&(1<<d) != 0 {
				red *= x.shape[d]
			}
		}
		for t := lo; t < hi && t < n; t++ {
			// t's multi-index over x's shape with reduced dims at 0.
			var base uint32 = x.off
			rem := t
			for d := x.rank - 1; d >= 0; d-- {
				if mask&(1<<d) != 0 {
					continue
				}
				s := x.shape[d]
				base += (rem % s) * x.stride[d]
				rem /= s
			}
			acc := float32(0)
			if code == rMax {
				acc = float32(math.Inf(-1))
			}
			for r := range red {
				e := base
				rr := r
				for d := x.rank - 1; d >= 0; d-- {
					if mask&(1<<d) == 0 {
						continue
					}
					s := x.shape[d]
					e += (rr % s) * x.stride[d]
					rr /= s
				}
				val := x.get(e)
				if code == rMax {
					acc = max(acc, val)
				} else {
					acc += val
				}
			}
			if code == rMean {
				acc /= float32(red)
			} else if code == rSum && scale != 1 {
				acc *= scale
			}
			y.set(y.at(t), acc)
		}
	},
	"a_softmax": func(k *invocation, lo, hi uint32) {
		v, w := k.views(2)
		x, y := &v[0], &v[1]
		rows, dim, logOut := w[0], int(w[1]), w[2] != 0
		size := x.shape[dim]
		for t := lo; t < hi && t < rows; t++ {
			bx, by := rowBase(x, dim, t), rowBase(y, dim, t)
			m := float32(math.Inf(-1))
			for j := range size {
				m = max(m, x.get(bx+j*x.stride[dim]))
			}
			var s float32
			for j := range size {
				s += exp32(x.get(bx+j*x.stride[dim]) - m)
			}
			ls := log32(s)
			for j := range size {
				d := x.get(bx+j*x.stride[dim]) - m
				if logOut {
					y.set(by+j*y.stride[dim], d-ls)
				} else {
					y.set(by+j*y.stride[dim], exp32(d)/s)
				}
			}
		}
	},
	"a_softmax_bwd": func(k *invocation, lo, hi uint32) {
		v, w := k.views(3)
		g, o, y := &v[0], &v[1], &v[2]
		rows, dim, logOut := w[0], int(w[1]), w[2] != 0
		size := g.shape[dim]
		for t := lo; t < hi && t < rows; t++ {
			bg, bo, by := rowBase(g, dim, t), rowBase(o, dim, t), rowBase(y, dim, t)
			var s float32
			for j := range size {
				gj := g.get(bg + j*g.stride[dim])
				if logOut {
					s += gj
				} else {
					s += gj * o.get(bo+j*o.stride[dim])
				}
			}
			for j := range size {
				gj, oj := g.get(bg+j*g.stride[dim]), o.get(bo+j*o.stride[dim])
				if logOut {
					y.set(by+j*y.stride[dim], gj-exp32(oj)*s)
				} else {
					y.set(by+j*y.stride[dim], oj*(gj-s))
				}
			}
		}
	},
	"a_layernorm": func(k *invocation, lo, hi uint32) {
		v, w := k.views(6)
		x, wt, b, y, mean, rstd := &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]
		rows, h, eps, hasw, hasb := w[0], w[1], math.Float32frombits(w[2]), w[3] != 0, w[4] != 0
		for r := lo; r < hi && r < rows; r++ {
			var s float32
			for j := range h {
				s += x.get(x.at(r*h + j))
			}
			mu := s / float32(h)
			var q float32
			for j := range h {
				d := x.get(x.at(r*h+j)) - mu
				q += d * d
			}
			rs := 1 / sqrt32(q/float32(h)+eps)
			for j := range h {
				o := (x.get(x.at(r*h+j)) - mu) * rs
				if hasw {
					o *= wt.get(wt.at(j))
				}
				if hasb {
					o += b.get(b.at(j))
				}
				y.set(y.at(r*h+j), o)
			}
			mean.set(mean.at(r), mu)
			rstd.set(rstd.at(r), rs)
		}
	},
	"a_ln_bwd_x": func(k *invocation, lo, hi uint32) {
		v, w := k.views(6)
		dy, x, mean, rstd, wt, dx := &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]
		rows, h, hasw := w[0], w[1], w[2] != 0
		for r := lo; r < hi && r < rows; r++ {
			mu, rs := mean.get(mean.at(r)), rstd.get(rstd.at(r))
			var s1, s2 float32 // Σ g, Σ g·x̂ with g = dy·w
			for j := range h {
				g := dy.get(dy.at(r*h + j))
				if hasw {
					g *= wt.get(wt.at(j))
				}
				xh := (x.get(x.at(r*h+j)) - mu) * rs
				s1 += g
				s2 += g * xh
			}
			for j := range h {
				g := dy.get(dy.at(r*h + j))
				if hasw {
					g *= wt.get(wt.at(j))
				}
				xh := (x.get(x.at(r*h+j)) - mu) * rs
				dx.set(dx.at(r*h+j), rs*(g-s1/float32(h)-xh*s2/float32(h)))
			}
		}
	},
	"a_ln_bwd_wb": func(k *invocation, lo, hi uint32) {
		v, w := k.views(6)
		dy, x, mean, rstd, dw, db := &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]
		rows, h, hasw, hasb := w[0], w[1], w[2] != 0, w[3] != 0
		for j := lo; j < hi && j < h; j++ {
			var sw, sb float32
			for r := range rows {
				g := dy.get(dy.at(r*h + j))
				sw += g * (x.get(x.at(r*h+j)) - mean.get(mean.at(r))) * rstd.get(rstd.at(r))
				sb += g
			}
			if hasw {
				dw.set(dw.at(j), sw)
			}
			if hasb {
				db.set(db.at(j), sb)
			}
		}
	},
	"a_embedding": func(k *invocation, lo, hi uint32) {
		v, w := k.views(3)
		tab, idx, y := &v[0], &v[1], &v[2]
		n, h := w[0], w[1]
		vocab := tab.shape[0]
		for t := lo; t < hi && t < n; t++ {
			r, j := t/h, t%h
			id := idx.geti(idx.at(r))
			val := float32(0)
			if id >= 0 && uint32(id) < vocab {
				val = tab.get(tab.off + uint32(id)*tab.stride[0] + j*tab.stride[1])
			}
			y.set(y.at(t), val)
		}
	},
	"a_emb_bwd": func(k *invocation, lo, hi uint32) {
		v, w := k.views(3)
		dy, idx, dt := &v[0], &v[1], &v[2]
		rows, h, vocab, pad := w[0], w[1], w[2], int32(w[3])
		for j := lo; j < hi && j < h; j++ {
			for r := range vocab {
				dt.set(dt.at(r*h+j), 0)
			}
			for r := range rows {
				id := idx.geti(idx.at(r))
				if id < 0 || uint32(id) >= vocab || id == pad {
					continue
				}
				e := dt.at(uint32(id)*h + j)
				dt.set(e, dt.get(e)+dy.get(dy.at(r*h+j)))
			}
		}
	},
	"a_nll": func(k *invocation, lo, hi uint32) {
		v, w := k.views(4)
		lp, tg, out, tot := &v[0], &v[1], &v[2], &v[3]
		rows, classes, ignore, reduction := w[0], w[1], int32(w[2]), w[3]
		if lo > 0 {
			return
		}
		var s, count float32
		for r := range rows {
			c := tg.geti(tg.at(r))
			if c == ignore || c < 0 || uint32(c) >= classes {
				continue
			}
			s -= lp.get(lp.at(r*classes + uint32(c)))
			count++
		}
		if reduction == 1 { // mean
			s /= count
		}
		out.set(out.at(0), s)
		tot.set(tot.at(0), count)
	},
	"a_nll_bwd": func(k *invocation, lo, hi uint32) {
		v, w := k.views(4)
		gout, tg, tot, gin := &v[0], &v[1], &v[2], &v[3]
		rows, classes, ignore, reduction := w[0], w[1], int32(w[2]), w[3]
		g := gout.get(gout.at(0))
		if reduction == 1 {
			g /= tot.get(tot.at(0))
		}
		for t := lo; t < hi && t < rows*classes; t++ {
			r, c := t/classes, t%classes
			val := float32(0)
			if id := tg.geti(tg.at(r)); id != ignore && uint32(id) == c {
				val = -g
			}
			gin.set(gin.at(t), val)
		}
	},
	"a_im2col": func(k *invocation, lo, hi uint32) {
		// cols[(ci,i,j), m·P + p] = x[n0+m, g·cin+ci, oh·sh+i·dh−ph, ow·sw+j·dw−pw]
		// (0 outside the image), for the images n0 … n0+nimg−1.
		v, w := k.views(2)
		x, cols := &v[0], &v[1]
		c := convOf(w)
		n0, nimg, g := w[16], w[17], w[18]
		cin := c.C / c.G
		P := c.Ho * c.Wo
		kc := cin * c.KH * c.KW
		NP := nimg * P
		hi = min(hi, kc*NP)
		for t := lo; t < hi; {
			// One row (ci, i, j) of cols at a time, its positions
			// (m, oh, ow) counted up rather than divided out.
			row, q := t/NP, t%NP
			j := row % c.KW
			i := (row / c.KW) % c.KH
			ci := row / (c.KW * c.KH)
			m, p := q/P, q%P
			oh, ow := p/c.Wo, p%c.Wo
			for end := min(hi, (row+1)*NP); t < end; t++ {
				ih := int64(oh*c.SH+i*c.DH) - int64(c.PH)
				iw := int64(ow*c.SW+j*c.DW) - int64(c.PW)
				val := float32(0)
				if ih >= 0 && ih < int64(c.H) && iw >= 0 && iw < int64(c.W) {
					val = x.get(x.off + (n0+m)*x.stride[0] + (g*cin+ci)*x.stride[1] + uint32(ih)*x.stride[2] + uint32(iw)*x.stride[3])
				}
				cols.set(cols.off+t, val)
				if ow++; ow == c.Wo {
					ow = 0
					if oh++; oh == c.Ho {
						oh = 0
						m++
					}
				}
			}
		}
	},
	"a_col2im": func(k *invocation, lo, hi uint32) {
		// dx[n, g·cin+ci, ih, iw] = Σ_(i,j) dcols[(ci,i,j), oh·Wo+ow] over the
		// output positions whose window holds (ih, iw), in (i, j) order.
		v, w := k.views(2)
		dcols, dx := &v[0], &v[1]
		c := convOf(w)
		n, nimg, g := w[16], w[17], w[18]
		cin := c.C / c.G
		P := c.Ho * c.Wo
		NP := nimg * P // dcols' row length: every image's positions
		for t := lo; t < hi && t < cin*c.H*c.W; t++ {
			iw := t % c.W
			ih := (t / c.W) % c.H
			ci := t / (c.W * c.H)
			var s float32
			for i := range c.KH {
				num := int64(ih) + int64(c.PH) - int64(i*c.DH)
				if num < 0 || num%int64(c.SH) != 0 || num/int64(c.SH) >= int64(c.Ho) {
					continue
				}
				oh := uint32(num / int64(c.SH))
				for j := range c.KW {
					num := int64(iw) + int64(c.PW) - int64(j*c.DW)
					if num < 0 || num%int64(c.SW) != 0 || num/int64(c.SW) >= int64(c.Wo) {
						continue
					}
					ow := uint32(num / int64(c.SW))
					s += dcols.get(dcols.off + ((ci*c.KH+i)*c.KW+j)*NP + n*P + oh*c.Wo + ow)
				}
			}
			dx.set(dx.off+n*dx.stride[0]+(g*cin+ci)*dx.stride[1]+ih*dx.stride[2]+iw*dx.stride[3], s)
		}
	},
	"a_conv": func(k *invocation, lo, hi uint32) {
		v, w := k.views(3)
		x, wt, y := &v[0], &v[1], &v[2]
		c := convOf(w)
		cin := c.C / c.G
		cout := c.Co / c.G
		for t := lo; t < hi && t < c.N*c.Co*c.Ho*c.Wo; t++ {
			ow := t % c.Wo
			oh := (t / c.Wo) % c.Ho
			co := (t / (c.Wo * c.Ho)) % c.Co
			n := t / (c.Wo * c.Ho * c.Co)
			g := co / cout
			var s float32
			for ci := range cin {
				for i := range c.KH {
					ih := int64(oh*c.SH+i*c.DH) - int64(c.PH)
					if ih < 0 || ih >= int64(c.H) {
						continue
					}
					for j := range c.KW {
						iw := int64(ow*c.SW+j*c.DW) - int64(c.PW)
						if iw < 0 || iw >= int64(c.W) {
							continue
						}
						xv := x.get(x.off + n*x.stride[0] + (g*cin+ci)*x.stride[1] + uint32(ih)*x.stride[2] + uint32(iw)*x.stride[3])
						wv := wt.get(wt.off + co*wt.stride[0] + ci*wt.stride[1] + i*wt.stride[2] + j*wt.stride[3])
						s += xv * wv
					}
				}
			}
			y.set(y.at(t), s)
		}
	},
	"a_conv_bwd_x": func(k *invocation, lo, hi uint32) {
		v, w := k.views(3)
		dy, wt, dx := &v[0], &v[1], &v[2]
		c := convOf(w)
		cin := c.C / c.G
		cout := c.Co / c.G
		for t := lo; t < hi && t < c.N*c.C*c.H*c.W; t++ {
			iw := t % c.W
			ih := (t / c.W) % c.H
			ch := (t / (c.W * c.H)) % c.C
			n := t / (c.W * c.H * c.C)
			g, ci := ch/cin, ch%cin
			var s float32
			for co := g * cout; co < (g+1)*cout; co++ {
				for i := range c.KH {
					// oh·sh = ih + ph − i·dh
					num := int64(ih) + int64(c.PH) - int64(i*c.DH)
					if num < 0 || num%int64(c.SH) != 0 {
						continue
					}
					oh := num / int64(c.SH)
					if oh >= int64(c.Ho) {
						continue
					}
					for j := range c.KW {
						num := int64(iw) + int64(c.PW) - int64(j*c.DW)
						if num < 0 || num%int64(c.SW) != 0 {
							continue
						}
						ow := num / int64(c.SW)
						if ow >= int64(c.Wo) {
							continue
						}
						s += dy.get(dy.off+n*dy.stride[0]+co*dy.stride[1]+uint32(oh)*dy.stride[2]+uint32(ow)*dy.stride[3]) *
							wt.get(wt.off+co*wt.stride[0]+ci*wt.stride[1]+i*wt.stride[2]+j*wt.stride[3])
					}
				}
			}
			dx.set(dx.at(t), s)
		}
	},
	"a_conv_bwd_w": func(k *invocation, lo, hi uint32) {
		v, w := k.views(3)
		dy, x, dw := &v[0], &v[1], &v[2]
		c := convOf(w)
		cin := c.C / c.G
		cout := c.Co / c.G
		r0, r1 := w[16], w[17] // the (image, output row) pairs summed here
		for t := lo; t < hi && t < c.Co*cin*c.KH*c.KW; t++ {
			j := t % c.KW
			i := (t / c.KW) % c.KH
			ci := (t / (c.KW * c.KH)) % cin
			co := t / (c.KW * c.KH * cin)
			g := co / cout
			var s float32
			if r0 > 0 {
				s = dw.get(dw.at(t))
			}
			for r := r0; r < r1; r++ {
				n, oh := r/c.Ho, r%c.Ho
				ih := int64(oh*c.SH+i*c.DH) - int64(c.PH)
				if ih < 0 || ih >= int64(c.H) {
					continue
				}
				for ow := range c.Wo {
					iw := int64(ow*c.SW+j*c.DW) - int64(c.PW)
					if iw < 0 || iw >= int64(c.W) {
						continue
					}
					s += dy.get(dy.off+n*dy.stride[0]+co*dy.stride[1]+oh*dy.stride[2]+ow*dy.stride[3]) *
						x.get(x.off+n*x.stride[0]+(g*cin+ci)*x.stride[1]+uint32(ih)*x.stride[2]+uint32(iw)*x.stride[3])
				}
			}
			dw.set(dw.at(t), s)
		}
	},
	"a_bn_stats": func(k *invocation, lo, hi uint32) {
		v, w := k.views(5)
		x, mean, invstd, rm, rv := &v[0], &v[1], &v[2], &v[3], &v[4]
		channels, eps, mom, update := w[0], math.Float32frombits(w[1]), math.Float32frombits(w[2]), w[3] != 0
		for c := lo; c < hi && c < channels; c++ {
			var s float32
			count := uint32(0)
			forChannel(x, c, func(e uint32) { s += x.get(e); count++ })
			mu := s / float32(count)
			var q float32
			forChannel(x, c, func(e uint32) { d := x.get(e) - mu; q += d * d })
			mean.set(mean.at(c), mu)
			invstd.set(invstd.at(c), 1/sqrt32(q/float32(count)+eps))
			if update {
				rm.set(rm.at(c), (1-mom)*rm.get(rm.at(c))+mom*mu)
				rv.set(rv.at(c), (1-mom)*rv.get(rv.at(c))+mom*q/float32(count-1))
			}
		}
	},
	"a_bn_apply": func(k *invocation, lo, hi uint32) {
		v, w := k.views(6)
		x, mean, invstd, wt, b, y := &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]
		n, hasw, hasb := w[0], w[1] != 0, w[2] != 0
		for t := lo; t < hi && t < n; t++ {
			c := channelOf(x, t)
			o := (x.get(x.at(t)) - mean.get(mean.at(c))) * invstd.get(invstd.at(c))
			if hasw {
				o *= wt.get(wt.at(c))
			}
			if hasb {
				o += b.get(b.at(c))
			}
			y.set(y.at(t), o)
		}
	},
	"a_bn_bwd_sums": func(k *invocation, lo, hi uint32) {
		v, w := k.views(6)
		dy, x, mean, invstd, sdy, sdyx := &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]
		channels := w[0]
		for c := lo; c < hi && c < channels; c++ {
			mu, is := mean.get(mean.at(c)), invstd.get(invstd.at(c))
			var a, b float32
			forChannel2(dy, x, c, func(ed, ex uint32) {
				g := dy.get(ed)
				a += g
				b += g * (x.get(ex) - mu) * is
			})
			sdy.set(sdy.at(c), a)
			sdyx.set(sdyx.at(c), b)
		}
	},
	"a_bn_bwd_x": func(k *invocation, lo, hi uint32) {
		v, w := k.views(8)
		dy, x, mean, invstd, wt, sdy, sdyx, dx := &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]
		n, count, hasw := w[0], float32(w[1]), w[2] != 0
		for t := lo; t < hi && t < n; t++ {
			c := channelOf(x, t)
			is := invstd.get(invstd.at(c))
			xh := (x.get(x.at(t)) - mean.get(mean.at(c))) * is
			g := is
			if hasw {
				g *= wt.get(wt.at(c))
			}
			dx.set(dx.at(t), g*(dy.get(dy.at(t))-sdy.get(sdy.at(c))/count-xh*sdyx.get(sdyx.at(c))/count))
		}
	},
	"a_maxpool": func(k *invocation, lo, hi uint32) {
		v, w := k.views(3)
		x, y, idx := &v[0], &v[1], &v[2]
		p := poolOf(w)
		for t := lo; t < hi && t < p.N*p.C*p.Ho*p.Wo; t++ {
			ow := t % p.Wo
			oh := (t / p.Wo) % p.Ho
			nc := t / (p.Wo * p.Ho)
			n, c := nc/p.C, nc%p.C
			best := float32(math.Inf(-1))
			arg := int64(-1)
			for i := range p.KH {
				ih := int64(oh*p.SH+i*p.DH) - int64(p.PH)
				if ih < 0 || ih >= int64(p.H) {
					continue
				}
				for j := range p.KW {
					iw := int64(ow*p.SW+j*p.DW) - int64(p.PW)
					if iw < 0 || iw >= int64(p.W) {
						continue
					}
					xv := x.get(x.off + n*x.stride[0] + c*x.stride[1] + uint32(ih)*x.stride[2] + uint32(iw)*x.stride[3])
					if xv > best || math.IsNaN(float64(xv)) || arg < 0 {
						best, arg = xv, ih*int64(p.W)+iw
					}
				}
			}
			y.set(y.at(t), best)
			idx.set(idx.at(t), float32(arg))
		}
	},
	"a_maxpool_bwd": func(k *invocation, lo, hi uint32) {
		v, w := k.views(3)
		dy, idx, dx := &v[0], &v[1], &v[2]
		p := poolOf(w)
		for t := lo; t < hi && t < p.N*p.C*p.H*p.W; t++ {
			iw := t % p.W
			ih := (t / p.W) % p.H
			nc := t / (p.W * p.H)
			n, c := nc/p.C, nc%p.C
			flat := int32(ih*p.W + iw)
			var s float32
			// The windows that may contain (ih, iw), in output order: those
			// starting within a window's extent before it.
			ohLo, ohHi := windowsOf(ih, p.PH, p.KH, p.DH, p.SH, p.Ho)
			owLo, owHi := windowsOf(iw, p.PW, p.KW, p.DW, p.SW, p.Wo)
			for oh := ohLo; oh < ohHi; oh++ {
				top := int64(oh*p.SH) - int64(p.PH)
				if int64(ih) < top || int64(ih) > top+int64((p.KH-1)*p.DH) {
					continue
				}
				for ow := owLo; ow < owHi; ow++ {
					left := int64(ow*p.SW) - int64(p.PW)
					if int64(iw) < left || int64(iw) > left+int64((p.KW-1)*p.DW) {
						continue
					}
					o := n*dy.stride[0] + c*dy.stride[1] + oh*dy.stride[2] + ow*dy.stride[3]
					oi := n*idx.stride[0] + c*idx.stride[1] + oh*idx.stride[2] + ow*idx.stride[3]
					if idx.geti(idx.off+oi) == flat {
						s += dy.get(dy.off + o)
					}
				}
			}
			dx.set(dx.at(t), s)
		}
	},
}

// hash32 is a 32-bit mixer (the murmur3 finaliser), the same in WGSL.
func hash32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	x *= 0xc2b2ae35
	x ^= x >> 16
	return x
}

// maskHash draws the dropout mask's word of element i from the node,
// the seed and the step (32-bit words, as WGSL computes it).
func maskHash(node, seedLo, seedHi, stepLo, stepHi, i uint32) uint32 {
	return hash32(seedLo ^ hash32(seedHi^hash32(stepLo^hash32(stepHi^hash32(node^hash32(i+0x9e3779b9))))))
}

// rowBase is the storage element of the first element of row t of v
// along dim: t indexes the other dimensions in row-major order.
func rowBase(v *tview, dim int, t uint32) uint32 {
	e := v.off
	for d := v.rank - 1; d >= 0; d-- {
		if d == dim {
			continue
		}
		s := v.shape[d]
		e += (t % s) * v.stride[d]
		t /= s
	}
	return e
}

// channelOf is the channel (dimension 1) of element t of v.
func channelOf(v *tview, t uint32) uint32 {
	inner := uint32(1)
	for d := 2; d < v.rank; d++ {
		inner *= v.shape[d]
	}
	return (t / inner) % v.shape[1]
}

// forChannel calls f with the storage element of every element of
// channel c of v (dimension 1), in row-major order.
func forChannel(v *tview, c uint32, f func(e uint32)) {
	inner := uint32(1)
	for d := 2; d < v.rank; d++ {
		inner *= v.shape[d]
	}
	for n := range v.shape[0] {
		for i := range inner {
			t := (n*v.shape[1]+c)*inner + i
			f(v.at(t))
		}
	}
}

// forChannel2 is forChannel over two views of one shape.
func forChannel2(a, b *tview, c uint32, f func(ea, eb uint32)) {
	inner := uint32(1)
	for d := 2; d < a.rank; d++ {
		inner *= a.shape[d]
	}
	for n := range a.shape[0] {
		for i := range inner {
			t := (n*a.shape[1]+c)*inner + i
			f(a.at(t), b.at(t))
		}
	}
}

// windowsOf is the range [lo, hi) of output positions (of n) whose
// window (k taps, dilation d, stride s, padding p) may reach input
// position i.
func windowsOf(i, p, k, d, s, n uint32) (uint32, uint32) {
	ext := int64((k - 1) * d)
	lo := (int64(i) + int64(p) - ext + int64(s) - 1) / int64(s)
	if int64(i)+int64(p)-ext < 0 {
		lo = 0
	}
	hi := (int64(i)+int64(p))/int64(s) + 1
	return uint32(min(max(lo, 0), int64(n))), uint32(min(max(hi, 0), int64(n)))
}

// conv is a convolution's geometry (2-D, NCHW).
type conv struct {
	N, C, H, W, Co, KH, KW, Ho, Wo, SH, SW, PH, PW, DH, DW, G uint32
}

func convOf(w []uint32) conv {
	return conv{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], w[12], w[13], w[14], w[15]}
}

func (c conv) words() []uint32 {
	return []uint32{c.N, c.C, c.H, c.W, c.Co, c.KH, c.KW, c.Ho, c.Wo, c.SH, c.SW, c.PH, c.PW, c.DH, c.DW, c.G}
}

// pool is a 2-D pooling's geometry.
type pool struct {
	N, C, H, W, Ho, Wo, KH, KW, SH, SW, PH, PW, DH, DW uint32
}

func poolOf(w []uint32) pool {
	return pool{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], w[10], w[11], w[12], w[13]}
}

func (p pool) words() []uint32 {
	return []uint32{p.N, p.C, p.H, p.W, p.Ho, p.Wo, p.KH, p.KW, p.SH, p.SW, p.PH, p.PW, p.DH, p.DW}
}
