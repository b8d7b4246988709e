#include "textflag.h"

// func indexPairBlocks(p *byte, n int, x1, x2, y1, y2 byte) int
//
// For each 32-byte block at SI it compares the bytes at SI with x1 and x2
// and those at SI+1 with y1 and y2, two blocks per iteration while at
// least 64 bytes remain.
TEXT ·indexPairBlocks(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ SI, DI                // block start, for the result
	MOVBLZX x1+16(FP), AX
	MOVD AX, X1
	VPBROADCASTB X1, Y1
	MOVBLZX x2+17(FP), AX
	MOVD AX, X2
	VPBROADCASTB X2, Y2
	MOVBLZX y1+18(FP), AX
	MOVD AX, X3
	VPBROADCASTB X3, Y3
	MOVBLZX y2+19(FP), AX
	MOVD AX, X4
	VPBROADCASTB X4, Y4

loop64:
	CMPQ CX, $64
	JB   tail32
	VMOVDQU (SI), Y5
	VMOVDQU 1(SI), Y6
	VMOVDQU 32(SI), Y7
	VMOVDQU 33(SI), Y8
	VPCMPEQB Y1, Y5, Y9
	VPCMPEQB Y2, Y5, Y10
	VPOR     Y9, Y10, Y9
	VPCMPEQB Y3, Y6, Y10
	VPCMPEQB Y4, Y6, Y11
	VPOR     Y10, Y11, Y10
	VPAND    Y9, Y10, Y9       // matches in the first block
	VPCMPEQB Y1, Y7, Y12
	VPCMPEQB Y2, Y7, Y13
	VPOR     Y12, Y13, Y12
	VPCMPEQB Y3, Y8, Y13
	VPCMPEQB Y4, Y8, Y14
	VPOR     Y13, Y14, Y13
	VPAND    Y12, Y13, Y12     // matches in the second block
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
	VPCMPEQB Y1, Y5, Y9
	VPCMPEQB Y2, Y5, Y10
	VPOR     Y9, Y10, Y9
	VPCMPEQB Y3, Y6, Y10
	VPCMPEQB Y4, Y6, Y11
	VPOR     Y10, Y11, Y10
	VPAND    Y9, Y10, Y9
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
