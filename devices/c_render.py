"""C source for LINEAR programs: a rule set with one rule per instruction kind or op group.

Each rule's right-hand side returns C text. `render_function` walks the checked program in order and looks
each instruction up with `C_RULES.matcher(u.op)(u, ctx)`; `ctx` (a CContext) holds the names of the values
rendered so far and collects the helper functions the text calls. What a rule returns depends on the kind:

    values      an expression: CONST literals, `data0` for GLOBAL slot 0, a variable or SPECIAL by name,
                INDEX as the lvalue `data1[ridx0]`, AFTER as its value, ALU / CAST / BITCAST / LOAD
    statements  whole lines: a REG declaration `float acc0[1];`, `for (...) {`, `}`, `if (g) {`, a STORE

The driver decides where a value lives: a LOAD is always declared (`float val0 = data1[ridx0];`) so it reads
memory where the program says; an ALU value used once in the same block is inlined, otherwise declared
(`float alu0 = ...;`), so a computation is never moved into a loop or duplicated. The scalar rules' text is
made in devices.c_scalar; vector values (shape (n,)) are GCC vector types, made in devices.c_vector, whose
docstring says which ops are native vector operators and which run lane by lane.

Exactness (the contract is rewrite.semantics; compile with -fwrapv -ffp-contract=off, never -ffast-math):
  * ints wrap: -fwrapv makes signed overflow two's complement, and an op on int8/16 or uint8/16 (computed
    in C's int) is cast back to its type. CDIV/CMOD by a constant other than 0 and -1 are C's `/` and `%`;
    otherwise a helper avoids the x86 trap of INT_MIN / -1 and division by zero (which gives 0 here, while
    the reference raises).
  * float16 is `_Float16`: every op result is cast back, and -fexcess-precision=standard makes that cast
    round. bfloat16 values are `float` registers holding bfloat16 values, rounded after every op
    (`bf16_round`: to nearest even, nan kept); in memory they are uint16 bits. A 16-bit float that is only moved
    (loaded and stored, selected, bitcast) is held as its uint16 bits (devices.c_bits), so every bit pattern, a
    signaling nan's too, comes out as it went in.
  * MAX is numpy.maximum (nan wins), not fmaxf. CAST float -> int truncates and wraps like the reference;
    nan and +-inf give 0 (`f2i_wrap`). BITCAST goes through memcpy.
  * EXP2/LOG2/SIN/POW call libm's float functions for float32/float16/bfloat16 and the double ones for
    float64; the reference rounds the double result, so float32 may differ from it by an ulp there.
"""

from __future__ import annotations

from typing import cast

from devices.c_bcast import broadcast_load
from devices.c_bits import moved_bits
from devices.c_scalar import (
    CContext,
    ctype,
    is_reserved,
    render_after,
    render_alu,
    render_bitcast,
    render_buffer_global,
    render_buffer_reg,
    render_cast,
    render_const,
    render_custom,
    render_end,
    render_if,
    render_index,
    render_load,
    render_load_gated,
    render_nothing,
    render_param,
    render_range,
    render_store,
    render_store_gated,
    storage_type,
    unparen,
)
from devices.c_vector import STREAM_FENCE, VECTOR_RULES, contiguous_start, float_view, value_type
from devices.linear import VALUE_OPS, Program, buffer_arg, is_global
from rewrite.dsl import Rule, RuleSet, op, var
from rewrite.dtype import AddrSpace, dtypes
from rewrite.errors import CompileError
from rewrite.ops import GroupOp, Ops
from rewrite.uop import UOp

C_ALU_OPS = GroupOp.ALU - {Ops.IDIV, Ops.MOD, Ops.THREEFRY}

# one rule per scalar instruction kind; devices.cuda_render puts its own rules before these
SCALAR_RULES = RuleSet("c-render", [
    Rule("c-const", op.CONST(name="x"), render_const),
    Rule("c-buffer-global", op.BUFFER(name="x", rest=True), render_buffer_global,
         when=lambda x: buffer_arg(x).addrspace == AddrSpace.GLOBAL),
    Rule("c-buffer-reg", op.BUFFER(name="x", rest=True), render_buffer_reg),
    Rule("c-variable", op.PARAM(name="x", rest=True), render_param),
    Rule("c-special", op.SPECIAL(var("b"), name="x"), render_param),
    Rule("c-index", op.INDEX(var("buf"), var("i"), name="x"), render_index),
    Rule("c-load-gated", op.LOAD(var("idx"), var("alt"), var("gate"), name="x"), render_load_gated),
    Rule("c-load", op.LOAD(var("idx"), name="x"), render_load),
    Rule("c-after", op.AFTER(var("y"), rest=True), render_after),
    Rule("c-custom", op.CUSTOM(name="x", rest=True), render_custom),
    Rule("c-cast", op.CAST(var("y"), name="x"), render_cast),
    Rule("c-bitcast", op.BITCAST(var("y"), name="x"), render_bitcast),
    Rule("c-alu", op[C_ALU_OPS](name="x", rest=True), render_alu),
    Rule("c-range", op.RANGE(var("b"), name="x"), render_range),
    Rule("c-end", op.END(name="x", rest=True), render_end),
    Rule("c-if", op.IF(var("g")), render_if),
    Rule("c-endif", op.ENDIF(rest=True), lambda: "}"),
    Rule("c-store-gated", op.STORE(var("idx"), var("val"), var("gate")), render_store_gated),
    Rule("c-store", op.STORE(var("idx"), var("val")), render_store),
    Rule("c-barrier", op.BARRIER(rest=True), render_nothing),
    Rule("c-group", op.GROUP(rest=True), lambda: ""),
])
# vector forms first: their guards pick shape (n,) values, the scalar rules take the rest
C_RULES = VECTOR_RULES + SCALAR_RULES


