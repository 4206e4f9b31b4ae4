package engine

import (
	"math"
)

// A kernel is a SIMT program: it runs once per invocation id t in
// [0, threads) and each invocation writes its own outputs, so the result
// does not depend on the order or parallelism of invocations. Every
// kernel here has a WGSL twin in wgsl.go that reads the same params
// words in the same order and does the same float32 arithmetic in the
// same order; the reference (cpu) kernels below are that contract in Go.
//
// Memory is seen as up to MaxSlots slots of 32-bit words (regions of the
// device, or ranges of them); an operand is a (slot, word offset) pair of
// params words. Floats are
// stored as IEEE-754 binary32 bits and int32 as two's complement.
//
// Params layout, per kernel (o = operand: slot, offset; u = one word;
// f = float32 bits):
//
//	fill        o y, u n, f value                         y[i] = value
//	embedding   o table, o ids, o y, u rows, u h, u vocab  y[r,j] = table[ids[r],j]
//	matmul      o a, o b, o y, u M, u N, u K,
//	            u as0, u as1, u bs0, u bs1, u r0, u r1     y[i,j] (+)= Σ_{r0≤r<r1} a[i·as0+r·as1]·b[r·bs0+j·bs1]
//	                                                       (from y when r0 > 0)
//	add         o a, o b, o y, u n, u nb                   y[i] = a[i] + b[i mod nb]
//	mul         o a, o b, o y, u n                         y[i] = a[i]·b[i]
//	gelu        o x, o y, u n                              tanh approximation
//	gelu_bwd    o x, o dy, o dx, u n
//	silu        o x, o y, u n
//	silu_bwd    o x, o dy, o dx, u n
//	layernorm   o x, o w, o b, o y, o mean, o rstd, u rows, u h, f eps
//	ln_bwd_x    o x, o w, o mean, o rstd, o dy, o dx, u rows, u h
//	ln_bwd_wb   o x, o mean, o rstd, o dy, o dw, o db, u rows, u h, u hasb, u r0, u r1
//	rmsnorm     o x, o w, o y, o rstd, u rows, u h, f eps
//	rms_bwd_x   o x, o w, o rstd, o dy, o dx, u rows, u h
//	rms_bwd_w   o x, o rstd, o dy, o dw, u rows, u h, u r0, u r1
//	rope        o x, o y, u rows(B·S), u seq, u width, u headdim, u inverse
//	attn        o q, o k, o v, o y, o lse, u B, u S, u heads, u kvheads, u D,
//	            u qs0, u qs1, u ks0, u ks1, u vs0, u vs1, f scale
//	attn_bwd_q  o q, o k, o v, o y, o lse, o dy, (o dq), u B, u S, u heads,
//	            u kvheads, u D, strides q k v (s0, s1), dq (s0, s1), f scale
//	attn_bwd_kv as attn_bwd_q with o dk, o dv and their strides
//	xent_rows   o logits, o labels, o rowloss, u rows, u vocab
//	xent_mean   o rowloss, o loss, u rows
//	xent_bwd    o logits, o labels, o dloss, o dx, u rows, u vocab
//	reduce_sum  o dy, o y, u rows, u n, u r0, u r1         y[j] = Σ_r dy[r·n+j]
//	emb_bwd     o ids, o dy, o dt, u rows, u h, u vocab, u r0, u r1
//	                                                       dt[v,j] = Σ_{ids[r]=v} dy[r,j]
//	adamw       o p, o g, o m, o v, u n, u poff, u goff,
//	            f lr, f b1, f b2, f eps, f wd, f c1, f c2
//
// The kernels that sum over rows (ln_bwd_wb, rms_bwd_w, reduce_sum,
// emb_bwd, and matmul over its inner dimension) take the rows [r0, r1)
// of one chunk: a chunk after the first continues the sums its output
// holds, so chunked launches add in the same order, to the same bits,
// as one launch over all rows (see rowChunk).
//
// Attention strides are word strides of the batch and sequence dimensions
// (the last dimension is contiguous); y, lse and the other operands are
// contiguous.
type kernel func(k *invocation, t uint32)

// invocation is one launch as the cpu kernels see it.
type invocation struct {
	mem   [][]uint32
	p     []uint32
	lanes *lanes // workgroup memory (workgroup kernels, groups.go)
	tv    [8]tview
	pack  []uint32 // the cpu matmul's packed columns of b
}

