#include "textflag.h"

// func valgrindRequest(args *[6]uint64) uint64
//
// Valgrind's client request: the special no-op sequence of
// valgrind.h's VALGRIND_DO_CLIENT_REQUEST_EXPR for amd64 (four rotations
// of DI that add up to 128 bits, then XCHGQ BX, BX), with RAX pointing at
// the request and its arguments. Outside valgrind it does nothing and
// returns 0.
TEXT ·valgrindRequest(SB), NOSPLIT, $0-16
	MOVQ args+0(FP), AX
	MOVQ $0, DX
	ROLQ $3, DI
	ROLQ $13, DI
	ROLQ $61, DI
	ROLQ $51, DI
	XCHGQ BX, BX
	MOVQ DX, ret+8(FP)
	RET
