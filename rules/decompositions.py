"""Decompositions: rewrite an op the target device lacks into ops it has.

Runs in the instruction-selection stage; `decompositions_for(device.supported_ops)` keeps the rules whose
removed op the device cannot execute. Every rule is exact for every dtype its left-hand side admits under
rewrite.semantics (tests/rules/test_decompositions.py evaluates both sides), except where a comment says the
rounding differs (those rules only run for a device that lacks the op entirely).
"""

from __future__ import annotations

import functools

from rewrite import Ops, Rule, RuleSet, UOp, dtypes, op, var
from rules.transcendental import transcendental, transcendental_fused

a, b, c = var("a"), var("b"), var("c")
ia, ib = var("a", dtypes.all_ints), var("b", dtypes.all_ints)

# floor division and modulo from C's truncating ones: they differ by one step when the remainder is
# nonzero and its sign differs from the divisor's
_q, _r = op.CDIV(ia, ib), op.CMOD(ia, ib)
_fix = op.AND(op.CMPNE(_r, 0), op.CMPNE(op.CMPLT(_r, 0), op.CMPLT(ib, 0)))


def _arx_round(x0: UOp, x1: UOp, rot: int) -> tuple[UOp, UOp]:
    x0 = x0 + x1
    x1 = ((x1 << rot) | (x1 >> (32 - rot))) ^ x0
    return x0, x1


def threefry_arx(a: UOp, b: UOp) -> UOp:
    """THREEFRY(a, b): Threefry-2x32-20 of counter a under key b, on the 32-bit words of each uint64 (as in
    rewrite.semantics)."""
    u32, u64 = dtypes.uint32, dtypes.uint64
    lo = lambda v: (v & 0xFFFFFFFF).cast(u32)
    hi = lambda v: (v >> 32).cast(u32)
    k0, k1 = lo(b), hi(b)
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = lo(a) + k0, hi(a) + k1
    rots = (13, 15, 26, 6, 17, 29, 16, 24)
    for r in range(20):
        x0, x1 = _arx_round(x0, x1, rots[r % 8])
        if r % 4 == 3:
            s = r // 4 + 1
            x0 = x0 + ks[s % 3]
            x1 = x1 + ks[(s + 1) % 3] + s
    return (x1.cast(u64) << 32) | x0.cast(u64)


# fmt: off
_PLAIN = [
    Rule("idiv-nonneg-to-cdiv", op.IDIV(ia, ib),   op.CDIV(ia, ib),  removes=Ops.IDIV,
         when=lambda a, b: (a.vmin >= 0) & (b.vmin > 0)),
    Rule("mod-nonneg-to-cmod",  op.MOD(ia, ib),    op.CMOD(ia, ib),  removes=Ops.MOD,
         when=lambda a, b: (a.vmin >= 0) & (b.vmin > 0)),
    Rule("idiv-to-cdiv",        op.IDIV(ia, ib),   op.ADD(_q, op.WHERE(_fix, -1, 0)),   removes=Ops.IDIV),
    Rule("mod-to-cmod",         op.MOD(ia, ib),    op.ADD(_r, op.WHERE(_fix, ib, 0)),   removes=Ops.MOD),
    Rule("threefry-to-arx",     op.THREEFRY(a, b), threefry_arx,     removes=Ops.THREEFRY),
    Rule("sub-to-add-neg",      op.SUB(a, b),      op.ADD(a, op.NEG(b)),                removes=Ops.SUB),
    Rule("neg-to-mul",          op.NEG(a),         op.MUL(a, -1),    removes=Ops.NEG),
    Rule("cmpgt-to-cmplt",      op.CMPGT(a, b),    op.CMPLT(b, a),   removes=Ops.CMPGT),
    Rule("cmpge-to-not-lt",     op.CMPGE(a, b),    op.CMPNE(op.CMPLT(a, b), True),      removes=Ops.CMPGE),
    Rule("cmple-to-not-gt",     op.CMPLE(a, b),    op.CMPNE(op.CMPLT(b, a), True),      removes=Ops.CMPLE),
    Rule("cmpeq-to-not-ne",     op.CMPEQ(a, b),    op.CMPNE(op.CMPNE(a, b), True),      removes=Ops.CMPEQ),
    Rule("not-to-cmpne",        op.NOT(a),         op.CMPNE(a, True), removes=Ops.NOT),
    # ints only: on floats max(NaN, x) must be NaN, which this form gives only for a NaN first operand
    Rule("max-to-where",        op.MAX(ia, ib),    op.WHERE(op.CMPLT(ia, ib), ib, ia),  removes=Ops.MAX),
    # ints only: float MULACC is fused (one rounding), which a multiply and an add do not give
    Rule("mulacc-to-mul-add",   op.MULACC(ia, ib, c), op.ADD(op.MUL(ia, ib), c),        removes=Ops.MULACC),
    # not exact in floating point (a/b is rounded once, a*(1/b) twice): only for devices without DIV
    Rule("div-to-mul-recip",    op.DIV(a, b),      op.MUL(a, op.RECIP(b)),              removes=Ops.DIV),
]
# fmt: on
# approximations (float32: under 1 ulp; float64: see the module), SQRT and POW last, through EXP2/LOG2; the fused
# set evaluates their polynomials with MULACC, for a target that has fused multiply-add instructions
decompositions = RuleSet("decompositions", [*_PLAIN, *transcendental])
decompositions_fused = RuleSet("decompositions-fused", [*_PLAIN, *transcendental_fused])


@functools.cache
def decompositions_for(supported: frozenset[Ops], fused: bool = False) -> RuleSet:
    """The decompositions whose removed op the device cannot execute (`fused`: polynomials with MULACC, which the
    device must then support): one RuleSet per set of supported ops, kept for the process, so its generated
    matchers are compiled once rather than per kernel."""
    rules = decompositions_fused if fused and Ops.MULACC in supported else decompositions
    return rules.only(lambda r: r.removes not in supported, name="decompositions-for-device")
