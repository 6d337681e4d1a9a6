//go:build amd64 && !purego

#include "textflag.h"

// GEMM micro-kernels: for r < MR, c < NR
//
//	C[coff[r] + c] += Σ_{j < k} A[r·rs + j·ks] · B[j·ldb + c]
//
// Arguments (all counts in elements): k+0(FP) > 0, a+8(FP), rs+16(FP),
// ks+24(FP), b+32(FP), ldb+40(FP), c+48(FP), coff+56(FP) (MR ints).
//
// Register use in the loop:
//	CX  remaining k          DX  &B[j·ldb]        R10 ldb in bytes
//	SI  &A[0·rs + j·ks]      DI  &A[4·rs + j·ks]  BX  &A[8·rs + j·ks]
//	R8  rs in bytes          R11 3·rs in bytes    R9  ks in bytes
// Rows 0…3 are (SI), (SI)(R8*1), (SI)(R8*2), (SI)(R11*1); rows 4…7 the
// same from DI, rows 8…11 from BX.

// SETUP loads the arguments; shift is log2 of the element size.
#define SETUP(shift) \
	MOVQ k+0(FP), CX; \
	MOVQ a+8(FP), SI; \
	MOVQ rs+16(FP), R8; \
	SHLQ $shift, R8; \
	MOVQ ks+24(FP), R9; \
	SHLQ $shift, R9; \
	MOVQ b+32(FP), DX; \
	MOVQ ldb+40(FP), R10; \
	SHLQ $shift, R10; \
	LEAQ (R8)(R8*2), R11; \
	LEAQ (SI)(R8*4), DI; \
	LEAQ (DI)(R8*4), BX

// ADVANCE moves the A and B pointers to the next j.
#define ADVANCE \
	ADDQ R9, SI; \
	ADDQ R9, DI; \
	ADDQ R9, BX; \
	ADDQ R10, DX

// ---------------------------------------------------------------------
// AVX-512, float32, 12×32: accumulators Z0…Z23 (row r in Z2r, Z2r+1),
// B in Z24, Z25, broadcasts in Z26…Z31.

#define ROWS32(addr, bc, acc0, acc1) \
	VBROADCASTSS addr, bc; \
	VFMADD231PS Z24, bc, acc0; \
	VFMADD231PS Z25, bc, acc1

#define STORES32(idx, acc0, acc1) \
	MOVQ idx*8(SI), AX; \
	VADDPS (DX)(AX*4), acc0, acc0; \
	VMOVUPS acc0, (DX)(AX*4); \
	VADDPS 64(DX)(AX*4), acc1, acc1; \
	VMOVUPS acc1, 64(DX)(AX*4)

// func sgemmAVX512(k int, a *float32, rs, ks int, b *float32, ldb int, c *float32, coff *int)
TEXT ·sgemmAVX512(SB), NOSPLIT, $0-64
	SETUP(2)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

s512loop:
	VMOVUPS (DX), Z24
	VMOVUPS 64(DX), Z25
	ROWS32((SI), Z26, Z0, Z1)
	ROWS32((SI)(R8*1), Z27, Z2, Z3)
	ROWS32((SI)(R8*2), Z28, Z4, Z5)
	ROWS32((SI)(R11*1), Z29, Z6, Z7)
	ROWS32((DI), Z30, Z8, Z9)
	ROWS32((DI)(R8*1), Z31, Z10, Z11)
	ROWS32((DI)(R8*2), Z26, Z12, Z13)
	ROWS32((DI)(R11*1), Z27, Z14, Z15)
	ROWS32((BX), Z28, Z16, Z17)
	ROWS32((BX)(R8*1), Z29, Z18, Z19)
	ROWS32((BX)(R8*2), Z30, Z20, Z21)
	ROWS32((BX)(R11*1), Z31, Z22, Z23)
	ADVANCE
	DECQ CX
	JNZ  s512loop

	MOVQ c+48(FP), DX
	MOVQ coff+56(FP), SI
	STORES32(0, Z0, Z1)
	STORES32(1, Z2, Z3)
	STORES32(2, Z4, Z5)
	STORES32(3, Z6, Z7)
	STORES32(4, Z8, Z9)
	STORES32(5, Z10, Z11)
	STORES32(6, Z12, Z13)
	STORES32(7, Z14, Z15)
	STORES32(8, Z16, Z17)
	STORES32(9, Z18, Z19)
	STORES32(10, Z20, Z21)
	STORES32(11, Z22, Z23)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------
// AVX-512, float64, 12×16: the same layout with eight doubles per register.

#define ROWS64(addr, bc, acc0, acc1) \
	VBROADCASTSD addr, bc; \
	VFMADD231PD Z24, bc, acc0; \
	VFMADD231PD Z25, bc, acc1

