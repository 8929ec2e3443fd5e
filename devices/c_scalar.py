"""Scalar C text for LINEAR programs: C types, value names, helper functions, and one render function per
instruction kind. devices.c_render puts these functions in its rule set and walks the program; its docstring
says how values are placed and what makes the text exact. devices.c_vector reuses the scalar functions for
work done lane by lane.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Container
from dataclasses import dataclass, field
from typing import cast

from devices.c_bits import bits_literal
from devices.linear import Program, base_of, buffer_arg, const_value, is_global
from rewrite.dtype import DType, dtypes
from rewrite.errors import CompileError
from rewrite.interval import float_to_int_in_range
from rewrite.ops import AxisType, GroupOp, Ops
from rewrite.semantics import round_to
from rewrite.uop import ConstValue, UOp

_CTYPE = {
    dtypes.bool: "_Bool", dtypes.int8: "int8_t", dtypes.uint8: "uint8_t", dtypes.int16: "int16_t",
    dtypes.uint16: "uint16_t", dtypes.int32: "int32_t", dtypes.uint32: "uint32_t", dtypes.int64: "int64_t",
    dtypes.uint64: "uint64_t", dtypes.index: "long long", dtypes.float16: "_Float16", dtypes.bfloat16: "float",
    dtypes.float32: "float", dtypes.float64: "double",
}
_NARROW_INT = frozenset({dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16})
_INFIX = {
    Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.DIV: "/", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==",
    Ops.CMPGT: ">", Ops.CMPGE: ">=", Ops.CMPLE: "<=", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<",
    Ops.SHR: ">>",
}
_LIBM = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.POW: "pow", Ops.TRUNC: "trunc"}
# results that are always in range of their type, so need no cast back
_NO_WRAP = GroupOp.Comparison | frozenset({Ops.WHERE, Ops.MAX, Ops.NOT, Ops.AND, Ops.OR, Ops.XOR})
_RESERVED = (
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "exp2 exp2f log2 log2f sin sinf sqrt sqrtf pow powf trunc truncf fabs fmod memcpy main INFINITY NAN "
    "int8_t uint8_t int16_t uint16_t int32_t uint32_t int64_t uint64_t size_t _Bool _Float16 "
    # names math.h and string.h declare at file scope, which a kernel's function name must not take
    "exp expf log logf cos cosf tan tanf floor floorf ceil ceilf round roundf fmax fmaxf fmin fminf abs fabsf "
    "y0 y1 yn j0 j1 jn gamma lgamma tgamma erf erfc strlen memset memmove strcmp"
)
_C_WORDS = frozenset(_RESERVED.split())
# the renderer's own names: values, helpers, and (c_vector) vector types `f32x16`, `llx8` and lane-loop names
_GENERATED = re.compile(r"^(data|val|alu|acc|smem|ridx|bitcast_|bits_|max_|cdiv_|cmod_|bf16_|f2i_|f32_|lane_|splat_|"
                        r"vload_|vstore_|vmax_|vwhere_|vtrunc_|vbf16_|vf16_|vh2f_|vf2h_|[iuf]\d+x\d|llx\d)")


@dataclass(frozen=True)
class Dialect:
    """What differs between the C languages the scalar rules write: type names, the qualifier of helper
    functions, and the math functions per float width (float32 names serve float16 and bfloat16 too)."""

    name: str
    types: dict[DType, str] = field(default_factory=lambda: dict(_CTYPE))
    helper_prefix: str = "static inline"
    fma: tuple[str, str] = ("__builtin_fmaf", "__builtin_fma")  # (float32, float64)
    math32: dict[Ops, str] = field(default_factory=lambda: {o: f + "f" for o, f in _LIBM.items()})
    math64: dict[Ops, str] = field(default_factory=lambda: dict(_LIBM))
    # the pragma that unrolls a loop of n iterations completely ({n}); "" where the dialect has none here
    unroll: str = 'GCC unroll {n}'

    def ctype(self, dtype: DType) -> str:
        try:
            return self.types[dtype.scalar]
        except KeyError:
            raise CompileError(f"the {self.name} renderer has no type for {dtype.name}") from None

    def storage(self, dtype: DType) -> str:
        """The element type of a buffer of `dtype` in memory (bfloat16 as its uint16 bits)."""
        return "uint16_t" if dtype.scalar is dtypes.bfloat16 else self.ctype(dtype)


C_DIALECT = Dialect("C")


def is_reserved(name: str) -> bool:
    """Is `name` a C word, a libm function used here, or of the form of a name this renderer generates?"""
    return name in _C_WORDS or _GENERATED.match(name) is not None


def unique_symbol(sym: str, taken: Container[str]) -> str:
    """`sym`, or `sym_1`, `sym_2`, ...: the first not in `taken` (kernels of one file named alike)."""
    return sym if sym not in taken else next(f"{sym}_{i}" for i in itertools.count(1) if f"{sym}_{i}" not in taken)


def ctype(dtype: DType) -> str:
    """The C type of a value of `dtype` (bfloat16 values are float registers)."""
    try:
        return _CTYPE[dtype.scalar]
    except KeyError:
        raise CompileError(f"the C renderer has no type for {dtype.name}") from None


def storage_type(dtype: DType) -> str:
    """The C element type of a buffer of `dtype` (bfloat16 is stored as its uint16 bits)."""
    return "uint16_t" if dtype.scalar is dtypes.bfloat16 else ctype(dtype)


def unparen(s: str) -> str:
    """`(a+b)` -> `a+b` when the outer parentheses enclose everything (never a statement expression's)."""
    if not (s.startswith("(") and s.endswith(")")) or s.startswith("({"):
        return s
    if "(" not in (inner := s[1:-1]) and ")" not in inner:  # the common case: no parentheses inside
        return inner
    # the nesting depth after each parenthesis but the last: the first one closes early when it comes back to 0
    # (the parentheses alone, summed at C speed: this runs on every inlined expression, long ones included)
    steps = map(_PAREN_STEP.get, s[:-1].translate(_ONLY_PARENS), itertools.repeat(0))  # non-ASCII: 0
    return s if min(itertools.accumulate(steps)) <= 0 else s[1:-1]


_ONLY_PARENS = {c: None for c in range(128) if chr(c) not in "()"}
_PAREN_STEP = {"(": 1, ")": -1}


class CContext:
    """Rendering state: names of rendered values, helpers used, name counters. Helpers are shared by every
    function of one C file, so pass the same `helpers` dict to each function's context."""

    def __init__(self, prog: Program, helpers: dict[str, str] | None = None, dialect: Dialect = C_DIALECT) -> None:
        self.prog = prog
        self.dialect = dialect
        self.names: dict[UOp, str] = {}
        self.depth: dict[UOp, int] = {}  # nesting depth of inlined expressions
        self.helpers = helpers if helpers is not None else {}
        self.counters: dict[str, int] = {}
        self.taken: set[str] = set()
        self.vector_regs: set[UOp] = set()  # REG buffers declared as one vector variable (c_vector)
        self.broadcast: set[UOp] = set()  # scalar LOADs named as a vector of equal lanes (c_bcast)
        self.bits: frozenset[UOp] = frozenset()  # 16-bit floats held as their uint16 bits (devices.c_bits)
        self.bit_names: dict[UOp, str] = {}  # a held LOAD that computing ops read too: its bits' name

    def bits_of(self, u: UOp) -> str:
        """The text of u's bits, for a value held as bits (a LOAD's name where ops read its float view)."""
        return self.bit_names.get(u) or self.names[u]

    def __getitem__(self, u: UOp) -> str:
        return self.names[u]

    def ctype(self, dtype: DType) -> str:
        """The type of a value of `dtype` in this context's dialect."""
        return self.dialect.ctype(dtype)

    def fresh(self, prefix: str) -> str:
        n = self.counters.get(prefix, 0)
        while f"{prefix}{n}" in self.taken:
            n += 1
        self.counters[prefix] = n + 1
        self.taken.add(name := f"{prefix}{n}")
        return name

    def take(self, want: str) -> str:
        """A C identifier for a user-given name (variable, SPECIAL): sanitized, clear of C words and of the
        names this renderer generates."""
        name = re.sub(r"\W", "_", want) or "v"
        if name[0].isdigit() or is_reserved(name) or name in self.taken:
            return self.fresh(f"v_{name}_")
        self.taken.add(name)
        return name

    def helper(self, name: str) -> str:
        if name not in self.helpers:
            self.helpers[name] = _helper_source(name, self.dialect)
        return name

    def define(self, name: str, source: str) -> str:
        """Add file-level C text (a typedef or a helper made elsewhere) once, after what is defined so far."""
        self.helpers.setdefault(name, source)
        return name


# ---------------------------------------------------------------- helpers (emitted once per file, when used)

_BF16 = """static inline float bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline uint16_t f32_to_bf16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  /* nan stays a quiet nan */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  /* round to nearest even */
}
static inline float bf16_round(float f) { return bf16_to_f32(f32_to_bf16(f)); }"""

# float -> int as the reference: truncate, wrap modulo 2**64 (then to the target width); nan and inf give 0
_F2I = """static inline uint64_t f2i_wrap(double x) {
  if (x > -9223372036854775808.0 && x < 9223372036854775808.0) return (uint64_t)(int64_t)x;
  if (x != x || x == INFINITY || x == -INFINITY) return 0;
  uint64_t m = (uint64_t)fabs(fmod(trunc(x), 18446744073709551616.0));  /* fmod is exact */
  return x < 0 ? 0 - m : m;
}"""


def _helper_source(name: str, dialect: Dialect = C_DIALECT) -> str:
    ctype, storage_type, fn = dialect.ctype, dialect.storage, dialect.helper_prefix
    if name == "bf16_round":
        return _BF16.replace("static inline", fn)
    if name == "f2i_wrap":
        return _F2I.replace("static inline", fn)
    kind, _, rest = name.partition("_")
    if kind == "max":
        dt = dtypes.from_name(rest)
        t = ctype(dt)
        cond = "a > b || a != a" if dt.is_float else "a > b"
        return f"{fn} {t} {name}({t} a, {t} b) {{ return ({cond}) ? a : b; }}"
    if kind in ("cdiv", "cmod"):
        dt = dtypes.from_name(rest)
        t = ctype(dt)
        # b == -1 is split off because x86 traps on INT_MIN / -1; 0 - a in uint64 wraps like the reference
        by_minus_one = "" if dt.is_unsigned else \
            f"b == ({t})-1 ? {'(' + t + ')(0 - (uint64_t)a)' if kind == 'cdiv' else '0'} : "
        sym = "/" if kind == "cdiv" else "%"
        return f"{fn} {t} {name}({t} a, {t} b) {{ return b == 0 ? 0 : {by_minus_one}a {sym} b; }}"
    if kind == "bitcast":
        src, dst = (dtypes.from_name(n) for n in rest.split("_to_"))
        load = "f32_to_bf16(x)" if src is dtypes.bfloat16 else "x"
        out = "bf16_to_f32(d)" if dst is dtypes.bfloat16 else "d"
        return (f"{fn} {ctype(dst)} {name}({ctype(src)} x) {{ {storage_type(src)} s = {load}; "
                f"{storage_type(dst)} d; memcpy(&d, &s, sizeof d); return {out}; }}")
    raise CompileError(f"no C helper named {name!r}")


# ---------------------------------------------------------------- rules: values


def render_const(x: UOp, ctx: CContext) -> str:
    if x.dtype is dtypes.float16:  # the literal names the dialect's half type
        return const_text(const_value(x), x.dtype, ctx.ctype(dtypes.float16))
    return x._prop("c_const", _const_of)


def _const_of(x: UOp) -> str:
    """A CONST's C literal (kept on the node: a CONST is shared by many kernels)."""
    return const_text(const_value(x), x.dtype)


def const_text(v: ConstValue, dt: DType, half: str = "_Float16") -> str:
    """The C literal of a constant value of `dt` (as it computes, so a bfloat16 is a float literal); `half` is
    the dialect's float16 type."""
    if dt is dtypes.bool:
        return "1" if v else "0"
    if dt.is_int:
        v = int(v)
        if dt is dtypes.index and -(1 << 31) < v < 1 << 31:
            s = str(v)  # readable indices; render_alu makes sure such an int never computes alone
        elif dt in (dtypes.int64, dtypes.index):
            s = "(-9223372036854775807LL-1)" if v == -(1 << 63) else f"{v}LL"
        elif dt is dtypes.uint64:
            s = f"{v}ULL"
        elif dt is dtypes.uint32:
            s = f"{v}u"
        else:
            s = "(-2147483647-1)" if v == -(1 << 31) else str(v)
        return f"({s})" if s.startswith("-") else s
    v = round_to(dt, v)  # a CONST may hold a float64 that its dtype rounds; render the value it stands for
    if v != v:
        s = "NAN"
    elif v in (float("inf"), float("-inf")):
        s = "INFINITY" if v > 0 else "-INFINITY"
    else:
        # repr round-trips the float64 value, which is exactly a value of dt, so C reads back that value
        s = repr(float(v)) + ("" if dt is dtypes.float64 else "f")
    if dt is dtypes.float16:
        return f"(({half}){s})"
    return f"({s})" if s.startswith("-") else s


def render_buffer_global(x: UOp) -> str:
    return f"data{buffer_arg(x).slot}"


def render_buffer_reg(x: UOp, ctx: CContext) -> str:
    name = ctx.names[x] = ctx.fresh("acc")
    return f"{ctx.ctype(x.dtype)} {name}[{x.shape[0]}];"


def render_param(x: UOp, ctx: CContext) -> str:
    return ctx.names[x]  # named when the signature was made


def render_index(x: UOp, buf: UOp, i: UOp, ctx: CContext) -> str:
    return f"{ctx[buf]}[{unparen(ctx[i])}]"


def bits_ref(ref: str, dt: DType, ctx: CContext) -> str:
    """The element lvalue `ref` of a dt buffer as uint16 bits: a bfloat16 buffer holds them, a float16 one is read
    through a may_alias type (devices.c_bits)."""
    if dt is dtypes.bfloat16:
        return ref
    ctx.define("typedef bits_u16", "typedef uint16_t bits_u16 __attribute__((may_alias));")
    return f"*(bits_u16*)&{ref}"


def bits_operand(s: UOp, ctx: CContext) -> str:
    """The bits of an operand that a value held as bits reads: a constant's bits, or the held value."""
    return bits_literal(s) if s.op is Ops.CONST else ctx.bits_of(s)


def _read(idx: UOp, ctx: CContext, bits: bool = False) -> str:
    buf = base_of(base_of(idx).src[0])
    if bits:
        return bits_ref(ctx[idx], buf.dtype, ctx)
    if is_global(buf) and buf.dtype is dtypes.bfloat16:
        ctx.helper("bf16_round")  # defines bf16_to_f32 too
        return f"bf16_to_f32({ctx[idx]})"
    return ctx[idx]


def render_load(x: UOp, idx: UOp, ctx: CContext) -> str:
    return _read(idx, ctx, x in ctx.bits)


def render_load_gated(x: UOp, idx: UOp, alt: UOp, gate: UOp, ctx: CContext) -> str:
    if x in ctx.bits:
        return f"({ctx[gate]} ? {_read(idx, ctx, True)} : {bits_operand(alt, ctx)})"
    return f"({ctx[gate]} ? {_read(idx, ctx)} : {ctx[alt]})"


def render_after(y: UOp, ctx: CContext) -> str:
    return ctx[y]


def render_custom(x: UOp, ctx: CContext) -> str:
    fmt = x.arg[0] if isinstance(x.arg, tuple) else x.arg
    try:
        return str(fmt).format(*(ctx[s] for s in x.src))
    except (IndexError, KeyError, ValueError) as e:
        raise CompileError(f"CUSTOM {fmt!r}: cannot fill it with {len(x.src)} sources: {e}") from None


def render_cast(x: UOp, y: UOp, ctx: CContext) -> str:
    a, src, dst = ctx[y], y.dtype, x.dtype
    if src is dst:
        return a
    if dst is dtypes.bool:
        return f"({a}!=0)"
    if src.is_float and dst.is_int:
        if float_to_int_in_range(x):  # finite and in range where not NaN: C's cast is exact; NaN gives 0
            return f"(({ctx.ctype(dst)})({a}!={a}?0:{a}))"
        return f"(({ctx.ctype(dst)}){ctx.helper('f2i_wrap')}((double){a}))"
    if dst is dtypes.bfloat16:
        return f"{ctx.helper('bf16_round')}((float){a})"
    return f"(({ctx.ctype(dst)}){a})"


def render_bitcast(x: UOp, y: UOp, ctx: CContext) -> str:
    a, src, dst = ctx[y], y.dtype, x.dtype
    if src is dst:
        return a
    if x in ctx.bits or y in ctx.bits:  # 16-bit ints and floats held as bits (devices.c_bits): the same bits
        return f"(({'uint16_t' if x in ctx.bits else ctx.ctype(dst)}){ctx.bits_of(y)})"
    if dst is dtypes.bool:
        return f"({a}!=0)"
    if src is dtypes.bool:
        return f"(({ctx.ctype(dst)}){a})"
    if src is dtypes.bfloat16 or dst is dtypes.bfloat16:
        ctx.helper("bf16_round")
    return f"{ctx.helper(f'bitcast_{src.name}_to_{dst.name}')}({a})"


def _wrap(dt: DType, expr: str, ctx: CContext) -> str:
    """Round or wrap an op's C result back to its dtype (C computes narrow types wider)."""
    if dt is dtypes.float16 or dt in _NARROW_INT:
        return f"(({ctx.ctype(dt)}){expr})"
    if dt is dtypes.bfloat16:
        return f"{ctx.helper('bf16_round')}({expr})"
    return expr


def shift_amount(b: UOp, text: str, dt: DType) -> str:
    """A shift amount masked to the bit width (rewrite.semantics: b & (bits - 1)); a constant in range as is."""
    if b.op is Ops.CONST and 0 <= cast(int, const_value(b)) < dt.bits:
        return text
    return f"({text}&{dt.bits - 1})"


def render_alu(x: UOp, ctx: CContext) -> str:
    o = x.op
    dt = x.src[1].dtype if o is Ops.WHERE else x.src[0].dtype
    a = [ctx[s] for s in x.src]
    first = 1 if o is Ops.WHERE else 0
    if dt is dtypes.index and all(s.op is Ops.CONST for s in x.src[first:]):
        a[first] = f"((long long){a[first]})"  # index constants render as C ints; compute in 64 bits anyway
    if o in (Ops.SHL, Ops.SHR) and dt is not dtypes.index:
        a[1] = shift_amount(x.src[1], a[1], dt)
    if o in _INFIX:
        e = f"({a[0]}{_INFIX[o]}{a[1]})"
    elif o is Ops.NEG:
        e = f"(-{a[0]})"
    elif o is Ops.NOT:
        e = f"(!{a[0]})"
    elif o is Ops.WHERE:
        if x in ctx.bits:
            a[1:] = [bits_operand(s, ctx) for s in x.src[1:]]
        e = f"({a[0]}?{a[1]}:{a[2]})"
    elif o is Ops.MAX:
        e = f"({a[0]}|{a[1]})" if dt is dtypes.bool else \
            f"{ctx.helper('max_' + ('float32' if dt is dtypes.bfloat16 else dt.name))}({a[0]}, {a[1]})"
    elif o is Ops.RECIP:
        one = {dtypes.float64: "1.0", dtypes.float16: f"({ctx.ctype(dt)})1.0f"}.get(dt, "1.0f")
        e = f"({one}/{a[0]})"
    elif o is Ops.MULACC and dt.is_float:  # fused (rewrite.semantics): float64 fma, float32 fmaf for the rest
        fn = ctx.dialect.fma[dt is dtypes.float64]
        cvt = "(float)" if dt is dtypes.float16 else ""
        e = f"{fn}({', '.join(cvt + unparen(v) for v in a)})"
    elif o is Ops.MULACC:
        e = f"({_wrap(dt, f'({a[0]}*{a[1]})', ctx)}+{a[2]})"
    elif o is Ops.TRUNC and dt.is_int:
        return a[0]
    elif o in _LIBM:
        fn = (ctx.dialect.math64 if dt is dtypes.float64 else ctx.dialect.math32)[o]
        args = a if dt is not dtypes.float16 else [f"(float){s}" for s in a]
        e = f"{fn}({', '.join(args)})"
    elif o is Ops.CDIV or o is Ops.CMOD:
        d = x.src[1]
        if d.op is Ops.CONST and const_value(d) not in (0, -1):
            e = f"({a[0]}{'/' if o is Ops.CDIV else '%'}{a[1]})"
        else:
            e = f"{ctx.helper(('cdiv_' if o is Ops.CDIV else 'cmod_') + dt.name)}({a[0]}, {a[1]})"
    else:
        raise CompileError(f"the C renderer cannot render {o.name} on {dt.name}; lowering must decompose it")
    return e if o in _NO_WRAP else _wrap(x.dtype, e, ctx)


# ---------------------------------------------------------------- rules: statements


# An innermost reduction loop of at most SHORT_REDUCE iterations (a window's taps: conv2d's 3 columns of a 3x3
# kernel) is unrolled by the C compiler: gcc -O2 keeps such a loop whole when its body is a register tile, so each
# tap pays the loop's counter, branch and the accumulators' register moves at the back edge, and the taps'
# overlapping reads (output column x at tap k reads the input x + k, which column x + 1 reads at tap k - 1) are
# loaded again per tap. conv2d (8,64,56,56) -> 64 3x3 pad 1, its conv kernel alone on one thread of this Intel
# AVX-512 host (min of 7, 3 rounds alternated, load ~1.5): x86-64-v4 ~18.1 -> ~16.6 ms, x86-64-v3 ~28.5 -> ~26.5
# ms; with the interior split of lower.interior the unroll is what lets the unchecked interior pay (split alone:
# no gain).
SHORT_REDUCE = 4


def render_range(x: UOp, b: UOp, ctx: CContext) -> str:
    rid, kind = cast(tuple, x.arg)[:2]
    want = f"ridx{rid}" if isinstance(rid, int) and rid >= 0 else ""
    name = want if want and want not in ctx.taken else ctx.fresh("ridx")
    ctx.taken.add(name)
    ctx.names[x] = name
    loop = f"for (long long {name} = 0; {name} < {unparen(ctx[b])}; {name}++) {{"
    n = const_value(b) if b.op is Ops.CONST else None
    if ctx.dialect.unroll and kind is AxisType.REDUCE and type(n) is int and 1 < n <= SHORT_REDUCE and \
            _innermost(x, ctx.prog):
        return f'_Pragma("{ctx.dialect.unroll.format(n=n)}") {loop}'
    return loop


def _innermost(r: UOp, prog: Program) -> bool:
    """Whether no loop opens inside the loop over r (only the innermost is unrolled: a 3x3 window's two loops of 3
    unrolled both made conv2d's kernel 9 copies of its tile per step, and gcc took 3-4x as long to compile it)."""
    at = prog.pos.get(r)
    if at is None or at not in prog.closer:
        return False
    return not any(u.op is Ops.RANGE for u in prog.instrs[at + 1:prog.closer[at]])


def render_end(x: UOp) -> str:
    return "\n".join("}" for _ in x.src[1:])


def render_if(g: UOp, ctx: CContext) -> str:
    return f"if ({unparen(ctx[g])}) {{"


def _write(idx: UOp, val: UOp, ctx: CContext) -> str:
    buf = base_of(base_of(idx).src[0])
    v = unparen(ctx[val])
    if val in ctx.bits:
        return f"{bits_ref(ctx[idx], buf.dtype, ctx)} = {unparen(ctx.bits_of(val))};"
    if is_global(buf) and buf.dtype is dtypes.bfloat16:
        ctx.helper("bf16_round")  # defines f32_to_bf16 too
        v = f"f32_to_bf16({v})"
    return f"{ctx[idx]} = {v};"


def render_store(idx: UOp, val: UOp, ctx: CContext) -> str:
    return _write(idx, val, ctx)


def render_store_gated(idx: UOp, val: UOp, gate: UOp, ctx: CContext) -> str:
    return f"if ({unparen(ctx[gate])}) {_write(idx, val, ctx)}"


def render_nothing() -> str:
    return ""  # BARRIER: the slices of a CPU kernel share nothing that needs one
