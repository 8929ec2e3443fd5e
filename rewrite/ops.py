"""The op set of the UOp dialect (seed 001, plus what seed 000 adds), in named groups.

The enum's order is the toposort tie-break used by the linearizer, so source ops come first and
codegen ops last. Groups are frozensets; a pattern may name a group wherever it names an op.
"""

from __future__ import annotations

import sys
from enum import EnumType, IntEnum, auto

if sys.version_info < (3, 12):

    class FastEnumType(EnumType):
        """EnumType whose classes read their members as cheaply as a plain class reads an attribute.

        Python 3.11's EnumType has a `__getattr__` (a fallback that finds nothing the class's own __dict__ lacks:
        every member is put there; 3.12 dropped it), and a metaclass with any `__getattr__` makes CPython read
        every attribute of its classes through a slow hook that calls `type.__getattribute__` as a Python-level
        method: `Ops.ADD` cost ~7x a plain class attribute, ~16k reads per kernel lowering (11% of its
        instructions, callgrind). With `object.__getattribute__` the hook takes its fast path instead: the
        metaclass's data descriptors (`__name__`, `__members__`, ...), then the class's own __dict__ (members,
        methods, properties); a name found in neither (an attribute inherited from Enum or int, such as
        `_missing_`) goes to `__getattr__`, type's full lookup. One difference remains, for dunder names that both
        the metaclass and the enum's bases define (`Ops.__eq__`, `Ops.__reduce_ex__` read off the class, which
        CPython's own special-method lookups never do): the metaclass's is found first."""

        __getattribute__ = object.__getattribute__

        def __getattr__(cls, name: str) -> object:
            return type.__getattribute__(cls, name)

else:
    FastEnumType = EnumType


class Ops(IntEnum, metaclass=FastEnumType):
    # -- source: leaf nodes --
    PARAM = auto()
    BUFFER = auto()
    BUFFERVIEW = auto()
    CONST = auto()
    VCONST = auto()
    BINARY = auto()  # raw bytes (seed 001: shape (len,), uint8); also a compiled kernel's machine code
    # -- movement: no arithmetic --
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    FLIP = auto()
    INDEX = auto()
    STACK = auto()
    REPLICATED = auto()
    BITCAST = auto()
    # -- reduce --
    REDUCE = auto()
    # -- call --
    FUNCTION = auto()
    CALL = auto()
    TUPLE = auto()
    GETTUPLE = auto()
    # -- load / store / copy --
    LOAD = auto()
    STORE = auto()
    COPY = auto()
    # -- ordering --
    RANGE = auto()
    END = auto()
    AFTER = auto()
    GROUP = auto()
    SINK = auto()
    LINEAR = auto()
    # -- elementwise unary --
    RECIP = auto()
    TRUNC = auto()
    CAST = auto()
    # -- elementwise binary --
    ADD = auto()
    MUL = auto()
    MAX = auto()
    MOD = auto()
    IDIV = auto()
    CMPLT = auto()
    CMPNE = auto()
    XOR = auto()
    OR = auto()
    AND = auto()
    SHR = auto()
    SHL = auto()
    # -- elementwise ternary --
    WHERE = auto()
    # -- decomposed elementwise: kept as ops so a device that has them natively keeps them --
    NEG = auto()
    SUB = auto()
    DIV = auto()
    CMPGT = auto()
    CMPGE = auto()
    CMPLE = auto()
    CMPEQ = auto()
    NOT = auto()
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    POW = auto()
    MULACC = auto()
    THREEFRY = auto()
    # -- device integer division: C truncation, produced late from IDIV/MOD for devices --
    CDIV = auto()
    CMOD = auto()
    # -- markers: identity on data --
    CONTIGUOUS = auto()
    CONTIGUOUSBACKWARD = auto()
    DETACH = auto()
    # -- codegen --
    BARRIER = auto()
    INS = auto()
    GETADDR = auto()
    SPECIAL = auto()
    IF = auto()
    ENDIF = auto()
    WMMA = auto()
    CUSTOM = auto()
    ATOMICADD = auto()
    CUSTOMFUNCTION = auto()
    PROGRAM = auto()
    SOURCE = auto()
    SHUFFLE = auto()  # a warp's butterfly exchange: each lane gets the value of the lane its own index XOR arg

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    __str__ = __repr__


