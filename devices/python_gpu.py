"""The python device's warp-level GPU instructions: the tensor-core mma (PTX mma.sync lane layouts), tf32
rounding, ldmatrix's lane layout and the butterfly SHUFFLE, each as one warp's 32 lanes in and out; `warp_mma`,
`warp_ldmatrix` and `warp_shuffle` run them for every warp of a block where every thread has reached the
instruction (devices.python's lockstep), each thread's slot `p` of its values holding what it brought and then
what it gets."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from rewrite.errors import DeviceError
from rewrite.semantics import round_to
from rewrite.uop import UOp


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


def wgmma_descriptor(byte_addr: int, lbo: int, sbo: int, swizzle: int = 0) -> int:
    """The 64-bit shared-memory matrix descriptor of PTX wgmma (ISA "Matrix Descriptor Format"): bits 13-0 the
    start address, 29-16 the leading dimension byte offset, 45-32 the stride dimension byte offset, each as
    matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4; 51-49 the base offset (0: no swizzle); 63-62 the swizzle
    mode (0 none, 1 128B, 2 64B, 3 32B)."""
    def enc(x: int) -> int:
        return (x & 0x3FFFF) >> 4

    return enc(byte_addr) | enc(lbo) << 16 | enc(sbo) << 32 | (swizzle & 3) << 62


def wgmma_decode(desc: int) -> tuple[int, int, int, int]:
    """(start byte address, leading byte offset, stride byte offset, swizzle mode) of a wgmma descriptor."""
    return (desc & 0x3FFF) << 4, (desc >> 16 & 0x3FFF) << 4, (desc >> 32 & 0x3FFF) << 4, desc >> 62 & 3


def swizzle_128b(at: int) -> int:
    """A byte address under the 128-byte swizzle (Swizzle<3,4,3>): its 16-byte chunk bits (6-4) XOR its
    row-in-atom bits (9-7); the layout wgmma's swizzle mode 1 reads and the TMA's 128B swizzle writes."""
    return at ^ ((at >> 7 & 7) << 4)


def wgmma_element(desc: int, row: int, col: int, mn_major: bool, itemsize: int) -> int:
    """The byte address of element (row, col) of a wgmma operand in shared memory under descriptor `desc`: row is
    the M (or N) index, col the K index; the PTX ISA's canonical layouts in elements, T = 16 / itemsize.

    No swizzle ("interleave"): K-major ((8,m),(T,2k)):((T,SBO),(1,LBO)): core matrices of 8 rows x 16 bytes, rows
    16 bytes apart, SBO between 8-row groups, LBO between K-neighbouring core matrices. MN-major
    ((T,1,m),(8,k)):((1,T,SBO),(T,LBO)): T consecutive M/N elements, SBO between groups of T, k rows 16 bytes
    apart, LBO between 8-row groups of k.

    128-byte swizzle (mode 1): K-major ((8,m),(T,2k)):((8T,SBO),(1,T)): rows of 128 bytes, SBO between 8-row
    groups, LBO unused; MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): 8T consecutive M/N elements (128 bytes),
    LBO between such groups, k rows 128 bytes apart, SBO between 8-row groups of k; then Swizzle<3,4,3> on the
    address: its 16-byte chunk bits (6-4) XOR its row-in-atom bits (9-7). The base offset field is 0, so the
    start must sit in the first 128-byte row of a 1024-byte atom (bits 9-7 clear), else DeviceError."""
    start, lbo, sbo, swizzle = wgmma_decode(desc)
    if swizzle not in (0, 1):
        raise DeviceError(f"wgmma descriptor {desc:#x}: swizzle mode {swizzle}; the emulator reads no swizzle (0) "
                          f"and the 128-byte swizzle (1)")
    t = 16 // itemsize
    if swizzle == 1:
        if start >> 7 & 7:
            raise DeviceError(f"wgmma descriptor {desc:#x}: a 128-byte swizzled operand starting at byte {start}, "
                              f"not in the first row of a 1024-byte atom, needs a base offset")
        at = start + ((row // (8 * t)) * lbo + (row % (8 * t)) * itemsize + (col // 8) * sbo + (col % 8) * 128
                      if mn_major else (row // 8) * sbo + (row % 8) * 128 + col * itemsize)
        return swizzle_128b(at)
    if mn_major:
        return start + (row // t) * sbo + (row % t) * itemsize + (col // 8) * lbo + (col % 8) * 16
    return start + (row // 8) * sbo + (row % 8) * 16 + (col // t) * lbo + (col % t) * itemsize


def wgmma_m64nnk16(read: Callable[[int, int, int], object], n: int, c: list, round_acc: Callable[[float], float]) \
        -> list[tuple]:
    """One warpgroup's `wgmma.mma_async.m64nNk16.f32` (A, B from shared memory): read(0, m, k) gives A[m][k] and
    read(1, k, j) B[k][j] (the caller reads them through the operands' descriptors); c[t] is thread t's (of 128)
    n / 2 accumulators, in the layout of `wgmma_place`. D = A @ B + C, products exact, every partial sum rounded
    by `round_acc`, k in order. Returns each thread's n / 2 results."""
    a = [[read(0, m, k) for k in range(16)] for m in range(64)]
    b = [[read(1, k, j) for j in range(n)] for k in range(16)]
    out = []
    for t in range(128):
        res = []
        for i, acc in enumerate(c[t]):
            row, col = wgmma_place(t, i)
            s = acc
            for k in range(16):
                s = round_acc(s + a[row][k] * b[k][col])  # type: ignore[operator]
            res.append(s)
        out.append(tuple(res))
    return out


def wgmma_place(t: int, i: int) -> tuple[int, int]:
    """(row, column) of accumulator i of warpgroup thread t in the m64nN f32 layout (PTX "WGMMA .m64nNk16 register
    fragment layout for accumulator matrix D"): thread t = 32 w + l (g = l // 4, q = l % 4) holds element 4 j + e
    at row 16 w + g + 8 ((e // 2) % 2), column 8 j + 2 q + e % 2 (each warp's 16 rows in mma.sync's m16n8 C
    layout, repeated every 8 columns)."""
    w, g, q, j, e = t // 32, t % 32 // 4, t % 4, i // 4, i % 4
    return 16 * w + g + 8 * ((e // 2) % 2), 8 * j + 2 * q + e % 2


__all__ = ["ldmatrix", "swizzle_128b", "tf32_round", "wgmma_decode", "wgmma_descriptor", "wgmma_element",
           "wgmma_m64nnk16", "wgmma_place", "wmma_m16n8k8_tf32", "wmma_m16n8k16"]


def warps(threads: list[list], what: str, where: str) -> list[list[list]]:
    """The block's threads (their value lists, lidx0 fastest) by warp of 32; DeviceError naming `what` and `where`
    when the block is not whole warps."""
    if len(threads) % 32:
        raise DeviceError(f"{where}: {what} needs whole warps; the block has {len(threads)} threads")
    return [threads[w:w + 32] for w in range(0, len(threads), 32)]


def warp_mma(u: UOp, p: int, threads: list[list], where: str) -> None:
    """Every warp runs the mma of WMMA `u` on its lanes' fragments (lower.wmma's layout)."""
    acc = u.arg[4]  # type: ignore[index]
    mma = wmma_m16n8k8_tf32 if u.arg[2] == 8 else wmma_m16n8k16  # type: ignore[index]
    for warp in warps(threads, "WMMA", where):
        lanes = [tv[p] for tv in warp]
        d = mma([x[0] for x in lanes], [x[1] for x in lanes], [x[2] for x in lanes], lambda x: round_to(acc, x))
        for tv, out in zip(warp, d, strict=True):
            tv[p] = out


def warp_ldmatrix(u: UOp, p: int, threads: list[list], where: str, read: Callable[[Any, int], object]) -> None:
    """Every warp's ldmatrix of LOAD `u` (arg ("ldmatrix", matrices, transposed)) from its lanes' row addresses,
    each lane's slot holding (memory, (element,)); `read(memory, element)` reads one element."""
    arg = u.arg if isinstance(u.arg, tuple) else ()
    n, trans = int(arg[1]), bool(arg[2])
    for warp in warps(threads, "ldmatrix", where):
        mem = warp[0][p][0]
        try:
            got = ldmatrix(lambda a: read(mem, a), [tv[p][1][0] for tv in warp], n, trans)
        except DeviceError as e:
            raise DeviceError(f"{where}: {e}") from e
        for tv, out in zip(warp, got, strict=True):
            tv[p] = out


def warp_shuffle(u: UOp, p: int, threads: list[list], where: str) -> None:
    """Every warp's butterfly SHUFFLE: lane l gets the value lane l XOR arg brought."""
    k = int(u.arg)  # type: ignore[call-overload]
    for warp in warps(threads, "SHUFFLE", where):
        brought = [tv[p] for tv in warp]
        for ln, tv in enumerate(warp):
            tv[p] = brought[ln ^ k]
