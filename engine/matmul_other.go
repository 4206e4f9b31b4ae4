//go:build !amd64

package engine

// simd is false off amd64: the cpu matmul runs its Go blocks.
var simd = false

func mm4x8(a *uint32, as0, as1 uintptr, b *uint32, bs0, n uintptr, y *uint32, ys uintptr, load bool) {
	panic("engine: mm4x8 without AVX")
}

func adamw8(p, grad, m, v *uint32, n uintptr, k *[9]float32) {
	panic("engine: adamw8 without AVX")
}
