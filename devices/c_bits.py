"""16-bit floats that a C kernel only moves travel as their uint16 bits, so that every bit pattern comes out as it
went in: signaling nans and nan payloads included, as torch and numpy keep them.

Why: the C text holds a float16 or bfloat16 value as a float where it computes (a float32 lane of a vector,
devices.c_vtypes; a `float` for a scalar bfloat16), converted when loaded and when stored. A conversion is exact for
every value but a signaling nan, which it quiets: VCVTPH2PS (F16C) turns 0x7c01 into the float of 0x7e01, and the
store's f32_to_bf16 sets a bfloat16 nan's quiet bit. A flip, cat, pad, where, transposed or expanded copy moved
such a nan out quiet.

What: `moved_bits(prog)` is the set of 16-bit float values of a LINEAR program held as bits (the renderer's
`ctx.bits`; devices.c_scalar, devices.c_vector and devices.c_vtypes give them `uint16_t` / `u16xN` and move them
without a conversion). It is the largest set of values where each one
  * is made by a move: a LOAD from a global buffer of its own dtype (a gated one's alternative a constant or in
    the set), a WHERE whose two values are constants or in the set, a STACK of such lanes, a lane of a vector in
    the set, or a BITCAST of int16/uint16 bits or of a value in the set; and
  * is read only by moves: the value of a STORE to a global buffer of its dtype, a value of a WHERE, the
    alternative of a LOAD, a lane of a STACK or a lane taken from it by a set member, or a BITCAST to int16/uint16
    or to a set member. A LOAD may also be read by what computes, where a move reads it too: it is held as bits,
    and an op that computes reads the bits converted (`viewed`; devices.c_vector.float_view), the conversion the
    load made before, so a kernel that stores a loaded half and also computes with it keeps the stored bits.
A constant operand is written as its bits where a set member reads it (0.0 as 0, -0.0 as 0x8000, nan as the quiet
nan the float text's NAN gives). Anything that computes (an ALU op, a CAST, a comparison) reads floats: a WHERE,
STACK, lane or BITCAST that is both moved and computed with is not in the set and moves through floats as before
(see devices.c_half), exact for every value but a signaling nan, which comes out quiet.
"""

from __future__ import annotations

import math
import struct

from devices.linear import Program, base_of, const_value, is_global
from rewrite.dtype import DType, dtypes
from rewrite.ops import Ops
from rewrite.semantics import round_to
from rewrite.uop import ConstValue, UOp

FLOAT16S = frozenset({dtypes.float16, dtypes.bfloat16})
_INT16S = frozenset({dtypes.int16, dtypes.uint16})
_CONSTS = frozenset({Ops.CONST, Ops.VCONST})
_MADE = frozenset({Ops.LOAD, Ops.WHERE, Ops.STACK, Ops.INDEX, Ops.BITCAST})


def _global_of(idx: UOp) -> UOp | None:
    """The global BUFFER an INDEX (under AFTERs) addresses, else None."""
    index = base_of(idx)
    if index.op is not Ops.INDEX:
        return None
    buf = base_of(index.src[0])
    return buf if buf.op is Ops.BUFFER and is_global(buf) else None


def _operand_ok(s: UOp, dt: DType, held: set[UOp]) -> bool:
    return s in held or (s.op in _CONSTS and s.dtype is dt)


def _made_by_move(u: UOp, held: set[UOp]) -> bool:
    op, dt = u.op, u.dtype
    if op is Ops.LOAD:
        buf = _global_of(u.src[0])
        if buf is None or buf.dtype is not dt or len(u.src) not in (1, 3):
            return False
        return len(u.src) == 1 or _operand_ok(u.src[1], dt, held)
    if op is Ops.WHERE:
        return _operand_ok(u.src[1], dt, held) and _operand_ok(u.src[2], dt, held)
    if op is Ops.STACK:
        return all(_operand_ok(s, dt, held) for s in u.src)
    if op is Ops.INDEX:  # a lane of a vector value (an INDEX into a buffer is an address)
        return base_of(u.src[0]).op is not Ops.BUFFER and u.src[0] in held
    if op is Ops.BITCAST:
        return u.src[0].dtype in _INT16S or u.src[0] in held
    return False


def _read_by_move(x: UOp, u: UOp, held: set[UOp]) -> bool:
    """Does the instruction x read its operand u as bits?"""
    op = x.op
    if op is Ops.STORE:
        buf = _global_of(x.src[0])
        return x.src[1] is u and x.src[0] is not u and buf is not None and buf.dtype is u.dtype
    if op is Ops.WHERE:
        return x in held and x.src[0] is not u
    if op is Ops.LOAD:
        return x in held and x.src[0] is not u
    if op is Ops.STACK:
        return x in held
    if op is Ops.INDEX:
        return x in held and x.src[0] is u
    if op is Ops.BITCAST:
        return x.dtype in _INT16S or x in held
    return False


def _kept(u: UOp, held: set[UOp], users: list[UOp]) -> bool:
    if not _made_by_move(u, held):
        return False
    if u.op is Ops.LOAD:  # what computes reads its float view (see moved_bits); one move must read its bits
        return any(_read_by_move(x, u, held) for x in users)
    return all(_read_by_move(x, u, held) for x in users)


def moved_bits(prog: Program) -> tuple[frozenset[UOp], frozenset[UOp]]:
    """(held, viewed): the 16-bit float values of `prog` held as their bits (see the module docstring), the greatest
    set closed under its conditions (found by dropping members that break one until none does), and the LOADs
    among them that something computing reads too: such a load is held as bits, and what computes reads those bits
    converted (the conversion the load made before), so the moves that read it keep every bit."""
    users = prog.users
    held = {u for u in prog.instrs if u.op in _MADE and u.dtype in FLOAT16S and u in users}
    changed = True
    while changed:
        changed = False
        for u in list(held):
            if not _kept(u, held, users[u]):
                held.discard(u)
                changed = True
    viewed = {u for u in held if u.op is Ops.LOAD and not all(_read_by_move(x, u, held) for x in users[u])}
    return frozenset(held), frozenset(viewed)


def const_bits(v: ConstValue, dt: DType) -> int:
    """The bits of constant v as a value of dt (float16 or bfloat16); nan as the positive quiet nan."""
    f = float(round_to(dt, v))
    if math.isnan(f):
        return 0x7E00 if dt is dtypes.float16 else 0x7FC0
    if dt is dtypes.float16:
        return struct.unpack("<H", struct.pack("<e", f))[0]
    return struct.unpack("<I", struct.pack("<f", f))[0] >> 16


def bits_literal(s: UOp) -> str:
    """A scalar CONST's bits as a C literal."""
    return f"{const_bits(const_value(s), s.dtype):#06x}"


__all__ = ["FLOAT16S", "bits_literal", "const_bits", "moved_bits"]
