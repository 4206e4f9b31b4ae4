package engine

import (
	"math"
	"runtime"
	"sync"
)

// Workgroup kernels. A kernel that reduces over a dimension of
// unbounded size (a row of logits, a hidden vector, the keys of a
// query) runs as one workgroup of wgLanes lanes per item: lane l takes
// the elements l, l+wgLanes, …, the lanes' partial results are combined
// by a tree (laneSum, laneMax), and the lanes then write the outputs in
// the same strided way. Per-invocation work is the dimension divided by
// wgLanes, not the dimension: Mesa's llvmpipe ends any invocation after
// 65,535 loop iterations without an error, so an invocation must never
// loop over a whole dimension of unbounded size (see Launch.Iters).
//
// The Go functions below run one workgroup at a time, lane after lane,
// with the same partial sums in the same order and the same tree as the
// WGSL twins in wgsl.go: the cpu and webgpu results differ only where
// WGSL's exp, log and sqrt round differently.
//
// Params layout (as in kernels.go):
//
//	matmul      o a, o b, o y, u M, u N, u K, u as0, u as1, u bs0, u bs1, u r0, u r1
//	            one 32×32 tile of y per group; y[i,j] = Σ_r a·b in r order
//	layernorm   o x, o w, o b, o y, o mean, o rstd, u rows, u h, f eps
//	ln_bwd_x    o x, o w, o mean, o rstd, o dy, o dx, u rows, u h
//	rmsnorm     o x, o w, o y, o rstd, u rows, u h, f eps
//	rms_bwd_x   o x, o w, o rstd, o dy, o dx, u rows, u h
//	xent_rows   o logits, o labels, o rowloss, u rows, u vocab
//	xent_mean   o rowloss, o loss, u rows          (one group)
//	xent_bwd    o logits, o labels, o dloss, o dx, u rows, u vocab
//	attn        o q, o k, o v, o y, o lse, u B, u S, u heads, u kvheads, u D,
//	            u qs0, u qs1, u ks0, u ks1, u vs0, u vs1, f scale
//	attn_bwd_q  o q, o k, o v, o y, o lse, o dy, o dq, u B, u S, u heads,
//	            u kvheads, u D, strides q k v (s0, s1), dq (s0, s1), f scale
//	attn_bwd_kv as attn_bwd_q with o dk, o dv and their strides
//
// Rows (and attention queries or keys) are groups: group g is row g.

// wgLanes is the workgroup size of every kernel, WGSL and cpu alike.
const wgLanes = 64

// maxAttnSeq is the longest sequence the attention kernels hold in
// workgroup memory (one float per key: 8 KiB of the 16 KiB every
// WebGPU device offers).
const maxAttnSeq = 2048

// maxHeadDim is the widest head the attention kernels take (each lane
// accumulates at most maxHeadDim/wgLanes dimensions of a key's
// gradients).
const maxHeadDim = 4 * wgLanes

// matmulTile is the side of the output tile of one matmul group (each
// of its 64 lanes computes a 4×4 block).
const matmulTile = 32

// kBlock is how many rows of the inner dimension the cpu matmul takes at
// a time over a whole tile.
const kBlock = 256

type groupKernel func(k *invocation, g uint32)

// lanes is a workgroup's memory: the reduction tree and the attention
// scores.
type lanes struct {
	red [wgLanes]float32
	sc  [maxAttnSeq]float32
}

// laneSum combines v[0..wgLanes) as the WGSL tree does: at stride s,
// lane l < s adds lane l+s.
func laneSum(v *[wgLanes]float32) float32 {
	for s := wgLanes / 2; s > 0; s >>= 1 {
		for l := range s {
			v[l] += v[l+s]
		}
	}
	return v[0]
}

func laneMax(v *[wgLanes]float32) float32 {
	for s := wgLanes / 2; s > 0; s >>= 1 {
		for l := range s {
			v[l] = max(v[l], v[l+s])
		}
	}
	return v[0]
}

// rowSum is Σ f(j) over j in [0, n), each lane summing j ≡ l, then the tree.
func (k *invocation) rowSum(n uint32, f func(j uint32) float32) float32 {
	r := &k.lanes.red
	for l := range uint32(wgLanes) {
		var s float32
		for j := l; j < n; j += wgLanes {
			s += f(j)
		}
		r[l] = s
	}
	return laneSum(r)
}

func (k *invocation) rowMax(n uint32, f func(j uint32) float32) float32 {
	r := &k.lanes.red
	for l := range uint32(wgLanes) {
		m := float32(math.Inf(-1))
		for j := l; j < n; j += wgLanes {
			m = max(m, f(j))
		}
		r[l] = m
	}
	return laneMax(r)
}