func (k *invocation) u(i int) uint32  { return k.p[i] }
func (k *invocation) f(i int) float32 { return math.Float32frombits(k.p[i]) }

// ld reads the float at word index i of operand o (params words o, o+1).
func (k *invocation) ld(o int, i uint32) float32 {
	return math.Float32frombits(k.mem[k.p[o]][k.p[o+1]+i])
}
func (k *invocation) ldi(o int, i uint32) int32 { return int32(k.mem[k.p[o]][k.p[o+1]+i]) }
func (k *invocation) st(o int, i uint32, v float32) {
	k.mem[k.p[o]][k.p[o+1]+i] = math.Float32bits(v)
}

// Transcendentals go through float64 and round once; WGSL's builtins
// are within a few ulp of these, which is what the webgpu-vs-cpu
// tolerance covers.
func exp32(x float32) float32  { return float32(math.Exp(float64(x))) }
func log32(x float32) float32  { return float32(math.Log(float64(x))) }
func tanh32(x float32) float32 { return float32(math.Tanh(float64(x))) }
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }
func cos32(x float32) float32  { return float32(math.Cos(float64(x))) }
func sin32(x float32) float32  { return float32(math.Sin(float64(x))) }
func pow32(x, y float32) float32 {
	return float32(math.Pow(float64(x), float64(y)))
}

// Operand positions in params: operand j starts at word 2j.
const (
	o0 = 2 * iota
	o1
	o2
	o3
	o4
	o5
	o6
	o7
)

const geluC = 0.7978845608028654 // sqrt(2/pi)

var kernels = map[string]kernel{
	"fill": func(k *invocation, t uint32) {
		if t < k.u(2) {
			k.st(o0, t, k.f(3))
		}
	},
	"embedding": func(k *invocation, t uint32) {
		rows, h, vocab := k.u(6), k.u(7), k.u(8)
		if t >= rows*h {
			return
		}
		r, j := t/h, t%h
		id := k.ldi(o1, r)
		var v float32
		if id >= 0 && uint32(id) < vocab {
			v = k.ld(o0, uint32(id)*h+j)
		}
		k.st(o2, t, v)
	},
	"add": func(k *invocation, t uint32) {
		if t < k.u(6) {
			k.st(o2, t, k.ld(o0, t)+k.ld(o1, t%k.u(7)))
		}
	},
	"mul": func(k *invocation, t uint32) {
		if t < k.u(6) {
			k.st(o2, t, k.ld(o0, t)*k.ld(o1, t))
		}
	},
	"gelu": func(k *invocation, t uint32) {
		if t < k.u(4) {
			x := k.ld(o0, t)
			k.st(o1, t, 0.5*x*(1+tanh32(geluC*(x+0.044715*x*x*x))))
		}
	},
	"gelu_bwd": func(k *invocation, t uint32) {
		if t < k.u(6) {
			x := k.ld(o0, t)
			th := tanh32(geluC * (x + 0.044715*x*x*x))
			d := 0.5*(1+th) + 0.5*x*(1-th*th)*geluC*(1+3*0.044715*x*x)
			k.st(o2, t, k.ld(o1, t)*d)
		}
	},
	"silu": func(k *invocation, t uint32) {
		if t < k.u(4) {
			x := k.ld(o0, t)
			k.st(o1, t, x/(1+exp32(-x)))
		}
	},
	"silu_bwd": func(k *invocation, t uint32) {
		if t < k.u(6) {
			x := k.ld(o0, t)
			s := 1 / (1 + exp32(-x))
			k.st(o2, t, k.ld(o1, t)*(s*(1+x*(1-s))))
		}
	},
	"ln_bwd_wb": func(k *invocation, t uint32) {
		h, hasb, r0, r1 := k.u(13), k.u(14), k.u(15), k.u(16)
		if t >= h {
			return
		}
		var dw, db float32
		if r0 > 0 { // a later chunk of rows continues the sums
			dw = k.ld(o4, t)
			if hasb != 0 {
				db = k.ld(o5, t)
			}
		}
		for r := r0; r < r1; r++ {
			xh := (k.ld(o0, r*h+t) - k.ld(o1, r)) * k.ld(o2, r)
			dy := k.ld(o3, r*h+t)
			dw += dy * xh
			db += dy
		}
		k.st(o4, t, dw)
		if hasb != 0 {
			k.st(o5, t, db)
		}
	},
	"rms_bwd_w": func(k *invocation, t uint32) {
		h, r0, r1 := k.u(9), k.u(10), k.u(11)
		if t >= h {
			return
		}
		var dw float32
		if r0 > 0 {
			dw = k.ld(o3, t)
		}
		for r := r0; r < r1; r++ {
			dw += k.ld(o2, r*h+t) * k.ld(o0, r*h+t) * k.ld(o1, r)
		}
		k.st(o3, t, dw)
	},
	"rope": func(k *invocation, t uint32) {
		rows, seq, width, hd, inv := k.u(4), k.u(5), k.u(6), k.u(7), k.u(8)
		pairs := width / 2
		if t >= rows*pairs {
			return
		}
		r, p := t/pairs, t%pairs
		pos := float32(r % seq)
		i := p % (hd / 2) // pair index inside the head
		theta := pos * pow32(10000, -2*float32(i)/float32(hd))
		c, s := cos32(theta), sin32(theta)
		if inv != 0 {
			s = -s
		}
		a, b := k.ld(o0, r*width+2*p), k.ld(o0, r*width+2*p+1)
		k.st(o1, r*width+2*p, a*c-b*s)
		k.st(o1, r*width+2*p+1, a*s+b*c)
	},
	"emb_bwd": func(k *invocation, t uint32) {
		// dt is zeroed by a fill first; column t adds rows in order.
		h, vocab, r0, r1 := k.u(7), k.u(8), k.u(9), k.u(10)
		if t >= h {
			return
		}
		for r := r0; r < r1; r++ {
			if id := k.ldi(o0, r); id >= 0 && uint32(id) < vocab {
				k.st(o2, uint32(id)*h+t, k.ld(o2, uint32(id)*h+t)+k.ld(o1, r*h+t))
			}
		}
	},
	"reduce_sum": func(k *invocation, t uint32) {
		n, r0, r1 := k.u(5), k.u(6), k.u(7)
		if t >= n {
			return
		}
		var s float32
		if r0 > 0 {
			s = k.ld(o1, t)
		}
		for r := r0; r < r1; r++ {
			s += k.ld(o0, r*n+t)
		}
		k.st(o1, t, s)
	},
}