# ---------------------------------------------------------------- the driver


_NAMED_BY_RULE = frozenset({Ops.CONST, Ops.VCONST, Ops.INDEX, Ops.AFTER, Ops.PARAM, Ops.SPECIAL})
_VECTOR_MAKERS = frozenset({Ops.VCONST, Ops.STACK})
_VALUES = VALUE_OPS | {Ops.STACK}  # values named or inlined by the driver; LOAD and CUSTOM too when not void
_READS = frozenset({Ops.LOAD, Ops.CUSTOM, Ops.SHUFFLE})
_MAX_INLINE_DEPTH = 48  # clang rejects parentheses nested deeper than 256; name long chains instead


def _named(u: UOp, prog: Program, ctx: CContext) -> bool:
    """Must this value get a declared name, rather than being inlined into its one user?"""
    if u.op in _READS:  # a SHUFFLE too: inlined into a ?: branch, only some lanes of the warp would run it
        return True
    users = prog.users.get(u, ())
    if u.shape != () and contiguous_start(u) is not None and all(x.op is Ops.INDEX and x.src[1] is u for x in users):
        return False  # positions base + (0..n-1): the INDEXes read base, never this vector
    if len(users) != 1:
        return len(users) > 1
    # inlining into a user in another block would move the work into (or out of) a loop
    block, pos = prog.block, prog.pos
    return block[pos[users[0]]] != block[pos[u]] or ctx.depth[u] > _MAX_INLINE_DEPTH


def signature(prog: Program, name: str, ctx: CContext) -> str:
    params = [f"{storage_type(b.dtype)}* restrict data{s}" for s, b in prog.buffers.items()]
    for vname, p in prog.variables.items():
        ctx.names[p] = ctx.take(vname)
        params.append(f"const {ctype(p.dtype)} {ctx.names[p]}")
    for sname, sp in prog.specials.items():
        ctx.names[sp] = ctx.take(sname)
        params.append(f"const long long {ctx.names[sp]}")
    for s in prog.buffers:
        ctx.taken.add(f"data{s}")
    return f"void {name}({', '.join(params) or 'void'})"


_NO_LOOP_VECTORIZE = ("#if defined(__GNUC__) && !defined(__clang__)\n"
                      "#define NO_LOOP_VECTORIZE __attribute__((optimize(\"no-tree-loop-vectorize\")))\n"
                      "#else\n#define NO_LOOP_VECTORIZE\n#endif")


def _reversed_reduction(prog: Program) -> bool:
    """A kernel with an accumulator whose addresses step backwards along some loop (a FLIP inside a reduction).
    GCC 12.2's loop vectorizer miscompiles such reductions (e.g. a sum over i < n, j < 2 of d[2i + 1 - j] comes
    out wrong at -O2; GCC bug 110381, fixed in 12.4 and 13.2), so these kernels are compiled without it."""
    reg = back = False  # one pass: a REG accumulator, an index stepping backwards
    for u in prog.instrs:
        op = u.op
        if op is Ops.BUFFER:
            reg = reg or not is_global(u)
        elif u.dtype is dtypes.index and not back and (op is Ops.NEG or op is Ops.SUB or (op is Ops.MUL and any(
                s.op is Ops.CONST and isinstance(s.arg[0], int) and s.arg[0] < 0 for s in u.src))):  # type: ignore[index]
            back = True
    return reg and back


def render_function(prog: Program, name: str, helpers: dict[str, str]) -> str:
    """One C function for a checked program; helpers it needs are added to `helpers`."""
    ctx = CContext(prog, helpers)
    ctx.bits, viewed = moved_bits(prog)
    ctx.bit_names = dict.fromkeys(viewed, "")  # named when rendered (render_instr)
    attr = ""
    if _reversed_reduction(prog):
        attr = ctx.define("NO_LOOP_VECTORIZE", _NO_LOOP_VECTORIZE) + " "
    lines = [attr + signature(prog, name, ctx) + " {"]
    render_body(prog, ctx, C_RULES, lines)
    if any(u.op is Ops.STORE and u.arg == "stream" for u in prog.instrs):
        # streaming stores are weakly ordered: drained before the caller tells other threads the kernel is done
        lines.append(f"  {ctx.define('STREAM_FENCE', STREAM_FENCE)}();")
    lines.append("}")
    return "\n".join(lines)