var groupKernels = map[string]groupKernel{
	"matmul": matmulGroup,
	"layernorm": func(k *invocation, g uint32) {
		h, eps := k.u(13), k.f(14)
		base := g * h
		mean := k.rowSum(h, func(j uint32) float32 { return k.ld(o0, base+j) }) / float32(h)
		v := k.rowSum(h, func(j uint32) float32 { d := k.ld(o0, base+j) - mean; return d * d })
		rstd := 1 / sqrt32(v/float32(h)+eps)
		for j := range h {
			k.st(o3, base+j, (k.ld(o0, base+j)-mean)*rstd*k.ld(o1, j)+k.ld(o2, j))
		}
		k.st(o4, g, mean)
		k.st(o5, g, rstd)
	},
	"ln_bwd_x": func(k *invocation, g uint32) {
		h := k.u(13)
		base := g * h
		mean, rstd := k.ld(o2, g), k.ld(o3, g)
		// dxhat = dy·w; dx = rstd·(dxhat − mean(dxhat) − xhat·mean(dxhat·xhat))
		xh := func(j uint32) float32 { return (k.ld(o0, base+j) - mean) * rstd }
		gr := func(j uint32) float32 { return k.ld(o4, base+j) * k.ld(o1, j) }
		s1 := k.rowSum(h, gr) / float32(h)
		s2 := k.rowSum(h, func(j uint32) float32 { return gr(j) * xh(j) }) / float32(h)
		for j := range h {
			k.st(o5, base+j, rstd*(gr(j)-s1-xh(j)*s2))
		}
	},
	"rmsnorm": func(k *invocation, g uint32) {
		h, eps := k.u(9), k.f(10)
		base := g * h
		ss := k.rowSum(h, func(j uint32) float32 { x := k.ld(o0, base+j); return x * x })
		rstd := 1 / sqrt32(ss/float32(h)+eps)
		for j := range h {
			k.st(o2, base+j, k.ld(o0, base+j)*rstd*k.ld(o1, j))
		}
		k.st(o3, g, rstd)
	},
	"rms_bwd_x": func(k *invocation, g uint32) {
		h := k.u(11)
		base := g * h
		rstd := k.ld(o2, g)
		s := k.rowSum(h, func(j uint32) float32 { return k.ld(o3, base+j) * k.ld(o1, j) * k.ld(o0, base+j) * rstd }) / float32(h)
		for j := range h {
			xh := k.ld(o0, base+j) * rstd
			k.st(o4, base+j, rstd*(k.ld(o3, base+j)*k.ld(o1, j)-xh*s))
		}
	},
	"xent_rows": func(k *invocation, g uint32) {
		vocab := k.u(7)
		base := g * vocab
		x := func(v uint32) float32 { return k.ld(o0, base+v) }
		m := k.rowMax(vocab, x)
		s := k.rowSum(vocab, func(v uint32) float32 { return exp32(x(v) - m) })
		var xl float32
		if label := k.ldi(o1, g); label >= 0 && uint32(label) < vocab {
			xl = x(uint32(label))
		}
		k.st(o2, g, m+log32(s)-xl)
	},
	"xent_mean": func(k *invocation, g uint32) {
		rows := k.u(4)
		k.st(o1, 0, k.rowSum(rows, func(r uint32) float32 { return k.ld(o0, r) })/float32(rows))
	},
	"xent_bwd": func(k *invocation, g uint32) {
		rows, vocab := k.u(8), k.u(9)
		base := g * vocab
		x := func(v uint32) float32 { return k.ld(o0, base+v) }
		m := k.rowMax(vocab, x)
		s := k.rowSum(vocab, func(v uint32) float32 { return exp32(x(v) - m) })
		label := k.ldi(o1, g)
		scale := k.ld(o2, 0) / float32(rows)
		for v := range vocab {
			p := exp32(x(v)-m) / s
			if int32(v) == label {
				p -= 1
			}
			k.st(o3, base+v, p*scale)
		}
	},
	"attn": func(k *invocation, g uint32) {
		S, H, KV, D := k.u(11), k.u(12), k.u(13), k.u(14)
		qs0, qs1, ks0, ks1, vs0, vs1, scale := k.u(15), k.u(16), k.u(17), k.u(18), k.u(19), k.u(20), k.f(21)
		i, h, b := g%S, g/S%H, g/(S*H)
		kh := h / (H / KV)
		q := b*qs0 + i*qs1 + h*D
		sc := k.lanes.sc[:i+1]
		for j := range sc {
			sc[j] = attnScore(k, q, b*ks0+uint32(j)*ks1+kh*D, D, scale)
		}
		m := k.rowMax(i+1, func(j uint32) float32 { return sc[j] })
		l := k.rowSum(i+1, func(j uint32) float32 { return exp32(sc[j] - m) })
		lse := m + log32(l)
		for j := range sc {
			sc[j] = exp32(sc[j] - lse)
		}
		for d := range D {
			var acc float32
			for j := range sc {
				acc += sc[j] * k.ld(o2, b*vs0+uint32(j)*vs1+kh*D+d)
			}
			k.st(o3, (b*S+i)*H*D+h*D+d, acc)
		}
		k.st(o4, (b*H+h)*S+i, lse)
	},
	"attn_bwd_q": func(k *invocation, g uint32) {
		S, H, KV, D := k.u(15), k.u(16), k.u(17), k.u(18)
		qs0, qs1, ks0, ks1, vs0, vs1 := k.u(19), k.u(20), k.u(21), k.u(22), k.u(23), k.u(24)
		ds0, ds1, scale := k.u(25), k.u(26), k.f(27)
		i, h, b := g%S, g/S%H, g/(S*H)
		kh := h / (H / KV)
		q := b*qs0 + i*qs1 + h*D
		row := (b*S+i)*H*D + h*D // y and dy
		lse := k.ld(o4, (b*H+h)*S+i)
		var di float32
		for e := range D {
			di += k.ld(o5, row+e) * k.ld(o3, row+e)
		}
		sc := k.lanes.sc[:i+1]
		for j := range sc {
			kj, vj := b*ks0+uint32(j)*ks1+kh*D, b*vs0+uint32(j)*vs1+kh*D
			p := exp32(attnScore(k, q, kj, D, scale) - lse)
			var dp float32
			for e := range D {
				dp += k.ld(o5, row+e) * k.ld(o2, vj+e)
			}
			sc[j] = p * (dp - di)
		}
		for d := range D {
			var acc float32
			for j := range sc {
				acc += sc[j] * k.ld(o1, b*ks0+uint32(j)*ks1+kh*D+d)
			}
			k.st(o6, b*ds0+i*ds1+h*D+d, acc*scale)
		}
	},
	"attn_bwd_kv": func(k *invocation, g uint32) {
		S, H, KV, D := k.u(17), k.u(18), k.u(19), k.u(20)
		qs0, qs1, ks0, ks1, vs0, vs1 := k.u(21), k.u(22), k.u(23), k.u(24), k.u(25), k.u(26)
		dks0, dks1, dvs0, dvs1, scale := k.u(27), k.u(28), k.u(29), k.u(30), k.f(31)
		j, kh, b := g%S, g/S%KV, g/(S*KV)
		group := H / KV
		kj, vj := b*ks0+j*ks1+kh*D, b*vs0+j*vs1+kh*D
		var dk, dv [maxHeadDim]float32
		sc := k.lanes.sc[:S]
		for h := kh * group; h < (kh+1)*group; h++ {
			p := func(i uint32) float32 {
				return exp32(attnScore(k, b*qs0+i*qs1+h*D, kj, D, scale) - k.ld(o4, (b*H+h)*S+i))
			}
			for i := j; i < S; i++ {
				sc[i] = p(i)
			}
			for d := range D {
				for i := j; i < S; i++ {
					dv[d] += sc[i] * k.ld(o5, (b*S+i)*H*D+h*D+d)
				}
			}
			for i := j; i < S; i++ {
				row := (b*S+i)*H*D + h*D
				var dp, di float32
				for e := range D {
					dp += k.ld(o5, row+e) * k.ld(o2, vj+e)
					di += k.ld(o5, row+e) * k.ld(o3, row+e)
				}
				sc[i] = p(i) * (dp - di)
			}
			for d := range D {
				for i := j; i < S; i++ {
					dk[d] += sc[i] * k.ld(o0, b*qs0+i*qs1+h*D+d)
				}
			}
		}
		for d := range D {
			k.st(o6, b*dks0+j*dks1+kh*D+d, dk[d]*scale)
			k.st(o7, b*dvs0+j*dvs1+kh*D+d, dv[d])
		}
	},
}

