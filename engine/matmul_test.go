package engine

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMatmulSIMDSameBits: the AVX blocks (b's rows contiguous, or packed
// when b is transposed) give every output the bits of the Go blocks, on
// shapes with edges and over chunked inner dimensions.
func TestMatmulSIMDSameBits(t *testing.T) {
	if !simd {
		t.Skip("no AVX on this machine")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sz := range [][3]uint32{{32, 32, 16}, {37, 45, 300}, {8, 64, 5}, {64, 9, 33}, {4, 8, 1}} {
		M, N, K := sz[0], sz[1], sz[2]
		a := make([]uint32, M*K)
		b := make([]uint32, K*N)
		for i := range a {
			a[i] = math.Float32bits(float32(rng.NormFloat64()))
		}
		for i := range b {
			b[i] = math.Float32bits(float32(rng.NormFloat64()))
		}
		for _, bt := range []bool{false, true} {
			bs0, bs1 := N, uint32(1)
			if bt { // b stored [N, K] and read transposed
				bs0, bs1 = 1, K
			}
			run := func(vec bool) []uint32 {
				simd = vec
				defer func() { simd = true }()
				y := make([]uint32, M*N)
				k := &invocation{mem: [][]uint32{a, b, y}}
				tiles := ((M + matmulTile - 1) / matmulTile) * ((N + matmulTile - 1) / matmulTile)
				for r0 := uint32(0); r0 < K; r0 += 100 { // chunks of 100 rows
					k.p = []uint32{0, 0, 1, 0, 2, 0, M, N, K, K, 1, bs0, bs1, r0, min(r0+100, K)}
					for g := range tiles {
						matmulGroup(k, g)
					}
				}
				return y
			}
			if want, got := run(false), run(true); !slices.Equal(want, got) {
				t.Fatalf("%dx%dx%d (b transposed %v): the AVX blocks give other bits", M, N, K, bt)
			}
		}
	}
}

// TestAdamWSIMDSameBits: the AVX AdamW update (adamw8) gives every
// element the bits of the scalar loop, for ranges of any length and
// offset, with weight decay, tiny and huge gradients and zero moments.
func TestAdamWSIMDSameBits(t *testing.T) {
	if !simd {
		t.Skip("no AVX on this machine")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 203
	draw := func() []uint32 {
		x := make([]uint32, n)
		for i := range x {
			v := float32(rng.NormFloat64())
			switch i % 7 {
			case 1:
				v *= 1e-20
			case 2:
				v *= 1e6
			case 3:
				v = 0
			}
			x[i] = math.Float32bits(v)
		}
		return x
	}
	p0, g0, m0, v0 := draw(), draw(), draw(), draw()
	for i := range v0 {
		v0[i] = math.Float32bits(float32(math.Abs(float64(math.Float32frombits(v0[i])))))
	}
	c1, c2 := float32(1-math.Pow(0.9, 3)), float32(1-math.Pow(0.999, 3))
	for _, r := range [][2]uint32{{0, n}, {5, 6}, {3, 19}, {0, 8}, {7, 200}} {
		run := func(vec bool) [][]uint32 {
			simd = vec
			defer func() { simd = true }()
			st := [][]uint32{slices.Clone(p0), slices.Clone(g0), slices.Clone(m0), slices.Clone(v0)}
			k := &invocation{mem: st, p: []uint32{0, 0, 1, 0, 2, 0, 3, 0, n, 0, 0,
				math.Float32bits(1e-3), math.Float32bits(0.9), math.Float32bits(0.999), math.Float32bits(1e-8), math.Float32bits(0.1),
				math.Float32bits(c1), math.Float32bits(c2)}}
			adamw(k, r[0], r[1])
			return st
		}
		want, got := run(false), run(true)
		for o := range want {
			if !slices.Equal(want[o], got[o]) {
				t.Fatalf("range %v: operand %d differs between AVX and the scalar loop", r, o)
			}
		}
	}
}

func BenchmarkMatmul(b *testing.B) {
	const M, N, K = 256, 256, 256
	a, bb, y := make([]uint32, M*K), make([]uint32, K*N), make([]uint32, M*N)
	for i := range a {
		a[i], bb[i] = math.Float32bits(float32(i%7)), math.Float32bits(float32(i%5))
	}
	k := &invocation{mem: [][]uint32{a, bb, y}, p: []uint32{0, 0, 1, 0, 2, 0, M, N, K, K, 1, N, 1, 0, K}}
	tiles := uint32(M / matmulTile * N / matmulTile)
	for b.Loop() {
		for g := range tiles {
			matmulGroup(k, g)
		}
	}
	b.ReportMetric(2*M*N*K*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
