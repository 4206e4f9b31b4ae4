package engine

import "golang.org/x/sys/cpu"

// simd says whether the cpu matmul may use its AVX block (mm4x8).
var simd = cpu.X86.HasAVX

// mm4x8 is a 4×8 block of the cpu matmul in AVX (matmul_amd64.s): the
// same products and sums, in the same order, as matmul4x4.
//
//go:noescape
func mm4x8(a *uint32, as0, as1 uintptr, b *uint32, bs0, n uintptr, y *uint32, ys uintptr, load bool)

// adamw8 is the AdamW update of n blocks of 8 elements in AVX
// (matmul_amd64.s): the operations of adamw, in its order.
//
//go:noescape
func adamw8(p, grad, m, v *uint32, n uintptr, k *[9]float32)
