"""Interval analysis (min_max): a table of expressions => [vmin, vmax], and brute-force oracles for soundness.

The oracles enumerate every assignment of small variable boxes: a local evaluator with Python's floor `//`
and `%` for index expressions, and the op-semantics table (rewrite.semantics) for sized ints, casts and
floats. Sound means every value lies in [vmin, vmax]; exact means the bounds are attained.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewrite.dtype import DType, dtypes
from rewrite.errors import EvalError
from rewrite.interval import compute_min_max, dtype_range
from rewrite.ops import Ops
from rewrite.semantics import exec_alu, exec_cast, round_to
from rewrite.uop import UOp

IMIN, IMAX = dtypes.index.min, dtypes.index.max
INF = math.inf

x = UOp.variable("x", -5, 10)
y = UOp.variable("y", -3, 4)
n = UOp.variable("n", 0, 20)
p = UOp.variable("p", 1, 7)
r = UOp.range(16, 0)
x8 = UOp.variable("x8", 100, 120, dtypes.int8)
u8 = UOp.variable("u8", 0, 10, dtypes.uint8)
big = UOp.variable("big", 0, IMAX)
f = UOp.variable("f", -2, 3, dtypes.float32)
fbuf = UOp.param(0, dtypes.float32)  # a float that may be anything, NaN included


def c(v: object, dt: DType = dtypes.index) -> UOp:
    return UOp.const(v, dt)  # type: ignore[arg-type]


# fmt: off
TABLE: list[tuple[str, UOp, tuple]] = [
    # add, sub, neg, mul with negative ranges
    ("x+y",            x + y,                   (-8, 14)),
    ("x-y",            x - y,                   (-9, 13)),
    ("-x",             -x,                      (-10, 5)),
    ("x*3+1",          x * 3 + 1,               (-14, 31)),
    ("x*-2",           x * -2,                  (-20, 10)),
    ("x*y",            x * y,                   (-30, 40)),
    ("y*y",            y * y,                   (-12, 16)),   # operands are not correlated
    ("x-x",            x - x,                   (-15, 15)),
    ("x*0",            x * 0,                   (0, 0)),
    # floor division by constants of either sign
    ("x//2",           x // 2,                  (-3, 5)),
    ("x//-2",          x // -2,                 (-5, 2)),
    ("x//3",           x // 3,                  (-2, 3)),
    ("x//-3",          x // -3,                 (-4, 1)),
    ("n//1",           n // 1,                  (0, 20)),
    ("x//-1",          x // -1,                 (-10, 5)),
    # floor modulo by constants of either sign
    ("x%4",            x % 4,                   (0, 3)),
    ("n%7",            n % 7,                   (0, 6)),
    ("p%8",            p % 8,                   (1, 7)),
    ("(x+5)%16",       (x + 5) % 16,            (0, 15)),
    ("(p+8)%8",        (p + 8) % 8,             (1, 7)),
    ("(n+8)%8",        (n + 8) % 8,             (0, 7)),
    ("x%-3",           x % -3,                  (-2, 0)),
    ("p%-8",           p % -8,                  (-7, -1)),
    ("(-p)%-8",        (-p) % -8,               (-7, -1)),
    ("(-p)%8",         (-p) % 8,                (1, 7)),
    # divisor intervals
    ("x//p",           x // p,                  (-5, 10)),
    ("x//(-p)",        x // (-p),               (-10, 5)),
    ("x%p",            x % p,                   (0, 6)),
    ("n%p",            n % p,                   (0, 6)),
    ("p%(p+1)",        p % (p + 1),             (0, 7)),
    ("x%(-p)",         x % (-p),                (-6, 0)),
    ("x//y (0 in y)",  x // y,                  (IMIN, IMAX)),
    ("x%y (0 in y)",   x % y,                   (IMIN, IMAX)),
    ("x%0",            x % 0,                   (IMIN, IMAX)),
    # nested div / mod
    ("(x//2)%3",       (x // 2) % 3,            (0, 2)),
    ("(n%8)//2",       (n % 8) // 2,            (0, 3)),
    ("(x*4+2)//4",     (x * 4 + 2) // 4,        (-5, 10)),
    ("((x+5)%6)//-2",  ((x + 5) % 6) // -2,     (-3, 0)),
    ("(r//4)*4+r%4",   (r // 4) * 4 + r % 4,    (0, 15)),
    # C-truncating division and remainder
    ("x cdiv -2",      x.alu(Ops.CDIV, c(-2)),  (-5, 2)),
    ("x cdiv 3",       x.alu(Ops.CDIV, c(3)),   (-1, 3)),
    ("x cmod 4",       x.alu(Ops.CMOD, c(4)),   (-3, 3)),
    ("x cmod -4",      x.alu(Ops.CMOD, c(-4)),  (-3, 3)),
    ("y cmod 5",       y.alu(Ops.CMOD, c(5)),   (-3, 4)),
    ("n cmod p",       n.alu(Ops.CMOD, p),      (0, 6)),
    ("x cmod p",       x.alu(Ops.CMOD, p),      (-5, 6)),
    ("(x-9) cmod -p",  (x - 9).alu(Ops.CMOD, -p), (-6, 1)),
    ("(p+5) cmod p+8", (p + 5).alu(Ops.CMOD, p + 8), (0, 12)),
    ("x cdiv y",       x.alu(Ops.CDIV, y),      (IMIN, IMAX)),
    # where
    ("(x<3)?x:0",      (x < 3).where(x, 0),     (-5, 10)),
    ("(n<3)?n+10:n",   (n < 3).where(n + 10, n), (0, 30)),
    ("(x<20)?x:100",   (x < 20).where(x, 100),  (-5, 10)),
    ("(x<-10)?x:100",  (x < -10).where(x, 100), (100, 100)),
    ("True?x:y",       c(True, dtypes.bool).where(x, y), (-5, 10)),
    # comparisons
    ("x<11",           x < 11,                  (True, True)),
    ("x<-5",           x < -5,                  (False, False)),
    ("x<3",            x < 3,                   (False, True)),
    ("x!=20",          x.ne(20),                (True, True)),
    ("x!=2",           x.ne(2),                 (False, True)),
    ("c!=c",           c(2).ne(2),              (False, False)),
    ("x==20",          x.eq(20),                (False, False)),
    ("c==c",           c(2).eq(2),              (True, True)),
    ("x>10",           x > 10,                  (False, False)),
    ("x>=-5",          x >= -5,                 (True, True)),
    ("x<=10",          x <= 10,                 (True, True)),
    ("x<=9",           x <= 9,                  (False, True)),
    ("p>y-4",          p > y - 4,               (True, True)),
    ("x>y",            x > y,                   (False, True)),
    # max
    ("max(x,y)",       x.maximum(y),            (-3, 10)),
    ("max(x,20)",      x.maximum(20),           (20, 20)),
    ("max(y,0)",       y.maximum(0),            (0, 4)),
    ("min(x,y)",       x.minimum(y),            (-5, 4)),
    # casts
    ("int8(x)",        x.cast(dtypes.int8),     (-5, 10)),
    ("int8(x*30)",     (x * 30).cast(dtypes.int8), (-128, 127)),
    ("uint8(n)",       n.cast(dtypes.uint8),    (0, 20)),
    ("uint8(x)",       x.cast(dtypes.uint8),    (0, 255)),
    ("bool(x)",        x.cast(dtypes.bool),     (False, True)),
    ("bool(p)",        p.cast(dtypes.bool),     (True, True)),
    ("bool(x*0)",      (x * 0).cast(dtypes.bool), (False, False)),
    ("index(x<3)",     (x < 3).cast(dtypes.index), (0, 1)),
    ("index(int8)",    x8.cast(dtypes.index),   (100, 120)),
    ("float32(x)",     x.cast(dtypes.float32),  (-5.0, 10.0)),
    ("float16(big)",   big.cast(dtypes.float16), (0.0, INF)),
    ("int32(f)",       f.cast(dtypes.int32),    (-2, 3)),
    ("index(f*0.75)",  (f * 0.75).cast(dtypes.index), (-1, 2)),
    ("int8(fbuf)",     fbuf.cast(dtypes.int8),  (-128, 127)),
    ("int8(nan-able)", fbuf.maximum(1.0).minimum(5.0).cast(dtypes.int8), (0, 5)),  # NaN casts to 0
    ("int32(f*1e10)",  (f * 1e10).cast(dtypes.int32), (-(2**31), 2**31 - 1)),
    # shifts
    ("n<<2",           n << 2,                  (0, 80)),
    ("x<<3",           x << 3,                  (-40, 80)),
    ("x>>1",           x >> 1,                  (-3, 5)),
    ("n>>2",           n >> 2,                  (0, 5)),
    ("x>>p",           x >> p,                  (-3, 5)),
    ("1<<p",           c(1) << p,               (2, 128)),
    ("x<<-1",          x << -1,                 (IMIN, IMAX)),
    ("x<<unbounded",   x << UOp.param(3, dtypes.index).maximum(0), (IMIN, IMAX)),
    ("0<<unbounded",   c(0) << UOp.param(3, dtypes.index).maximum(0), (0, 0)),
    ("u8<<8",          u8 << 8,                 (0, 255)),
    ("u8<<4",          u8 << 4,                 (0, 160)),
    # and / or / xor
    ("x&7",            x & 7,                   (0, 7)),
    ("n&12",           n & 12,                  (0, 12)),
    ("n&p",            n & p,                   (0, 7)),
    ("y&-4",           y & -4,                  (-4, 4)),
    ("(x-6)&(y-4)",    (x - 6) & (y - 4),       (-16, 4)),
    ("n|p",            n | p,                   (1, 31)),
    ("n^p",            n ^ p,                   (0, 31)),
    ("(-p)|n",         (-p) | n,                (-7, -1)),
    ("(-p)^n",         (-p) ^ n,                (-32, -1)),
    ("(x<3)&(n<30)",   (x < 3) & (n < 30),      (False, True)),
    ("(x<-9)&(n<30)",  (x < -9) & (n < 30),     (False, False)),
    ("(x<-9)|(n<30)",  (x < -9) | (n < 30),     (True, True)),
    ("(x<3)^(n<30)",   (x < 3) ^ (n < 30),      (False, True)),
    ("~(x<20)",        ~(x < 20),               (False, False)),
    # ranges
    ("r",              r,                       (0, 15)),
    ("r*4+3",          r * 4 + 3,               (3, 63)),
    ("r//4",           r // 4,                  (0, 3)),
    ("r%4",            r % 4,                   (0, 3)),
    ("range(n+1)",     UOp.range(n + 1, 1),     (0, 20)),
    ("range(0)",       UOp.range(0, 2),         (0, 0)),
    # sized ints wrap; index never does
    ("x8+10",          x8 + 10,                 (-128, 127)),
    ("x8-10",          x8 - 10,                 (90, 110)),
    ("x8*-1",          x8 * -1,                 (-120, -100)),
    ("u8-1",           u8 - 1,                  (0, 255)),
    ("u8+245",         u8 + 245,                (245, 255)),
    ("-u8",            -u8,                     (0, 255)),
    ("big+1",          big + 1,                 (1, IMAX + 1)),
    ("big*4",          big * 4,                 (0, IMAX * 4)),
    # movement ops and markers keep their source's interval; PAD adds 0
    ("reshape",        (p + 2).reshape((1, 1)), (3, 9)),
    ("pad",            (p + 2).reshape((1,)).pad((1,), (0,)), (0, 9)),
    ("contiguous",     (p + 2).contiguous(),    (3, 9)),
    # leaves
    ("vconst",         UOp.vconst([3, -1, 7]),  (-1, 7)),
    ("buffer",         UOp.buffer(0, dtypes.uint16, (4,)), (0, 65535)),
    ("int8 param",     UOp.param(1, dtypes.int8), (-128, 127)),
    ("bool param",     UOp.param(2, dtypes.bool), (False, True)),
    ("reduce",         UOp.buffer(1, dtypes.int8, (4,)).sum(), (-128, 127)),
    # floats
    ("f+1",            f + 1.0,                 (-1.0, 4.0)),
    ("f*f",            f * f,                   (-6.0, 9.0)),
    ("f-f",            f - f,                   (-5.0, 5.0)),
    ("inf-inf",        c(INF, dtypes.float32) - c(INF, dtypes.float32), (-INF, INF)),
    ("inf+1",          c(INF, dtypes.float32) + 1.0, (INF, INF)),
    ("fbuf*0",         fbuf * 0.0,              (-INF, INF)),
    ("nan",            c(math.nan, dtypes.float32), (-INF, INF)),
    ("f16 2048+1",     c(2048.0, dtypes.float16) + 1.0, (2048.0, 2048.0)),  # rounds to even
    ("f32 overflow",   c(3e38, dtypes.float32) + c(3e38, dtypes.float32), (INF, INF)),
    ("trunc(f*0.5)",   (f * 0.5).trunc(),       (-1.0, 1.0)),
    ("sqrt(f)",        f.sqrt(),                (0.0, round_to(dtypes.float32, math.sqrt(3.0)))),
    ("f<10",           f < 10.0,                (True, True)),
    ("max(fbuf,0)>=-1", fbuf.maximum(0.0) >= -1.0, (False, True)),   # NaN >= -1 is False
    ("max(fbuf,0)!=-1", fbuf.maximum(0.0).ne(-1.0), (True, True)),   # NaN != -1 is True
    ("max(fbuf,0)<-1",  fbuf.maximum(0.0) < -1.0, (False, False)),
    ("bool(fbuf)",     fbuf.cast(dtypes.bool),  (False, True)),
    ("bool(f+3)",      (f + 3.0).cast(dtypes.bool), (True, True)),
    ("bool(fbuf>1)",   (fbuf.maximum(1.0)).cast(dtypes.bool), (True, True)),
]
# fmt: on


@pytest.mark.parametrize(("name", "expr", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_table(name: str, expr: UOp, expected: tuple) -> None:
    lo, hi = expr.min_max
    assert (lo, hi) == expected, f"{name}: {expr.render()} gave [{lo}, {hi}], expected {list(expected)}"
    # bounds have the node's value kind: bool for bool, int for ints, float for floats
    want = expr.dtype.scalar.python_type()
    assert type(lo) is want and type(hi) is want, f"{name}: bound types {type(lo)}, {type(hi)} for {expr.dtype}"


def test_table_is_large() -> None:
    assert len(TABLE) >= 40


def test_float_const_not_representable() -> None:
    # a float32 CONST holds the rounded value (rewrite.uop.normalize_const), so its interval is that point
    lo, hi = c(0.1, dtypes.float32).min_max
    r32 = round_to(dtypes.float32, 0.1)
    assert lo == hi == r32 != 0.1
    assert c(0.5, dtypes.float32).min_max == (0.5, 0.5)


def test_variable_bounds_and_cache() -> None:
    v = UOp.variable("cache_v", -7, 9)
    e = v * 2 - 1
    assert e._mm is None
    assert compute_min_max(e) == (-15, 17)
    assert e._mm == (-15, 17) and v._mm == (-7, 9)
    assert e.vmin == -15 and e.vmax == 17


def test_dtype_range() -> None:
    assert dtype_range(dtypes.int8) == (-128, 127)
    assert dtype_range(dtypes.uint32) == (0, 2**32 - 1)
    assert dtype_range(dtypes.bool) == (False, True)
    assert dtype_range(dtypes.float16) == (-INF, INF)
    assert dtype_range(dtypes.int8.ptr()) == (-128, 127)


# ---------------------------------------------------------------- deep graphs


def test_deep_chain_no_recursion() -> None:
    v = UOp.variable("chain_v", 0, 10)
    e = v
    for _ in range(300_000):
        e = e + 1
    assert e.min_max == (300_000, 300_010)


def test_incremental_growth_reuses_cache() -> None:
    # asking after every step must cost only the new node, or this loop would be quadratic
    v = UOp.variable("grow_v", -1, 1)
    e = v
    for i in range(20_000):
        e = (e + 1) if i % 2 else (e * 1)
        assert e.vmax == 1 + (i + 1) // 2


# ---------------------------------------------------------------- index expressions: brute-force soundness

_INT_OPS = {
    Ops.ADD: lambda a, b: a + b,
    Ops.SUB: lambda a, b: a - b,
    Ops.MUL: lambda a, b: a * b,
    Ops.IDIV: lambda a, b: None if b == 0 else a // b,
    Ops.MOD: lambda a, b: None if b == 0 else a % b,
    Ops.MAX: max,
    Ops.CMPLT: lambda a, b: a < b,
    Ops.CMPNE: lambda a, b: a != b,
    Ops.NEG: lambda a: -a,
}


def evaluate(root: UOp, env: dict[str, int]) -> int | bool | None:
    """The value of an index expression under `env`; None where it divides by zero (no value there)."""
    vals: dict[UOp, object] = {}
    for u in root.toposort():
        if u.op is Ops.CONST:
            vals[u] = u.arg[0]  # type: ignore[index]
        elif u.op is Ops.PARAM:
            vals[u] = env[u.arg.slot]  # type: ignore[union-attr]
        elif u.op is Ops.VCONST:
            vals[u] = None  # shape operands only
        elif u.op is Ops.WHERE:
            cond, a, b = (vals[s] for s in u.src)
            vals[u] = None if cond is None else (a if cond else b)
        else:
            args = [vals[s] for s in u.src]
            vals[u] = None if any(a is None for a in args) else _INT_OPS[u.op](*args)
    return vals[root]  # type: ignore[return-value]


VARS = [("a", "b", "cc")[i] for i in range(3)]


@st.composite
def boxes(draw: st.DrawFn, k: int) -> list[tuple[str, int, int]]:
    out = []
    for name in VARS[:k]:
        lo = draw(st.sampled_from([-5, -2, 0, 1]))
        out.append((name, lo, lo + draw(st.integers(0, 5))))
    return out


consts = st.integers(-6, 6)


def int_expr(names: list[str], depth: int) -> st.SearchStrategy[UOp]:
    leaf = st.one_of(st.sampled_from(names).map(lambda nm: _VAR[nm]), consts.map(c))
    if depth == 0:
        return leaf
    sub = int_expr(names, depth - 1)
    nonzero = consts.filter(lambda v: v != 0).map(c)
    return st.one_of(
        leaf,
        st.tuples(sub, sub).map(lambda t: t[0] + t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] - t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] * t[1]),
        st.tuples(sub, sub).map(lambda t: t[0].maximum(t[1])),
        st.tuples(sub, nonzero).map(lambda t: t[0] // t[1]),
        st.tuples(sub, nonzero).map(lambda t: t[0] % t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] // t[1]),  # divisor may be 0 for some assignments
        st.tuples(sub, sub).map(lambda t: t[0] % t[1]),
        st.tuples(sub).map(lambda t: -t[0]),
        st.tuples(bool_expr(names, depth - 1), sub, sub).map(lambda t: t[0].where(t[1], t[2])),
    )


def bool_expr(names: list[str], depth: int) -> st.SearchStrategy[UOp]:
    sub = int_expr(names, max(depth - 1, 0))
    return st.one_of(st.tuples(sub, sub).map(lambda t: t[0] < t[1]), st.tuples(sub, sub).map(lambda t: t[0].ne(t[1])))


_VAR: dict[str, UOp] = {}


def _assignments(box: list[tuple[str, int, int]]) -> list[dict[str, int]]:
    names = [b[0] for b in box]
    return [dict(zip(names, vs, strict=True)) for vs in itertools.product(*(range(lo, hi + 1) for _, lo, hi in box))]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_index_expressions_sound(data: st.DataObject) -> None:
    k = data.draw(st.integers(1, 3))
    box = data.draw(boxes(k))
    _VAR.clear()
    _VAR.update({nm: UOp.variable(nm, lo, hi) for nm, lo, hi in box})
    names = [b[0] for b in box]
    expr = data.draw(st.one_of(int_expr(names, 3), bool_expr(names, 3)))
    lo, hi = expr.min_max
    assert lo <= hi
    for env in _assignments(box):
        v = evaluate(expr, env)
        assert v is None or lo <= v <= hi, f"{expr.render()} = {v} at {env}, outside [{lo}, {hi}]"


binary_exact = st.sampled_from(["add", "sub", "mul", "max"])


@settings(max_examples=200, deadline=None)
@given(binary_exact, st.integers(-8, 8), st.integers(0, 7), st.integers(-8, 8), st.integers(0, 7))
def test_binary_exact(opname: str, alo: int, aw: int, blo: int, bw: int) -> None:
    a, b = UOp.variable("ea", alo, alo + aw), UOp.variable("eb", blo, blo + bw)
    fn = {
        "add": lambda s, t: s + t,
        "sub": lambda s, t: s - t,
        "mul": lambda s, t: s * t,
        "max": lambda s, t: s.maximum(t) if isinstance(s, UOp) else max(s, t),
    }[opname]
    vals = [fn(i, j) for i in range(alo, alo + aw + 1) for j in range(blo, blo + bw + 1)]
    assert fn(a, b).min_max == (min(vals), max(vals))


@settings(max_examples=200, deadline=None)
@given(st.integers(-20, 20), st.integers(0, 25), st.integers(-9, 9).filter(lambda v: v != 0))
def test_const_div_mod_exact(lo: int, w: int, k: int) -> None:
    v = UOp.variable("dv", lo, lo + w)
    for expr, fn in ((v // k, lambda i: i // k), (v % k, lambda i: i % k)):
        vals = [fn(i) for i in range(lo, lo + w + 1)]
        assert expr.min_max == (min(vals), max(vals)), expr.render()


# ---------------------------------------------------------------- sized ints, casts, floats: the semantics table

INT_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.index]
INT_BINARY = [
    Ops.ADD,
    Ops.SUB,
    Ops.MUL,
    Ops.MAX,
    Ops.IDIV,
    Ops.MOD,
    Ops.CDIV,
    Ops.CMOD,
    Ops.AND,
    Ops.OR,
    Ops.XOR,
    Ops.SHL,
    Ops.SHR,
    Ops.CMPLT,
    Ops.CMPNE,
    Ops.CMPEQ,
    Ops.CMPGT,
    Ops.CMPGE,
    Ops.CMPLE,
]


@st.composite
def int_box(draw: st.DrawFn, dt: DType) -> tuple[int, int]:
    # near zero, or near either end of the dtype, so that wrapping and signs both get exercised
    lo_d, hi_d = (-300, 300) if dt is dtypes.index else (dt.min, dt.max)
    anchor = draw(st.sampled_from([lo_d, 0, hi_d, -9, 17]))
    lo = max(lo_d, min(hi_d, anchor + draw(st.integers(-12, 12))))
    return lo, min(hi_d, lo + draw(st.integers(0, 10)))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(INT_DTYPES), st.sampled_from(INT_BINARY), st.data())
def test_int_ops_sound_against_semantics(dt: DType, op: Ops, data: st.DataObject) -> None:
    (alo, ahi), (blo, bhi) = data.draw(int_box(dt)), data.draw(int_box(dt))
    if op in (Ops.SHL, Ops.SHR):
        blo = data.draw(st.integers(0, 3 if dt is dtypes.index else dt.bits - 1))
        bhi = blo + data.draw(st.integers(0, 3))
    a, b = UOp.variable("sa", alo, ahi, dt), UOp.variable("sb", blo, bhi, dt)
    lo, hi = a.alu(op, b).min_max
    rdt = dtypes.bool if op.name.startswith("CMP") else dt
    assert type(lo) is rdt.python_type() and type(hi) is rdt.python_type()
    for i in range(alo, ahi + 1):
        for j in range(blo, bhi + 1):
            try:
                v = exec_alu(op, dt, i, j)
            except EvalError:  # division by zero, shift out of range: no value to bound
                continue
            assert lo <= v <= hi, f"{dt.name} {i} {op.name} {j} = {v}, outside [{lo}, {hi}]"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(INT_DTYPES), st.sampled_from([*INT_DTYPES, dtypes.bool, dtypes.float16, dtypes.float32]), st.data()
)
def test_casts_sound_against_semantics(frm: DType, to: DType, data: st.DataObject) -> None:
    lo_v, hi_v = data.draw(int_box(frm))
    e = UOp.variable("cv", lo_v, hi_v, frm).cast(to)
    lo, hi = e.min_max
    for i in range(lo_v, hi_v + 1):
        v = exec_cast(i, frm, to)
        assert lo <= v <= hi, f"{frm.name} {i} -> {to.name} = {v}, outside [{lo}, {hi}]"


FLOAT_DTYPES = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
special_floats = st.sampled_from([0.0, -0.0, 1.0, -1.0, 65504.0, 3e38, -3e38, 1e-40, INF, -INF])
floats = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), special_floats)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(FLOAT_DTYPES),
    st.sampled_from([Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE]),
    st.lists(floats, min_size=4, max_size=4),
    st.lists(st.floats(0, 1), min_size=6, max_size=6),
)
def test_float_ops_sound_against_semantics(dt: DType, op: Ops, ends: list[float], ts: list[float]) -> None:
    ends = [round_to(dt, v) for v in ends]  # type: ignore[misc]
    (alo, ahi), (blo, bhi) = sorted(ends[:2]), sorted(ends[2:])
    a, b = UOp.variable("fa", alo, ahi, dt), UOp.variable("fb", blo, bhi, dt)  # type: ignore[arg-type]
    lo, hi = a.alu(op, b).min_max

    def inside(s: float, e: float, t: float) -> float:  # a value of dt in [s, e]
        if math.isinf(s) or math.isinf(e):
            return s if t < 0.5 else e
        v = round_to(dt, s + (e - s) * t)
        return min(max(v, s), e)  # type: ignore[type-var, return-value]

    pts_a = [alo, ahi, *(inside(alo, ahi, t) for t in ts[:3])]
    pts_b = [blo, bhi, *(inside(blo, bhi, t) for t in ts[3:])]
    for i in pts_a:
        for j in pts_b:
            v = exec_alu(op, dt, i, j)
            assert v != v or lo <= v <= hi, f"{dt.name} {i} {op.name} {j} = {v}, outside [{lo}, {hi}]"