// matmulGroup computes one 32×32 tile of y = a·b. Every y[i,j] is the
// sum of a[i,r]·b[r,j] in r order from zero, as each WGSL lane computes
// it; the cpu computes four outputs of a row and four of a column at a
// time (sixteen running sums) so that each value it loads serves four
// products. The order of every sum is the same, so are the bits.
func matmulGroup(k *invocation, g uint32) {
	M, N := k.u(6), k.u(7)
	as0, as1, bs0, bs1, r0, r1 := k.u(9), k.u(10), k.u(11), k.u(12), k.u(13), k.u(14)
	tn := (N + matmulTile - 1) / matmulTile
	i0, j0 := g/tn*matmulTile, g%tn*matmulTile
	a := k.mem[k.p[o0]][k.p[o0+1]:]
	b := k.mem[k.p[o1]][k.p[o1+1]:]
	y := k.mem[k.p[o2]][k.p[o2+1]:]
	iEnd, jEnd := min(i0+matmulTile, M), min(j0+matmulTile, N)
	// The full 4×4 blocks, kBlock rows of the inner dimension at a time
	// so that the tile's rows of a and b stay in cache across its
	// blocks; a block continues its sums from y after the first chunk.
	for c0 := r0; ; c0 += kBlock {
		c1 := min(c0+kBlock, r1)
		// With AVX, blocks of 4×8 (mm4x8: the same products and sums in
		// the same order) read b's rows contiguously: b itself, or the
		// tile's columns of it packed.
		vec := simd && c1 > c0 && jEnd-j0 >= 8
		pb, pbs0, base := b, bs0, func(j uint32) uint32 { return j + c0*bs0 }
		if vec && bs1 != 1 {
			pb, pbs0, base = k.packB(b, c0, c1, j0, jEnd, bs0, bs1), matmulTile, func(j uint32) uint32 { return j - j0 }
		}
		for i := i0; i+4 <= iEnd; i += 4 {
			j := j0
			if vec {
				for ; j+8 <= jEnd; j += 8 {
					mm4x8(&a[i*as0+c0*as1], uintptr(4*as0), uintptr(4*as1), &pb[base(j)], uintptr(4*pbs0), uintptr(c1-c0), &y[i*N+j], uintptr(4*N), c0 > 0)
				}
			}
			for ; j+4 <= jEnd; j += 4 {
				matmul4x4(a, b, y, i, j, N, c0, c1, as0, as1, bs0, bs1)
			}
		}
		if c1 >= r1 {
			break
		}
	}
	// The edges, an output at a time.
	for i := i0; i < iEnd; i += 4 {
		for j := j0; j < jEnd; j += 4 {
			if i+4 <= iEnd && j+4 <= jEnd {
				continue
			}
			for ii := i; ii < min(i+4, iEnd); ii++ {
				for jj := j; jj < min(j+4, jEnd); jj++ {
					var s float32
					if r0 > 0 {
						s = math.Float32frombits(y[ii*N+jj])
					}
					for r := r0; r < r1; r++ {
						s += math.Float32frombits(a[ii*as0+r*as1]) * math.Float32frombits(b[r*bs0+jj*bs1])
					}
					y[ii*N+jj] = math.Float32bits(s)
				}
			}
		}
	}
}

