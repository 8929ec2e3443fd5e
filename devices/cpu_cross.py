"""Build and run a kernel for a cpu target this host cannot run (aarch64 on x86-64), through an emulator.

The cpu device loads kernels as shared objects into this process, which needs the host's instruction set.
For another target (`Target.runs_here` false) this module checks that the generated code is also right there:
the kernel's C source (rendered as devices.cpu renders it, so the very text the device would compile) gets a
generated `main`, is compiled by the target's cross compiler (`aarch64-linux-gnu-gcc`, devices.cpu.build_object)
as a static executable, and runs under qemu-user (`qemu-aarch64`).

The program's protocol, fixed for a kernel so one executable serves any inputs:
  argv   the byte size of each GLOBAL buffer (slot order), then each variable's value (name order), then each
         SPECIAL's bound (order of appearance);
  stdin  every buffer's bytes, slot order;
  stdout the bytes of the buffers the kernel stores to, slot order, after the kernel ran once for every
         combination of SPECIAL values (the last SPECIAL fastest), one after another, as the cpu device runs a
         kernel without its thread pool.

`emulator(target)` finds the emulator (None where it is not installed); `compile_emulated(linear, name,
target)` gives an `EmulatedKernel`, called like a CPUKernel: `kernel({slot: array}, {name: value})`.
Executables are cached in memory by source and target for the process. This is for tests, not speed: one
emulated launch costs a process start and milliseconds to seconds of emulation.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile

import numpy as np

from devices.base import Target
from devices.c_render import ctype, render_function, render_source, storage_type
from devices.cpu import DEVICE, build_object
from devices.linear import Program, analyze, special_bound
from devices.memory import check_buffers, check_vars
from rewrite.errors import DeviceError
from rewrite.uop import UOp

_SYMBOL = "kernel_under_test"
_EXES: dict[tuple[str, str], str] = {}  # (source, target key) -> executable path, for the process
_DIR: list[tempfile.TemporaryDirectory] = []  # where the executables live; removed when the process ends


def emulator(target: Target) -> list[str] | None:
    """The command that runs a static executable for `target` on this host: qemu-user for its architecture
    (`qemu-aarch64`, or a `-static` build of it), or None where none is installed."""
    for name in (f"qemu-{target.arch}", f"qemu-{target.arch}-static"):
        if (path := shutil.which(name)) is not None:
            return [path]
    return None


def cross_compiler(target: Target) -> str | None:
    """The path of the target's C compiler (its prefixed gcc for a cross target), or None where not installed."""
    return shutil.which(f"{target.compiler_prefix}gcc" if target.compiler_prefix else "gcc")


def main_source(prog: Program, symbol: str) -> str:
    """A C `main` for the kernel `symbol` of `prog` that speaks the module's protocol (argv, stdin, stdout)."""
    nb, nv, ns = len(prog.buffers), len(prog.variables), len(prog.specials)
    lines = ["#include <stdio.h>", "#include <stdlib.h>", "", "int main(int argc, char** argv) {",
             f"  if (argc != {1 + nb + nv + ns}) {{ fprintf(stderr, \"want {nb + nv + ns} arguments\\n\"); "
             f"return 2; }}"]
    for i in range(nb):
        lines += [f"  size_t x_n{i} = (size_t)strtoull(argv[{1 + i}], 0, 10);",
                  f"  unsigned char* x_b{i} = malloc(x_n{i} ? x_n{i} : 1);",
                  f"  if (!x_b{i} || fread(x_b{i}, 1, x_n{i}, stdin) != x_n{i}) {{ "
                  f"fprintf(stderr, \"buffer {i}: short input\\n\"); return 3; }}"]
    for j in range(ns):
        lines.append(f"  long long x_s{j} = strtoll(argv[{1 + nb + nv + j}], 0, 10);")
    args = [f"({storage_type(b.dtype)}*)x_b{i}" for i, b in enumerate(prog.buffers.values())]
    args += [f"({ctype(p.dtype)})strtoll(argv[{1 + nb + i}], 0, 10)" for i, p in enumerate(prog.variables.values())]
    args += [f"x_c{j}" for j in range(ns)]
    indent = "  "
    for j in range(ns):
        lines.append(f"{indent}for (long long x_c{j} = 0; x_c{j} < x_s{j}; x_c{j}++)")
        indent += "  "
    lines.append(f"{indent}{symbol}({', '.join(args)});")
    for i, slot in enumerate(prog.buffers):
        if slot in prog.stored:
            lines.append(f"  if (fwrite(x_b{i}, 1, x_n{i}, stdout) != x_n{i}) return 4;")
    lines += ["  return 0;", "}"]
    return "\n".join(lines)