func init() { rangeKernels["adamw"] = adamw }

// adamw updates elements [lo, hi) of a parameter (o0, from word poff),
// its gradient (o1, from goff) and moments (o2, o3): a range kernel, so
// that the params are read once a range and the operands are slices
// (the update is 40 % of a resnet18 step as one call per element). The
// WGSL twin runs the same operations per element.
func adamw(k *invocation, lo, hi uint32) {
	n, poff, goff := k.u(8), k.u(9), k.u(10)
	lr, b1, b2, eps, wd, c1, c2 := k.f(11), k.f(12), k.f(13), k.f(14), k.f(15), k.f(16), k.f(17)
	hi = min(hi, n)
	if lo >= hi {
		return
	}
	span := func(o int, off uint32) []uint32 {
		b := k.p[o+1] + off
		return k.mem[k.p[o]][b+lo : b+hi]
	}
	P, G, M, V := span(o0, poff), span(o1, goff), span(o2, 0), span(o3, 0)
	G, M, V = G[:len(P)], M[:len(P)], V[:len(P)]
	start := 0
	if nb := len(P) / 8; simd && nb > 0 {
		kk := [9]float32{b1, 1 - b1, b2, 1 - b2, c1, c2, eps, lr, wd}
		adamw8(&P[0], &G[0], &M[0], &V[0], uintptr(nb), &kk)
		start = 8 * nb
	}
	for i := start; i < len(P); i++ {
		g := math.Float32frombits(G[i])
		m := b1*math.Float32frombits(M[i]) + (1-b1)*g
		v := b2*math.Float32frombits(V[i]) + (1-b2)*g*g
		M[i], V[i] = math.Float32bits(m), math.Float32bits(v)
		p := math.Float32frombits(P[i])
		p -= lr * (m/c1/(sqrt32(v/c2)+eps) + wd*p)
		P[i] = math.Float32bits(p)
	}
}