// packB copies b's rows [c0, c1) of columns [j0, j1) into the
// invocation's buffer, matmulTile words a row, column j0 first.
func (k *invocation) packB(b []uint32, c0, c1, j0, j1, bs0, bs1 uint32) []uint32 {
	n := int(c1-c0) * matmulTile
	if cap(k.pack) < n {
		k.pack = make([]uint32, n, kBlock*matmulTile)
	}
	p := k.pack[:n]
	for r := c0; r < c1; r++ {
		row := p[(r-c0)*matmulTile:]
		for j := j0; j < j1; j++ {
			row[j-j0] = b[r*bs0+j*bs1]
		}
	}
	return p
}

// matmul4x4 is y[i..i+4, j..j+4] of matmulGroup over rows [r0, r1).
func matmul4x4(a, b, y []uint32, i, j, N, r0, r1, as0, as1, bs0, bs1 uint32) {
	var s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33 float32
	if r0 > 0 {
		f := func(o uint32) float32 { return math.Float32frombits(y[o]) }
		o := i*N + j
		s00, s01, s02, s03 = f(o), f(o+1), f(o+2), f(o+3)
		o += N
		s10, s11, s12, s13 = f(o), f(o+1), f(o+2), f(o+3)
		o += N
		s20, s21, s22, s23 = f(o), f(o+1), f(o+2), f(o+3)
		o += N
		s30, s31, s32, s33 = f(o), f(o+1), f(o+2), f(o+3)
	}
	ra, rb := i*as0+r0*as1, j*bs1+r0*bs0
	for range r1 - r0 {
		a0 := math.Float32frombits(a[ra])
		a1 := math.Float32frombits(a[ra+as0])
		a2 := math.Float32frombits(a[ra+2*as0])
		a3 := math.Float32frombits(a[ra+3*as0])
		b0 := math.Float32frombits(b[rb])
		b1 := math.Float32frombits(b[rb+bs1])
		b2 := math.Float32frombits(b[rb+2*bs1])
		b3 := math.Float32frombits(b[rb+3*bs1])
		s00, s01, s02, s03 = s00+a0*b0, s01+a0*b1, s02+a0*b2, s03+a0*b3
		s10, s11, s12, s13 = s10+a1*b0, s11+a1*b1, s12+a1*b2, s13+a1*b3
		s20, s21, s22, s23 = s20+a2*b0, s21+a2*b1, s22+a2*b2, s23+a2*b3
		s30, s31, s32, s33 = s30+a3*b0, s31+a3*b1, s32+a3*b2, s33+a3*b3
		ra += as1
		rb += bs0
	}
	o := i*N + j
	y[o], y[o+1], y[o+2], y[o+3] = math.Float32bits(s00), math.Float32bits(s01), math.Float32bits(s02), math.Float32bits(s03)
	o += N
	y[o], y[o+1], y[o+2], y[o+3] = math.Float32bits(s10), math.Float32bits(s11), math.Float32bits(s12), math.Float32bits(s13)
	o += N
	y[o], y[o+1], y[o+2], y[o+3] = math.Float32bits(s20), math.Float32bits(s21), math.Float32bits(s22), math.Float32bits(s23)
	o += N
	y[o], y[o+1], y[o+2], y[o+3] = math.Float32bits(s30), math.Float32bits(s31), math.Float32bits(s32), math.Float32bits(s33)
}