class GroupOp:
    """Named op groups (frozensets)."""

    Source = frozenset({Ops.PARAM, Ops.BUFFER, Ops.BUFFERVIEW, Ops.CONST, Ops.VCONST, Ops.BINARY})
    Movement = frozenset(
        {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.INDEX, Ops.STACK, Ops.REPLICATED,
         Ops.BITCAST}
    )
    Reduce = frozenset({Ops.REDUCE})
    Call = frozenset({Ops.FUNCTION, Ops.CALL, Ops.TUPLE, Ops.GETTUPLE})
    LoadStore = frozenset({Ops.LOAD, Ops.STORE, Ops.COPY})
    Ordering = frozenset({Ops.RANGE, Ops.END, Ops.AFTER, Ops.GROUP, Ops.SINK, Ops.LINEAR})
    Unary = frozenset({Ops.RECIP, Ops.TRUNC, Ops.CAST})
    Binary = frozenset(
        {Ops.ADD, Ops.MUL, Ops.MAX, Ops.MOD, Ops.IDIV, Ops.CMPLT, Ops.CMPNE, Ops.XOR, Ops.OR, Ops.AND, Ops.SHR, Ops.SHL}
    )
    Ternary = frozenset({Ops.WHERE})
    Decomposed = frozenset(
        {Ops.NEG, Ops.SUB, Ops.DIV, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ, Ops.NOT, Ops.EXP2, Ops.LOG2, Ops.SIN,
         Ops.SQRT, Ops.POW, Ops.MULACC, Ops.THREEFRY}
    )
    DeviceALU = frozenset({Ops.CDIV, Ops.CMOD})
    Marker = frozenset({Ops.CONTIGUOUS, Ops.CONTIGUOUSBACKWARD, Ops.DETACH})
    Codegen = frozenset(
        {Ops.BARRIER, Ops.INS, Ops.GETADDR, Ops.SPECIAL, Ops.IF, Ops.ENDIF, Ops.WMMA, Ops.CUSTOM, Ops.ATOMICADD,
         Ops.CUSTOMFUNCTION, Ops.PROGRAM, Ops.SOURCE, Ops.SHUFFLE}
    )

    # arity classes of the value-computing (elementwise) ops, CAST and BITCAST excluded (their arg is a dtype)
    UnaryALU = frozenset({Ops.RECIP, Ops.TRUNC, Ops.NEG, Ops.NOT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT})
    BinaryALU = Binary | frozenset({Ops.SUB, Ops.DIV, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ, Ops.POW}) | DeviceALU
    TernaryALU = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = UnaryALU | BinaryALU | TernaryALU | frozenset({Ops.THREEFRY})
    Elementwise = ALU | frozenset({Ops.CAST})

    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.OR, Ops.AND})
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.XOR, Ops.OR, Ops.AND})
    # ops whose result is the same as the operand for an index-valued (integer) expression's analysis
    Integer = frozenset({Ops.MOD, Ops.IDIV, Ops.XOR, Ops.OR, Ops.AND, Ops.SHR, Ops.SHL, Ops.CDIV, Ops.CMOD})
    Transcendental = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW})


class AxisType(IntEnum, metaclass=FastEnumType):
    """The kind of a RANGE axis (seed 001, Kernel Optimizations); `letter` is its one-character name."""

    GLOBAL = auto()
    LOCAL = auto()
    WARP = auto()
    THREAD = auto()
    LOOP = auto()
    REDUCE = auto()
    GROUP_REDUCE = auto()
    UPCAST = auto()
    UNROLL = auto()

    @property
    def letter(self) -> str:
        return _AXIS_LETTERS[self]

    def __repr__(self) -> str:
        return f"AxisType.{self.name}"


_AXIS_LETTERS = {
    AxisType.GLOBAL: "g", AxisType.LOCAL: "l", AxisType.WARP: "w", AxisType.THREAD: "t", AxisType.LOOP: "L",
    AxisType.REDUCE: "R", AxisType.GROUP_REDUCE: "G", AxisType.UPCAST: "u", AxisType.UNROLL: "r",
}
