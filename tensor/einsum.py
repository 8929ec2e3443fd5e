"""einsum as permute, diagonal, broadcast-multiply and sum: `ij,jk->ik`, `bij,bjk->bik`, `ii->i`, `ij->ji`,
`i,i->` and any other formula of single-letter subscripts (no ellipsis). Without `->` the output is the letters
used once, in alphabetical order (numpy's rule)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rewrite.derive import fmt_shape
from rewrite.errors import ShapeError

if TYPE_CHECKING:
    from tensor.tensor import Tensor


def _diagonal(x: Tensor, letters: str) -> tuple[Tensor, str]:
    """x with each repeated letter reduced to its diagonal (`ii` -> `i`)."""
    while len(set(letters)) < len(letters):
        c = next(ch for ch in letters if letters.count(ch) > 1)
        p, q = letters.index(c), letters.index(c, letters.index(c) + 1)
        n = x.shape[p]
        if x.shape[q] != n:
            raise ShapeError(f"einsum: subscript {c!r} repeats over axes of sizes {n} and {x.shape[q]}")
        rest = [a for a in range(x.ndim) if a not in (p, q)]
        y = x.permute(*rest, p, q).reshape(*(x.shape[a] for a in rest), n * n)
        # the diagonal is every (n+1)-th element: pad to n*(n+1), split, keep column 0
        y = y.pad([(0, 0)] * len(rest) + [(0, n)]).reshape(*(x.shape[a] for a in rest), n, n + 1)
        x = y[..., 0]
        letters = "".join(letters[a] for a in rest) + c
    return x, letters


def einsum(formula: str, *operands: Tensor) -> Tensor:
    import tensor.tensor as tt

    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    f = formula.replace(" ", "")
    if "." in f:
        raise NotImplementedError("einsum: ellipsis (...) is not supported; name every axis")
    lhs, arrow, out = f.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"einsum: {formula!r} names {len(ins)} operands, got {len(operands)}")
    if not all(isinstance(t, tt.Tensor) for t in operands):
        raise TypeError("einsum: operands must be Tensors")
    if not arrow:
        out = "".join(sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1))
    for s in (*ins, out):
        if not all(c.isalpha() for c in s):
            raise ValueError(f"einsum: subscripts must be letters, got {s!r} in {formula!r}")
    if len(set(out)) != len(out) or any(c not in lhs for c in out):
        raise ValueError(f"einsum: the output {out!r} must name distinct letters of the inputs")
    sizes: dict[str, int] = {}
    prepared = []
    for t, s in zip(operands, ins, strict=True):
        if len(s) != t.ndim:
            raise ShapeError(f"einsum: subscripts {s!r} name {len(s)} axes for an operand of shape "
                             f"{fmt_shape(t.shape)}")
        t, s = _diagonal(t, s)
        for c, d in zip(s, t.shape, strict=True):
            if sizes.setdefault(c, d) != d and d != 1 and sizes[c] != 1:
                raise ShapeError(f"einsum: subscript {c!r} has sizes {sizes[c]} and {d}")
            sizes[c] = max(sizes[c], d)
        prepared.append((t, s))
    letters = out + "".join(sorted(set("".join(s for _, s in prepared)) - set(out)))
    full = tuple(sizes[c] for c in letters)
    prod: Tensor | None = None
    for t, s in prepared:
        order = sorted(range(len(s)), key=lambda a: letters.index(s[a]))
        t = t.permute(*order) if order != list(range(len(s))) else t
        present = [letters.index(s[a]) for a in order]
        t = t.reshape(*(t.shape[present.index(k)] if k in present else 1 for k in range(len(letters))))
        t = t.expand(*full)
        prod = t if prod is None else prod * t
    assert prod is not None
    summed = tuple(range(len(out), len(letters)))
    return prod.sum(axis=summed) if summed else prod


__all__ = ["einsum"]