#define STORES64(idx, acc0, acc1) \
	MOVQ idx*8(SI), AX; \
	VADDPD (DX)(AX*8), acc0, acc0; \
	VMOVUPD acc0, (DX)(AX*8); \
	VADDPD 64(DX)(AX*8), acc1, acc1; \
	VMOVUPD acc1, 64(DX)(AX*8)

// func dgemmAVX512(k int, a *float64, rs, ks int, b *float64, ldb int, c *float64, coff *int)
TEXT ·dgemmAVX512(SB), NOSPLIT, $0-64
	SETUP(3)
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	VPXORQ Z4, Z4, Z4
	VPXORQ Z5, Z5, Z5
	VPXORQ Z6, Z6, Z6
	VPXORQ Z7, Z7, Z7
	VPXORQ Z8, Z8, Z8
	VPXORQ Z9, Z9, Z9
	VPXORQ Z10, Z10, Z10
	VPXORQ Z11, Z11, Z11
	VPXORQ Z12, Z12, Z12
	VPXORQ Z13, Z13, Z13
	VPXORQ Z14, Z14, Z14
	VPXORQ Z15, Z15, Z15
	VPXORQ Z16, Z16, Z16
	VPXORQ Z17, Z17, Z17
	VPXORQ Z18, Z18, Z18
	VPXORQ Z19, Z19, Z19
	VPXORQ Z20, Z20, Z20
	VPXORQ Z21, Z21, Z21
	VPXORQ Z22, Z22, Z22
	VPXORQ Z23, Z23, Z23

d512loop:
	VMOVUPD (DX), Z24
	VMOVUPD 64(DX), Z25
	ROWS64((SI), Z26, Z0, Z1)
	ROWS64((SI)(R8*1), Z27, Z2, Z3)
	ROWS64((SI)(R8*2), Z28, Z4, Z5)
	ROWS64((SI)(R11*1), Z29, Z6, Z7)
	ROWS64((DI), Z30, Z8, Z9)
	ROWS64((DI)(R8*1), Z31, Z10, Z11)
	ROWS64((DI)(R8*2), Z26, Z12, Z13)
	ROWS64((DI)(R11*1), Z27, Z14, Z15)
	ROWS64((BX), Z28, Z16, Z17)
	ROWS64((BX)(R8*1), Z29, Z18, Z19)
	ROWS64((BX)(R8*2), Z30, Z20, Z21)
	ROWS64((BX)(R11*1), Z31, Z22, Z23)
	ADVANCE
	DECQ CX
	JNZ  d512loop

	MOVQ c+48(FP), DX
	MOVQ coff+56(FP), SI
	STORES64(0, Z0, Z1)
	STORES64(1, Z2, Z3)
	STORES64(2, Z4, Z5)
	STORES64(3, Z6, Z7)
	STORES64(4, Z8, Z9)
	STORES64(5, Z10, Z11)
	STORES64(6, Z12, Z13)
	STORES64(7, Z14, Z15)
	STORES64(8, Z16, Z17)
	STORES64(9, Z18, Z19)
	STORES64(10, Z20, Z21)
	STORES64(11, Z22, Z23)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------
// AVX-512 narrow kernels, 12×16 float32 and 12×8 float64: one register of
// accumulators per row (Z0…Z11), B in Z24, broadcasts in Z26…Z31. They
// waste half as much on outputs of at most 16 (8) columns.

#define NROWS32(addr, bc, acc) \
	VBROADCASTSS addr, bc; \
	VFMADD231PS Z24, bc, acc

#define NSTORES32(idx, acc) \
	MOVQ idx*8(SI), AX; \
	VADDPS (DX)(AX*4), acc, acc; \
	VMOVUPS acc, (DX)(AX*4)

// func sgemmAVX512N(k int, a *float32, rs, ks int, b *float32, ldb int, c *float32, coff *int)
TEXT ·sgemmAVX512N(SB), NOSPLIT, $0-64
	SETUP(2)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11

sn512loop:
	VMOVUPS (DX), Z24
	NROWS32((SI), Z26, Z0)
	NROWS32((SI)(R8*1), Z27, Z1)
	NROWS32((SI)(R8*2), Z28, Z2)
	NROWS32((SI)(R11*1), Z29, Z3)
	NROWS32((DI), Z30, Z4)
	NROWS32((DI)(R8*1), Z31, Z5)
	NROWS32((DI)(R8*2), Z26, Z6)
	NROWS32((DI)(R11*1), Z27, Z7)
	NROWS32((BX), Z28, Z8)
	NROWS32((BX)(R8*1), Z29, Z9)
	NROWS32((BX)(R8*2), Z30, Z10)
	NROWS32((BX)(R11*1), Z31, Z11)
	ADVANCE
	DECQ CX
	JNZ  sn512loop

	MOVQ c+48(FP), DX
	MOVQ coff+56(FP), SI
	NSTORES32(0, Z0)
	NSTORES32(1, Z1)
	NSTORES32(2, Z2)
	NSTORES32(3, Z3)
	NSTORES32(4, Z4)
	NSTORES32(5, Z5)
	NSTORES32(6, Z6)
	NSTORES32(7, Z7)
	NSTORES32(8, Z8)
	NSTORES32(9, Z9)
	NSTORES32(10, Z10)
	NSTORES32(11, Z11)
	VZEROUPPER
	RET

