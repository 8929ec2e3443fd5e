"""The op set of the UOp dialect (seed 001, plus what seed 000 adds), in named groups.

The enum's order is the toposort tie-break used by the linearizer, so source ops come first and
codegen ops last. Groups are frozensets; a pattern may name a group wherever it names an op.
"""

from __future__ import annotations

from enum import IntEnum, auto


class Ops(IntEnum):
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
         Ops.CUSTOMFUNCTION, Ops.PROGRAM, Ops.SOURCE}
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


class AxisType(IntEnum):
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
