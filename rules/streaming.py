"""Streaming stores: a big output of a map kernel written around the caches (STORE arg "stream").

A plain store to a line that is not in the cache first reads the line from memory (write-allocate), so an
elementwise `c = a + b` over arrays larger than the last-level cache moves 16 bytes an element, not 12, and the
lines it leaves in the cache are evicted before any reader comes. A non-temporal store skips the read and the
cache. It pays only where every line is written whole by consecutive stores and nobody reads the output soon:

- the kernel is a map (no REDUCE), its output buffer at least `Streaming.min_bytes` (the Target's `stream_bytes`:
  the last-level cache on x86; 0 turns this off) and not read by the kernel itself;
- the STORE is ungated and writes a whole vector of consecutive elements, `s + (k, k+1, ..., k+n-1)`, and
  `s` steps by exactly n along its finest loop (its smallest coefficient, every other one larger), so
  consecutive iterations fill whole lines.

Only the arg changes: what is stored and where is the same, so the python device and every renderer without a
streaming store treat it as a plain STORE. The C renderer (devices.c_vector) writes it with the ISA's
non-temporal vector move where the address is aligned (else a plain one), and fences the kernel's end.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError

from rewrite import Ops, Rule, RuleSet, UOp, op, var
from rewrite.dtype import AddrSpace
from rewrite.props import base_of, contiguous_start, nbytes
from rewrite.uop import BufferArg

STREAM = "stream"


class Streaming:
    """The rule's context: the smallest output (bytes) that streams, and the buffers the kernel loads. Immutable, equal
    and hashed by its fields, as a frozen dataclass would be; a plain class because a dataclass's methods are compiled
    when this module is imported, inside a cold process's first kernel lowering (~3 M instructions, callgrind)."""

    __slots__ = ("loaded", "min_bytes")
    min_bytes: int
    loaded: frozenset[UOp]

    def __init__(self, min_bytes: int, loaded: frozenset[UOp]) -> None:
        object.__setattr__(self, "min_bytes", min_bytes)
        object.__setattr__(self, "loaded", loaded)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.min_bytes, self.loaded) == (other.min_bytes, other.loaded)

    def __hash__(self) -> int:
        return hash((self.min_bytes, self.loaded))

    def __repr__(self) -> str:
        return f"Streaming(min_bytes={self.min_bytes!r}, loaded={self.loaded!r})"


def buffer_bytes(buf: UOp) -> int:
    """The size of a GLOBAL BUFFER in bytes (0 for anything else, or a symbolic size)."""
    arg = buf.arg
    if buf.op is not Ops.BUFFER or not isinstance(arg, BufferArg) or arg.addrspace is not AddrSpace.GLOBAL:
        return 0
    return nbytes(buf) or 0


def _map_accesses(ast: UOp, op: Ops) -> list[UOp] | None:
    """The `op` (STORE or LOAD) nodes of `ast` that go through an INDEX, or None when `ast` is not a map (it has a
    REDUCE): one walk for both."""
    found = []
    for u in ast.toposort():
        if u.op is Ops.REDUCE:
            return None
        if u.op is op and u.src and u.src[0].op is Ops.INDEX:
            found.append(u)
    return found


def streams_outputs(ast: UOp, min_bytes: int) -> bool:
    """Whether `ast` is a map kernel with an output of at least `min_bytes` (0: never): one whose stores are worth
    making whole vectors (lower.optimize upcasts its innermost output loop) so that they can stream."""
    if min_bytes <= 0 or (stores := _map_accesses(ast, Ops.STORE)) is None:
        return False
    return any(buffer_bytes(base_of(u.src[0].src[0])) >= min_bytes for u in stores)


def context(ast: UOp, min_bytes: int) -> Streaming | None:
    """The rule's context for a kernel, or None when no store of it can stream (not a map, or no size allows)."""
    if min_bytes <= 0 or (loads := _map_accesses(ast, Ops.LOAD)) is None:
        return None
    return Streaming(min_bytes, frozenset(base_of(u.src[0].src[0]) for u in loads))


def _coefficients(s: UOp) -> dict[UOp, int] | None:
    """The integer coefficient of each RANGE in the index expression `s` when it is affine in them (a sum of
    ranges times constants plus terms without ranges); None when it is not."""
    if s.op is Ops.RANGE:
        return {s: 1}
    if s.op is Ops.ADD:
        out: dict[UOp, int] = {}
        for x in s.src:
            c = _coefficients(x)
            if c is None:
                return None
            for r, v in c.items():
                out[r] = out.get(r, 0) + v
        return out
    if s.op is Ops.MUL:
        for x, m in (s.src, s.src[::-1]):
            if m.op is Ops.CONST and isinstance(k := m.value, int) and (c := _coefficients(x)) is not None:
                return {r: v * k for r, v in c.items()}
    if not any(u.op is Ops.RANGE for u in s.toposort()):
        return {}
    return None


def _stream(ctx: Streaming, st: UOp, idx: UOp, val: UOp) -> UOp | None:
    if idx.op is not Ops.INDEX or len(idx.src) != 2 or val.shape == ():
        return None
    buf = base_of(idx.src[0])
    if buf in ctx.loaded or buffer_bytes(buf) < ctx.min_bytes:
        return None
    if (found := contiguous_start(idx.src[1])) is None:
        return None
    s, n = found[0], idx.src[1].shape[0]
    coefs = _coefficients(s) if s is not None else None
    if coefs is None:
        return None
    steps = sorted(abs(k) for k in coefs.values() if k)
    if not steps or steps[0] != n or (len(steps) > 1 and steps[1] == n):
        return None  # no loop, or the finest one does not step one vector at a time: lines written in pieces
    return UOp(Ops.STORE, st.src, STREAM, st.tag)


# fmt: off
streaming_stores = RuleSet("streaming-stores", [
    Rule("store-streams", op.STORE(var("idx"), var("val"), name="st", arg=None), _stream),
])
# fmt: on
