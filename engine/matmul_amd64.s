#include "textflag.h"

// func mm4x8(a *uint32, as0, as1 uintptr, b *uint32, bs0, n uintptr, y *uint32, ys uintptr, load bool)
//
// y[0..4][0..8] (+)= Σ_{r<n} a[r·as1 + i·as0] · b[r·bs0 + j], rows of y
// ys bytes apart, strides in bytes; the 8 columns of b contiguous. Each
// product is rounded, then added (VMULPS, VADDPS: no fused multiply-add),
// so every output gets the bits of the scalar loop in matmul4x4.
TEXT ·mm4x8(SB), NOSPLIT, $0-65
	MOVQ a+0(FP), SI
	MOVQ as0+8(FP), R8
	MOVQ as1+16(FP), R9
	MOVQ b+24(FP), DI
	MOVQ bs0+32(FP), R10
	MOVQ n+40(FP), CX
	MOVQ y+48(FP), DX
	MOVQ ys+56(FP), R11
	MOVBLZX load+64(FP), AX
	LEAQ (DX)(R11*2), R12
	TESTQ AX, AX
	JZ zero
	VMOVUPS (DX), Y0
	VMOVUPS (DX)(R11*1), Y1
	VMOVUPS (R12), Y2
	VMOVUPS (R12)(R11*1), Y3
	JMP check
zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
check:
	TESTQ CX, CX
	JZ store
loop:
	VMOVUPS (DI), Y4
	LEAQ (SI)(R8*2), R13
	VBROADCASTSS (SI), Y5
	VMULPS Y4, Y5, Y5
	VADDPS Y5, Y0, Y0
	VBROADCASTSS (SI)(R8*1), Y6
	VMULPS Y4, Y6, Y6
	VADDPS Y6, Y1, Y1
	VBROADCASTSS (R13), Y7
	VMULPS Y4, Y7, Y7
	VADDPS Y7, Y2, Y2
	VBROADCASTSS (R13)(R8*1), Y8
	VMULPS Y4, Y8, Y8
	VADDPS Y8, Y3, Y3
	ADDQ R9, SI
	ADDQ R10, DI
	DECQ CX
	JNZ loop
store:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, (DX)(R11*1)
	VMOVUPS Y2, (R12)
	VMOVUPS Y3, (R12)(R11*1)
	VZEROUPPER
	RET

// func adamw8(p, grad, m, v *uint32, n uintptr, k *[9]float32)
//
// AdamW over n blocks of 8 elements: with k = (β1, 1−β1, β2, 1−β2, c1,
// c2, ε, lr, wd), m = β1·m + (1−β1)·g, v = β2·v + ((1−β2)·g)·g, p −=
// lr·(m/c1/(√(v/c2)+ε) + wd·p): the operations of the scalar adamw in
// its order, each rounded (no fused multiply-add; VSQRTPS is correctly
// rounded as math.Sqrt of the float64 then rounded is), so every
// element gets the scalar loop's bits.
TEXT ·adamw8(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ v+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	VBROADCASTSS 0(AX), Y8
	VBROADCASTSS 4(AX), Y9
	VBROADCASTSS 8(AX), Y10
	VBROADCASTSS 12(AX), Y11
	VBROADCASTSS 16(AX), Y12
	VBROADCASTSS 20(AX), Y13
	VBROADCASTSS 24(AX), Y14
	VBROADCASTSS 28(AX), Y15
	VBROADCASTSS 32(AX), Y7
	TESTQ CX, CX
	JZ adone
aloop:
	VMOVUPS (SI), Y0
	VMOVUPS (R8), Y1
	VMULPS Y1, Y8, Y1
	VMULPS Y0, Y9, Y2
	VADDPS Y2, Y1, Y1
	VMOVUPS Y1, (R8)
	VMOVUPS (R9), Y2
	VMULPS Y2, Y10, Y2
	VMULPS Y0, Y11, Y3
	VMULPS Y0, Y3, Y3
	VADDPS Y3, Y2, Y2
	VMOVUPS Y2, (R9)
	VDIVPS Y13, Y2, Y3
	VSQRTPS Y3, Y3
	VADDPS Y14, Y3, Y3
	VDIVPS Y12, Y1, Y4
	VDIVPS Y3, Y4, Y4
	VMOVUPS (DI), Y5
	VMULPS Y5, Y7, Y6
	VADDPS Y6, Y4, Y4
	VMULPS Y4, Y15, Y4
	VSUBPS Y4, Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	DECQ CX
	JNZ aloop
adone:
	VZEROUPPER
	RET
