"""Data types: scalars, vectors and pointers, interned so that equality is identity.

Promotion follows a lattice (the one JAX uses, and tinygrad after it): an edge a -> b means every value
of a is representable in b, except that the integer-to-float edges give up exactness for range.

    bool -> int8 -> int16 -> int32 -> int64 --+--> float16 --+--> float32 -> float64
    bool -> uint8 -> uint16 -> uint32 -> uint64 -+--> bfloat16 -+
            uint8 -> int16,  uint16 -> int32,  uint32 -> int64

`promote(a, b)` is the least upper bound in that lattice; float16 with bfloat16 gives float32. `index`
is the dtype of index arithmetic (mathematical integers, lowered to int32 or int64 late); it promotes
with nothing but itself.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Final

from rewrite.ops import FastEnumType


class AddrSpace(IntEnum, metaclass=FastEnumType):
    GLOBAL = 0
    LOCAL = 1
    REG = 2


class DType:
    """A scalar or vector dtype. Construct only through `dtypes` or `.vec()`; instances are interned."""

    __slots__ = ("_scalar", "_vecs", "count", "fmt", "itemsize", "kind", "name", "priority")
    _interned: dict[tuple, DType] = {}

    def __init__(self, name: str, kind: str, itemsize: int, priority: int, fmt: str | None, count: int = 1) -> None:
        self.name, self.kind, self.itemsize, self.priority = name, kind, itemsize, priority
        self.fmt, self.count = fmt, count
        self._scalar: DType = self
        self._vecs: dict[int, DType] = {}

    # -- structure --
    @property
    def scalar(self) -> DType:
        return self._scalar

    def vec(self, n: int) -> DType:
        """This dtype as an n-wide vector (n == 1 gives the scalar)."""
        if n == 1:
            return self._scalar
        if self.count != 1:
            raise ValueError(f"vec: {self} is already a vector; take .scalar first")
        if n < 1:
            raise ValueError(f"vec: width must be >= 1, got {n}")
        if (v := self._vecs.get(n)) is None:
            v = DType(f"{self.name}x{n}", self.kind, self.itemsize * n, self.priority, None, n)
            v._scalar = self
            self._vecs[n] = v
        return v

    def ptr(self, addrspace: AddrSpace = AddrSpace.GLOBAL, size: int = -1) -> PtrDType:
        return PtrDType.make(self, addrspace, size)

    # -- kinds --
    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        """Signed, unsigned and index integers (not bool)."""
        return self.kind in ("i", "u", "x")

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    # -- value range --
    @property
    def min(self) -> int | float | bool:
        k = self.kind
        if k == "b":
            return False
        if k == "u":
            return 0
        if k in ("i", "x"):
            return -(1 << (self.scalar.bits - 1))
        if k == "f":
            return -math.inf
        raise TypeError(f"{self} has no value range")

    @property
    def max(self) -> int | float | bool:
        k = self.kind
        if k == "b":
            return True
        if k == "u":
            return (1 << self.scalar.bits) - 1
        if k in ("i", "x"):
            return (1 << (self.scalar.bits - 1)) - 1
        if k == "f":
            return math.inf
        raise TypeError(f"{self} has no value range")

    def python_type(self) -> type:
        return {"b": bool, "i": int, "u": int, "x": int, "f": float}[self.kind]

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    def __reduce__(self) -> tuple:
        return (_dtype_by_name, (self.name,))


class PtrDType(DType):
    """A pointer to `base` in an address space; `size` is the element count (-1 if unknown)."""

    __slots__ = ("addrspace", "base", "size")
    addrspace: AddrSpace
    base: DType
    size: int
    _ptrs: dict[tuple, PtrDType] = {}

    @staticmethod
    def make(base: DType, addrspace: AddrSpace = AddrSpace.GLOBAL, size: int = -1) -> PtrDType:
        key = (base, addrspace, size)
        if (p := PtrDType._ptrs.get(key)) is None:
            p = PtrDType(f"{base.name}*", "p", 8, 0, None)
            p.base, p.addrspace, p.size = base, addrspace, size
            PtrDType._ptrs[key] = p
        return p

    def __repr__(self) -> str:
        sp = "" if self.addrspace is AddrSpace.GLOBAL else f", {self.addrspace.name}"
        sz = "" if self.size == -1 else f", size={self.size}"
        return f"{self.base!r}.ptr({sp.lstrip(', ')}{sz})" if sp or sz else f"{self.base!r}.ptr()"

    def __reduce__(self) -> tuple:
        return (PtrDType.make, (self.base, self.addrspace, self.size))


class dtypes:
    bool: Final = DType("bool", "b", 1, 0, "?")
    int8: Final = DType("int8", "i", 1, 1, "b")
    uint8: Final = DType("uint8", "u", 1, 2, "B")
    int16: Final = DType("int16", "i", 2, 3, "h")
    uint16: Final = DType("uint16", "u", 2, 4, "H")
    int32: Final = DType("int32", "i", 4, 5, "i")
    uint32: Final = DType("uint32", "u", 4, 6, "I")
    int64: Final = DType("int64", "i", 8, 7, "q")
    uint64: Final = DType("uint64", "u", 8, 8, "Q")
    float16: Final = DType("float16", "f", 2, 9, "e")
    bfloat16: Final = DType("bfloat16", "f", 2, 10, None)
    float32: Final = DType("float32", "f", 4, 11, "f")
    float64: Final = DType("float64", "f", 8, 12, "d")
    index: Final = DType("index", "x", 8, 13, None)
    void: Final = DType("void", "v", 0, -1, None)

    # aliases
    half = float16
    float = float32
    double = float64
    int = int32
    long = int64

    ints: Final = frozenset({int8, int16, int32, int64})
    uints: Final = frozenset({uint8, uint16, uint32, uint64})
    floats: Final = frozenset({float16, bfloat16, float32, float64})
    all_ints: Final = ints | uints | frozenset({index})  # every integer dtype, index included
    all: Final = all_ints | floats | frozenset({bool})

    default_float: DType = float32
    default_int: DType = int32

    @staticmethod
    def from_name(name: str) -> DType:
        return _dtype_by_name(name)


_SCALARS: dict[str, DType] = {d.name: d for d in dtypes.all | {dtypes.void}}


def _dtype_by_name(name: str) -> DType:
    if name in _SCALARS:
        return _SCALARS[name]
    base, _, width = name.rpartition("x")
    if base in _SCALARS and width.isdigit():
        return _SCALARS[base].vec(int(width))
    raise ValueError(f"unknown dtype name {name!r}; known: {sorted(_SCALARS)}")


# -- promotion lattice --

_EDGES: dict[DType, tuple[DType, ...]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.float16, dtypes.bfloat16),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
    dtypes.index: (),
}


def _upper_set(d: DType) -> frozenset[DType]:
    seen, todo = {d}, [d]
    while todo:
        for n in _EDGES[todo.pop()]:
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return frozenset(seen)


_UPPER = {d: _upper_set(d) for d in _EDGES}


def promote(*ds: DType) -> DType:
    """Least upper bound of scalar dtypes in the promotion lattice (see module docstring)."""
    if not ds:
        raise ValueError("promote: need at least one dtype")
    if (d0 := ds[0]) in _UPPER and all(d is d0 for d in ds):  # one dtype (float32 with float32): itself
        return d0
    for d in ds:
        if d not in _UPPER:
            raise TypeError(f"promote: {d} does not take part in promotion (scalar value dtypes only)")
    common = frozenset.intersection(*(_UPPER[d] for d in ds))
    if not common:
        raise TypeError(f"promote: no common dtype for {', '.join(map(repr, ds))} (index promotes only with index)")
    # the least elements are those no other common bound lies below; int64 with uint64 has two (float16 and
    # bfloat16), which are incomparable, so their own join (float32) is taken
    least = [d for d in common if not any(o is not d and d in _UPPER[o] for o in common)]
    return least[0] if len(least) == 1 else promote(*least)