def render_body(prog: Program, ctx: CContext, rules: RuleSet, lines: list[str], indent: int = 1) -> None:
    """Append the statements of a checked program to `lines`, each instruction rendered by the first rule of
    `rules` that matches it; the values' names go into `ctx`. Shared by every C-like renderer."""
    for u in prog.instrs:
        indent = render_instr(u, prog, ctx, rules, lines, indent)


def render_instr(u: UOp, prog: Program, ctx: CContext, rules: RuleSet, lines: list[str], indent: int) -> int:
    """Render one instruction of `prog` (see render_body): a value is named or inlined, a statement appended to
    `lines` at `indent`; returns the indentation after it."""
    op = u.op
    if op in _VECTOR_MAKERS and u not in prog.uses:
        return indent  # a BUFFER's shape operand that a linearizer listed; no value reads it
    if op is Ops.LOAD and (bl := broadcast_load(u, prog, ctx)) is not None:  # a tile's row value (c_bcast)
        nm = ctx.fresh("val")
        lines.append(f"{'  ' * indent}{bl[0]} {nm} = {bl[1]};")
        ctx.names[u], ctx.depth[u] = nm, 0
        return indent
    fn = rules.matcher(op)
    hit = fn(u, ctx) if fn is not None else None
    if hit is None:
        raise CompileError(f"{prog.where(u)}: the {ctx.dialect.name} renderer has no rule for {op.name} here")
    text = cast(str, hit[0])
    if op in _VALUES or (op in _READS and u.dtype is not dtypes.void):
        depth = ctx.depth
        d = 0
        for s in u.src:
            if (e := depth.get(s, 0)) > d:
                d = e
        depth[u] = d + 1
        if _named(u, prog, ctx):
            nm = ctx.fresh("val" if op is Ops.LOAD else "alu")
            lines.append(f"{'  ' * indent}{value_type(u, ctx)} {nm} = {unparen(text)};")
            ctx.names[u], depth[u] = nm, 0
            if u in ctx.bit_names:  # a LOAD held as bits that computing ops read too (devices.c_bits)
                ctx.bit_names[u], ctx.names[u] = nm, float_view(u, nm, ctx)
        else:
            ctx.names[u] = text
    elif op in _NAMED_BY_RULE or (op is Ops.BUFFER and is_global(u)):
        ctx.names[u] = text
    elif op is not Ops.CUSTOM and "\n" not in text:  # one statement line (or none)
        if text:
            if text[0] == "}":
                indent -= 1
            lines.append("  " * indent + text)
            if text[-1] == "{":
                indent += 1
    else:  # statements; braces set the indentation
        for line in filter(None, text.split("\n")):
            indent -= line.startswith("}")
            lines.append("  " * indent + (line if op is not Ops.CUSTOM else line + ";"))
            indent += line.endswith("{")
    return indent


# The head of every C file: the fixed-width types, the libm functions and constants the rules use, and memcpy,
# declared from the compiler's own predefined macros and builtins instead of #include <math.h>, <stdint.h> and
# <string.h>: those headers cost gcc ~14 ms of CPU per file to read (a fifth of an empty file's compile), paid
# once per compiler run. The declarations are the C standard's; a header included after them (a CUSTOM that
# wants more of libm) agrees with them (INFINITY and NAN spelled as glibc's math.h spells them).
PRELUDE = """typedef __INT8_TYPE__ int8_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __INT16_TYPE__ int16_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __INTPTR_TYPE__ intptr_t;
#ifndef INFINITY
#define INFINITY (__builtin_inff ())
#endif
#ifndef NAN
#define NAN (__builtin_nanf (""))
#endif
float exp2f(float); double exp2(double); float log2f(float); double log2(double);
float sinf(float); double sin(double); float sqrtf(float); double sqrt(double);
float powf(float, float); double pow(double, double); float truncf(float); double trunc(double);
double fabs(double); double fmod(double, double);
void* memcpy(void* restrict, const void* restrict, __SIZE_TYPE__);
"""


def render_source(funcs: list[str], helpers: dict[str, str]) -> str:
    return PRELUDE + "".join(h + "\n" for h in helpers.values()) + "\n" + "\n\n".join(funcs) + "\n"


__all__ = ["C_ALU_OPS", "C_RULES", "PRELUDE", "SCALAR_RULES", "CContext", "ctype", "is_reserved", "render_body",
           "render_function", "render_instr", "render_source", "storage_type"]