// attnScore is q·k·scale over D elements (q in operand 0, k in operand 1).
func attnScore(k *invocation, q, kk, D uint32, scale float32) float32 {
	var s float32
	for e := range D {
		s += k.ld(o0, q+e) * k.ld(o1, kk+e)
	}
	return s * scale
}

// parallelMin is the fewest items (invocations or groups) a launch
// splits across goroutines.
const parallelMin = 256

// run runs the launch on the host: every invocation (or workgroup)
// once. Items write disjoint outputs, so the cpu runs them on all cores
// in any order and gets the same bits. Small launches run on the
// caller's invocation inv; larger ones are cut into chunks for the
// worker pool. Nothing is allocated.
func (p *cpuLaunch) run(inv *invocation) {
	n := p.l.Threads
	workers := uint32(runtime.GOMAXPROCS(0))
	if n < parallelMin || workers == 1 {
		p.runRange(inv, 0, n)
		return
	}
	pool := startPool(int(workers))
	chunk := (n + 4*workers - 1) / (4 * workers)
	for lo := uint32(0); lo < n; lo += chunk {
		p.done.Add(1)
		pool <- poolJob{p: p, lo: lo, hi: min(lo+chunk, n)}
	}
	p.done.Wait()
}

func (p *cpuLaunch) runRange(inv *invocation, lo, hi uint32) {
	inv.mem, inv.p = p.mem, p.l.Params
	if p.group != nil {
		if inv.lanes == nil {
			inv.lanes = new(lanes)
		}
		for g := lo; g < hi; g++ {
			p.group(inv, g)
		}
		return
	}
	if p.ranged != nil {
		p.ranged(inv, lo, hi)
		return
	}
	for t := lo; t < hi; t++ {
		p.simt(inv, t)
	}
}

// poolJob is items [lo, hi) of a launch.
type poolJob struct {
	p      *cpuLaunch
	lo, hi uint32
}

// The kernel workers are process-wide, like the Go runtime's own: one
// per core (GOMAXPROCS when first needed), each with its own invocation
// and workgroup memory, started once and kept; every cpu backend shares
// them. Tests that check for leaked goroutines ignore KernelWorker.
var (
	poolOnce sync.Once
	poolJobs chan poolJob
)

func startPool(n int) chan<- poolJob {
	poolOnce.Do(func() {
		poolJobs = make(chan poolJob, 4*n)
		for range n {
			go KernelWorker()
		}
	})
	return poolJobs
}

// KernelWorker runs cpu kernel chunks for as long as the process lives.
// It is exported only so that goroutine-leak checks can name it.
func KernelWorker() {
	var inv invocation
	for j := range poolJobs {
		j.p.runRange(&inv, j.lo, j.hi)
		j.p.done.Done()
	}
}
