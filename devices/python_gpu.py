"""The python device's warp-level GPU instructions: the tensor-core mma (PTX mma.sync lane layouts), tf32
rounding, and ldmatrix's lane layout, each as one warp's 32 lanes in and out (devices.python runs them where
every thread of a block has reached the instruction)."""

from __future__ import annotations

import struct
from collections.abc import Callable


def wmma_m16n8k16(a: list, b: list, c: list, round_acc: Callable[[float], float]) -> list[tuple]:
    """One warp's m16n8k16 mma from its 32 lanes' fragments (indexed by lane: 8 A, 4 B, 4 C elements), in the PTX
    mma.sync layout (lane l, g = l // 4, t = l % 4): A[g + 8*((e//2)%2)][2t + e%2 + 8*(e//4)], B[2t + e%2 +
    8*(e//2)][g], C and D[g + 8*(e//2)][2t + e%2]. Returns each lane's 4 D elements: D = A @ B + C, the products
    exact and every partial sum rounded by `round_acc` (k in order)."""
    am = [[0.0] * 16 for _ in range(16)]
    bm = [[0.0] * 8 for _ in range(16)]
    cm = [[0.0] * 8 for _ in range(16)]
    for ln in range(32):
        g, t = ln // 4, ln % 4
        for e in range(8):
            am[g + 8 * ((e // 2) % 2)][t * 2 + e % 2 + 8 * (e // 4)] = a[ln][e]
        for e in range(4):
            bm[t * 2 + e % 2 + 8 * (e // 2)][g] = b[ln][e]
            cm[g + 8 * (e // 2)][t * 2 + e % 2] = c[ln][e]
    d = [[0.0] * 8 for _ in range(16)]
    for i in range(16):
        for j in range(8):
            s = cm[i][j]
            for k in range(16):
                s = round_acc(s + am[i][k] * bm[k][j])
            d[i][j] = s
    return [tuple(d[ln // 4 + 8 * (e // 2)][(ln % 4) * 2 + e % 2] for e in range(4)) for ln in range(32)]


def tf32_round(x: float) -> float:
    """x (a float32 value) rounded to tf32's 10 mantissa bits, to nearest with ties away from zero (PTX
    cvt.rna.tf32.f32); nan and inf stay as they are, a carry past the largest finite value gives inf."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if bits & 0x7F800000 == 0x7F800000:
        return x
    return struct.unpack("<f", struct.pack("<I", ((bits + 0x1000) & 0xFFFFE000) & 0xFFFFFFFF))[0]


def wmma_m16n8k8_tf32(a: list, b: list, c: list, round_acc: Callable[[float], float]) -> list[tuple]:
    """One warp's m16n8k8 tf32 mma (PTX mma.sync ... .tf32): 4 A, 2 B, 4 C elements a lane (g = l // 4,
    t = l % 4): A[g + 8*(e%2)][t + 4*(e//2)], B[t + 4*e][g], C and D as in wmma_m16n8k16. The float32 inputs
    are rounded to tf32 first (tf32_round: the renderer's cvt.rna.tf32.f32), their products are exact, and
    every partial sum is rounded by `round_acc` (k in order)."""
    am = [[0.0] * 8 for _ in range(16)]
    bm = [[0.0] * 8 for _ in range(8)]
    cm = [[0.0] * 8 for _ in range(16)]
    for ln in range(32):
        g, t = ln // 4, ln % 4
        for e in range(4):
            am[g + 8 * (e % 2)][t + 4 * (e // 2)] = tf32_round(a[ln][e])
            cm[g + 8 * (e // 2)][t * 2 + e % 2] = c[ln][e]
        for e in range(2):
            bm[t + 4 * e][g] = tf32_round(b[ln][e])
    d = [[0.0] * 8 for _ in range(16)]
    for i in range(16):
        for j in range(8):
            s = cm[i][j]
            for k in range(8):
                s = round_acc(s + am[i][k] * bm[k][j])
            d[i][j] = s
    return [tuple(d[ln // 4 + 8 * (e // 2)][(ln % 4) * 2 + e % 2] for e in range(4)) for ln in range(32)]


def ldmatrix(mem_read: Callable[[int], object], addrs: list[int], n: int, trans: bool) -> list[tuple]:
    """One warp's `ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16`: n 8x8 matrices of 16-bit elements, matrix
    j's row r starting at element addrs[8 j + r] (the address lane 8 j + r gives; the other lanes' are ignored).
    Lane l (g = l // 4, t = l % 4) gets 2 elements of each matrix, in matrix order: row g, columns 2t and 2t + 1;
    with `trans`, rows 2t and 2t + 1 of column g (the matrix read transposed). `mem_read(i)` reads element i."""
    out = []
    for ln in range(32):
        g, t = ln // 4, ln % 4
        vals: list[object] = []
        for j in range(n):
            for e in range(2):
                vals.append(mem_read(addrs[8 * j + 2 * t + e] + g) if trans else mem_read(addrs[8 * j + g] + 2 * t + e))
        out.append(tuple(vals))
    return out


__all__ = ["ldmatrix", "tf32_round", "wmma_m16n8k8_tf32", "wmma_m16n8k16"]