class EmulatedKernel:
    """A kernel compiled for `target` as a static executable, run under the emulator at each call."""

    def __init__(self, prog: Program, src: str, exe: str, runner: list[str], target: Target) -> None:
        self.prog, self.name, self.src, self.exe, self.runner, self.target = prog, prog.name, src, exe, runner, target

    def __call__(self, buffers: dict[int, np.ndarray], var_vals: dict[str, int] | None = None) -> None:
        prog = self.prog
        vv = var_vals or {}
        ints = check_vars(prog.variables, vv, self.name)
        arrays = check_buffers(prog.buffers, buffers, vv, prog.stored, self.name)[0]
        bounds = [special_bound(sp, vv, self.name) for sp in prog.specials.values()]
        argv = [str(a.nbytes) for a in arrays] + [str(int(v)) for v in ints] + [str(b) for b in bounds]
        stdin = b"".join(a.tobytes() for a in arrays)
        try:
            r = subprocess.run([*self.runner, self.exe, *argv], input=stdin, capture_output=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise DeviceError(f"kernel {self.name!r} for {self.target.isa}: cannot run {self.runner[0]}: {e}") from None
        if r.returncode != 0:
            raise DeviceError(f"kernel {self.name!r} for {self.target.isa}: the emulated program exited "
                              f"{r.returncode} ({math.prod(bounds) if bounds else 1} launches): "
                              f"{r.stderr.decode(errors='replace').strip()[:2000]}")
        out, at = r.stdout, 0
        for slot, arr in zip(prog.buffers, arrays, strict=True):
            if slot not in prog.stored:
                continue
            if len(out) < at + arr.nbytes:
                raise DeviceError(f"kernel {self.name!r} for {self.target.isa}: the emulated program wrote "
                                  f"{len(out)} bytes, expected at least {at + arr.nbytes}")
            arr[...] = np.frombuffer(out, dtype=arr.dtype, count=arr.size, offset=at)
            at += arr.nbytes


def render_program(linear: UOp, name: str) -> tuple[Program, str]:
    """The checked program and the whole C file (kernel as `kernel_under_test`, plus its `main`)."""
    prog = analyze(linear, DEVICE.name, DEVICE.supported_ops, _SYMBOL)
    prog.name = name
    helpers: dict[str, str] = {}
    func = render_function(prog, _SYMBOL, helpers)
    return prog, render_source([func, main_source(prog, _SYMBOL)], helpers)


def compile_emulated(linear: UOp, name: str, target: Target) -> EmulatedKernel:
    """Compile the LINEAR program `linear` for `target` with its (cross) compiler into a static executable and
    return it as a kernel that runs under the emulator. Raises DeviceError when the compiler or the emulator is
    not installed (saying which package provides it) and CompileError when the compiler rejects the code."""
    if target.device != "cpu" or not target.arch:
        raise DeviceError(f"compile_emulated: {target} is not a cpu target; only C code for a cpu runs emulated")
    if cross_compiler(target) is None:
        pkg = f"gcc-{target.arch.replace('_', '-')}-linux-gnu" if target.compiler_prefix else "gcc"
        raise DeviceError(f"compile_emulated: no {target.compiler_prefix}gcc for {target.isa}; install it "
                          f"(Debian: apt-get install {pkg})")
    runner = emulator(target)
    if runner is None:
        raise DeviceError(f"compile_emulated: no qemu-{target.arch} to run {target.isa} code on this "
                          f"{os.uname().machine} host; install it (Debian: apt-get install qemu-user)")
    prog, src = render_program(linear, name)
    key = (src, target.key)
    if (exe := _EXES.get(key)) is None:
        if not _DIR:
            _DIR.append(tempfile.TemporaryDirectory(prefix="uopc-cross-"))
        exe = os.path.join(_DIR[0].name, f"k{len(_EXES)}")
        build_object(src, exe, target, f"kernel {name!r} for {target.isa}", executable=True)
        _EXES[key] = exe
    return EmulatedKernel(prog, src, exe, runner, target)


__all__ = ["EmulatedKernel", "compile_emulated", "cross_compiler", "emulator", "main_source", "render_program"]
