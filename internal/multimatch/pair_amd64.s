#include "textflag.h"

// BROADCAST fills every byte of ymm with the byte argument at off(FP).
#define BROADCAST(off, xmm, ymm) \
	MOVBLZX off(FP), AX \
	MOVD    AX, xmm \
	VPBROADCASTB xmm, ymm

// MATCH sets dst to 0xff at each byte position whose byte in lo is x1 or
// x2 (Y1, Y2) and whose byte in hi, one further, is y1 or y2 (Y3, Y4). It
// overwrites t.
#define MATCH(lo, hi, dst, t) \
	VPCMPEQB Y1, lo, dst \
	VPCMPEQB Y2, lo, t \
	VPOR     dst, t, dst \
	VPCMPEQB Y3, hi, t \
	VPAND    dst, t, lo \
	VPCMPEQB Y4, hi, t \
	VPAND    dst, t, dst \
	VPOR     lo, dst, dst

// func indexPairBlocks(p *byte, n int, x1, x2, y1, y2 byte) int
//
// Two 32-byte blocks per iteration while at least 64 bytes remain, then
// one.
TEXT ·indexPairBlocks(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ SI, DI                // block start, for the result
	BROADCAST(x1+16, X1, Y1)
	BROADCAST(x2+17, X2, Y2)
	BROADCAST(y1+18, X3, Y3)
	BROADCAST(y2+19, X4, Y4)

loop64:
	CMPQ CX, $64
	JB   tail32
	VMOVDQU (SI), Y5
	VMOVDQU 1(SI), Y6
	VMOVDQU 32(SI), Y7
	VMOVDQU 33(SI), Y8
	MATCH(Y5, Y6, Y9, Y10)     // the first block
	MATCH(Y7, Y8, Y12, Y10)    // the second
	VPOR     Y9, Y12, Y13
	VPTEST   Y13, Y13
	JNZ      found64
	ADDQ     $64, SI
	SUBQ     $64, CX
	JMP      loop64

tail32:
	CMPQ CX, $32
	JB   none
	VMOVDQU (SI), Y5
	VMOVDQU 1(SI), Y6
	MATCH(Y5, Y6, Y9, Y10)
	VPMOVMSKB Y9, AX
	TESTL    AX, AX
	JNZ      found
	ADDQ     $32, SI
	SUBQ     $32, CX
	JMP      tail32

found64:
	VPMOVMSKB Y9, AX
	TESTL    AX, AX
	JNZ      found
	VPMOVMSKB Y12, AX
	ADDQ     $32, SI

found:
	BSFL AX, AX
	SUBQ DI, SI
	ADDQ SI, AX
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

none:
	VZEROUPPER
	MOVQ $-1, ret+24(FP)
	RET