#define NROWS64(addr, bc, acc) \
	VBROADCASTSD addr, bc; \
	VFMADD231PD Z24, bc, acc

#define NSTORES64(idx, acc) \
	MOVQ idx*8(SI), AX; \
	VADDPD (DX)(AX*8), acc, acc; \
	VMOVUPD acc, (DX)(AX*8)

// func dgemmAVX512N(k int, a *float64, rs, ks int, b *float64, ldb int, c *float64, coff *int)
TEXT ·dgemmAVX512N(SB), NOSPLIT, $0-64
	SETUP(3)
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	VPXORQ Z4, Z4, Z4
	VPXORQ Z5, Z5, Z5
	VPXORQ Z6, Z6, Z6
	VPXORQ Z7, Z7, Z7
	VPXORQ Z8, Z8, Z8
	VPXORQ Z9, Z9, Z9
	VPXORQ Z10, Z10, Z10
	VPXORQ Z11, Z11, Z11

dn512loop:
	VMOVUPD (DX), Z24
	NROWS64((SI), Z26, Z0)
	NROWS64((SI)(R8*1), Z27, Z1)
	NROWS64((SI)(R8*2), Z28, Z2)
	NROWS64((SI)(R11*1), Z29, Z3)
	NROWS64((DI), Z30, Z4)
	NROWS64((DI)(R8*1), Z31, Z5)
	NROWS64((DI)(R8*2), Z26, Z6)
	NROWS64((DI)(R11*1), Z27, Z7)
	NROWS64((BX), Z28, Z8)
	NROWS64((BX)(R8*1), Z29, Z9)
	NROWS64((BX)(R8*2), Z30, Z10)
	NROWS64((BX)(R11*1), Z31, Z11)
	ADVANCE
	DECQ CX
	JNZ  dn512loop

	MOVQ c+48(FP), DX
	MOVQ coff+56(FP), SI
	NSTORES64(0, Z0)
	NSTORES64(1, Z1)
	NSTORES64(2, Z2)
	NSTORES64(3, Z3)
	NSTORES64(4, Z4)
	NSTORES64(5, Z5)
	NSTORES64(6, Z6)
	NSTORES64(7, Z7)
	NSTORES64(8, Z8)
	NSTORES64(9, Z9)
	NSTORES64(10, Z10)
	NSTORES64(11, Z11)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------
// AVX2 + FMA, float32, 6×16: accumulators Y0…Y11 (row r in Y2r, Y2r+1),
// B in Y12, Y13, broadcasts in Y14, Y15. Rows 0…3 from SI, rows 4, 5 from
// DI.

#define AROWS32(addr, bc, acc0, acc1) \
	VBROADCASTSS addr, bc; \
	VFMADD231PS Y12, bc, acc0; \
	VFMADD231PS Y13, bc, acc1

#define ASTORES32(idx, acc0, acc1) \
	MOVQ idx*8(SI), AX; \
	VADDPS (DX)(AX*4), acc0, acc0; \
	VMOVUPS acc0, (DX)(AX*4); \
	VADDPS 32(DX)(AX*4), acc1, acc1; \
	VMOVUPS acc1, 32(DX)(AX*4)

// func sgemmAVX2(k int, a *float32, rs, ks int, b *float32, ldb int, c *float32, coff *int)
TEXT ·sgemmAVX2(SB), NOSPLIT, $0-64
	SETUP(2)
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

s2loop:
	VMOVUPS (DX), Y12
	VMOVUPS 32(DX), Y13
	AROWS32((SI), Y14, Y0, Y1)
	AROWS32((SI)(R8*1), Y15, Y2, Y3)
	AROWS32((SI)(R8*2), Y14, Y4, Y5)
	AROWS32((SI)(R11*1), Y15, Y6, Y7)
	AROWS32((DI), Y14, Y8, Y9)
	AROWS32((DI)(R8*1), Y15, Y10, Y11)
	ADVANCE
	DECQ CX
	JNZ  s2loop

	MOVQ c+48(FP), DX
	MOVQ coff+56(FP), SI
	ASTORES32(0, Y0, Y1)
	ASTORES32(1, Y2, Y3)
	ASTORES32(2, Y4, Y5)
	ASTORES32(3, Y6, Y7)
	ASTORES32(4, Y8, Y9)
	ASTORES32(5, Y10, Y11)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------
