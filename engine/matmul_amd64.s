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