// AVX2 + FMA, float64, 6×8: as above with four doubles per register.

#define AROWS64(addr, bc, acc0, acc1) \
	VBROADCASTSD addr, bc; \
	VFMADD231PD Y12, bc, acc0; \
	VFMADD231PD Y13, bc, acc1

#define ASTORES64(idx, acc0, acc1) \
	MOVQ idx*8(SI), AX; \
	VADDPD (DX)(AX*8), acc0, acc0; \
	VMOVUPD acc0, (DX)(AX*8); \
	VADDPD 32(DX)(AX*8), acc1, acc1; \
	VMOVUPD acc1, 32(DX)(AX*8)

// func dgemmAVX2(k int, a *float64, rs, ks int, b *float64, ldb int, c *float64, coff *int)
TEXT ·dgemmAVX2(SB), NOSPLIT, $0-64
	SETUP(3)
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
	VXORPD Y8, Y8, Y8
	VXORPD Y9, Y9, Y9
	VXORPD Y10, Y10, Y10
	VXORPD Y11, Y11, Y11

d2loop:
	VMOVUPD (DX), Y12
	VMOVUPD 32(DX), Y13
	AROWS64((SI), Y14, Y0, Y1)
	AROWS64((SI)(R8*1), Y15, Y2, Y3)
	AROWS64((SI)(R8*2), Y14, Y4, Y5)
	AROWS64((SI)(R11*1), Y15, Y6, Y7)
	AROWS64((DI), Y14, Y8, Y9)
	AROWS64((DI)(R8*1), Y15, Y10, Y11)
	ADVANCE
	DECQ CX
	JNZ  d2loop

	MOVQ c+48(FP), DX
	MOVQ coff+56(FP), SI
	ASTORES64(0, Y0, Y1)
	ASTORES64(1, Y2, Y3)
	ASTORES64(2, Y4, Y5)
	ASTORES64(3, Y6, Y7)
	ASTORES64(4, Y8, Y9)
	ASTORES64(5, Y10, Y11)
	VZEROUPPER
	RET

// ---------------------------------------------------------------------
// Row gather, AVX-512. In units of 4 bytes:
//
//	for r < n: i = idx[r]
//		dst[r·dstStride : +width] = src[i·srcStride : +width]   if i ≥ 0
//		dst[r·dstStride : +width] = 0                          if i < 0
//
// Full 16-lane chunks are copied with plain moves, the tail with a masked
// load and store (K1 holds width mod 16 ones), so nothing outside a row is
// read or written.

// func gather32AVX512(dst unsafe.Pointer, dstStride int, src unsafe.Pointer, srcStride int, idx *int32, n, width int)
TEXT ·gather32AVX512(SB), NOSPLIT, $0-56
	MOVQ width+48(FP), DX
	MOVQ DX, CX
	ANDQ $15, CX
	MOVL $1, BX
	SHLQ CX, BX
	DECQ BX
	KMOVW BX, K1
	SHRQ $4, DX                  // full chunks per row
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), R8
	SHLQ $2, R8
	MOVQ src+16(FP), SI
	MOVQ srcStride+24(FP), R9
	SHLQ $2, R9
	MOVQ idx+32(FP), R10
	MOVQ n+40(FP), CX
	TESTQ CX, CX
	JZ   gdone
	VPXORD Z1, Z1, Z1

grow:
	MOVLQSX (R10), AX
	MOVQ DI, R12
	MOVQ DX, R13
	TESTQ AX, AX
	JS   gzero
	IMULQ R9, AX
	LEAQ (SI)(AX*1), R11
	TESTQ R13, R13
	JZ   gtail

gchunk:
	VMOVUPS (R11), Z0
	VMOVUPS Z0, (R12)
	ADDQ $64, R11
	ADDQ $64, R12
	DECQ R13
	JNZ  gchunk

gtail:
	VMOVUPS.Z (R11), K1, Z0
	VMOVUPS Z0, K1, (R12)
	JMP  gnext

gzero:
	TESTQ R13, R13
	JZ   gztail

gzchunk:
	VMOVUPS Z1, (R12)
	ADDQ $64, R12
	DECQ R13
	JNZ  gzchunk

gztail:
	VMOVUPS Z1, K1, (R12)

gnext:
	ADDQ $4, R10
	ADDQ R8, DI
	DECQ CX
	JNZ  grow

gdone:
	VZEROUPPER
	RET
