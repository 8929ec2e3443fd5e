"""`python -m benchmarks.gpu_sass [--sm sm_90] [--case matmul_4096_fp16 ...] [--knob WGMMA=1 ...] [--no-tinygrad]
[--json PATH] [--dump DIR]`: a static look at the machine code (SASS) of the GPU benchmark's kernels. No GPU is
needed.

The kernels of the chosen cases (benchmarks.gpu.gpu_cases; default: every case) are lowered for `--sm` under the
`--knob` settings (benchmarks.gpu_compile.lowered_kernels; ALLOW_TF32 for the tf32 cases only, as benchmarks.gpu
runs them; `--knob CUDA_COMPILER=nvcc` picks the compiler) and compiled by the cuda device itself
(`devices.cuda.DEVICE.compile_batch` for that target: its renderer, its compiler and flags, its disk cache), so the
cubins are the ones a launch would load. Each cubin is read with the CUDA binary utilities: `cuobjdump -res-usage`
(registers, stack, static shared memory, local memory per thread) and `cuobjdump -sass` (which runs nvdisasm). Both
come as wheels (`nvidia-cuda-cuobjdump`, `nvidia-cuda-nvdisasm`, in the project's `test` extra) or with a CUDA
toolkit; `tool` finds them on PATH or in the wheels' folders.

Per kernel the report gives the resources (registers; `STL`/`LDL`, the local-memory stores and loads of the whole
kernel, which ptxas emits for spills and for arrays it could not keep in registers; static and dynamic shared bytes)
and the instruction mix of the hot loop: the innermost loop (a backward branch and its target) that holds the
kernel's key instructions, its tensor-core MMAs (HMMA: mma.sync; HGMMA: wgmma) or, in a kernel without them, its
FFMAs (at least a quarter of the loop). The mix counts static instructions in the loop's body by class (`CLASSES`),
the other instructions per key one and per unit of work (an m16n8k16-equivalent: an MMA's multiply-adds per warp
over the 2048 of one m16n8k16, so an HGMMA.64x256x16, whose 64x256x16 a warpgroup's 4 warps share, counts 32; or an
FFMA), and the shared-memory bytes a warp reads per unit with LDSM and LDS (each lane's bytes: an LDS that lanes
share as a broadcast reads fewer; wgmma reads its operands from shared memory itself, uncounted). A kernel with
neither (softmax, layernorm) reports its largest innermost loop.

tinygrad's kernels for the same cases come from its null device with its CUDA renderer and NVRTC
(`DEV=NULL:CUDA:<sm>`, benchmarks.gpu_compile_tinygrad with `--cubins`): its default optimizations, the same
analysis. Prints a table per side and writes JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from rewrite.errors import CompileError

# instruction classes, by the SASS opcode's base name (the text before the first '.'); first match wins
MMA_OPS = frozenset({"HMMA", "HGMMA", "IMMA", "IGMMA", "DMMA", "QGMMA", "BMMA", "BGMMA"})
CLASSES: tuple[tuple[str, frozenset[str]], ...] = (
    ("mma", MMA_OPS),
    ("ldsm", frozenset({"LDSM"})),
    ("lds", frozenset({"LDS"})),
    ("sts", frozenset({"STS", "STSM"})),
    ("ldg", frozenset({"LDG"})),
    ("ldgsts", frozenset({"LDGSTS"})),
    ("tma", frozenset({"UTMALDG", "UTMASTG", "UTMAPF", "UBLKCP", "SYNCS"})),
    ("local", frozenset({"LDL", "STL"})),
    ("bar", frozenset({"BAR", "DEPBAR", "LDGDEPBAR", "WARPGROUP", "WARPSYNC", "MEMBAR", "ARRIVES", "BSYNC",
                       "BSSY", "ERRBAR", "CCTL"})),
    ("int", frozenset({"IMAD", "IADD3", "IADD", "IADD32I", "LEA", "SHF", "SHL", "SHR", "LOP3", "LOP", "LOP32I",
                       "ISETP", "IMNMX", "VIMNMX", "SEL", "PRMT", "MOV", "VIADD", "IABS", "FLO", "POPC", "BMSK",
                       "SGXT", "P2R", "R2P", "PLOP3", "IDP", "IMUL", "CS2R", "BREV", "I2IP", "LEA.HI"})),
    ("uniform", frozenset()),  # U* opcodes: the uniform datapath's scalar instructions (see `klass`)
    ("fp", frozenset({"FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSEL", "FSET", "MUFU", "HADD2", "HMUL2", "HFMA2",
                      "HMNMX2", "HSETP2", "F2F", "F2I", "I2F", "F2FP", "FCHK", "FRND", "DADD", "DMUL", "DFMA",
                      "DSETP", "FSWZADD"})),
    ("other", frozenset()),
)
COLUMNS = (*(name for name, _ in CLASSES), "nop")
LANES = 32

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/[ \t]+(@!?U?P[T0-9]+[ \t]+)?([A-Z][A-Za-z0-9_.]*)[ \t]*([^;\n]*);")
_FUNC = re.compile(r"Function\s*:\s*(\S+)")


@dataclasses.dataclass(frozen=True)
class Instr:
    """One SASS instruction: its byte address, guard predicate ('' when none, '!PT' never runs), opcode with its
    modifiers, and operand text."""

    addr: int
    pred: str
    op: str
    args: str

    @property
    def base(self) -> str:
        return self.op.split(".")[0]

    @property
    def never(self) -> bool:
        """Guarded by !PT (or !UPT): ptxas's scheduling filler, issued but never executed."""
        return self.pred in ("!PT", "!UPT")


def klass(ins: Instr) -> str:
    """The class of `ins` among COLUMNS ('nop' for NOP and never-executed filler)."""
    if ins.never or ins.base == "NOP":
        return "nop"
    for name, ops in CLASSES:
        if ins.base in ops:
            return name
    return "uniform" if ins.base.startswith("U") or ins.base in ("R2UR", "S2UR") else "other"


def mma_units(ins: Instr) -> float:
    """The multiply-adds one warp's `ins` does, in m16n8k16s (2048 each); 0 for anything but an MMA. HMMA.16816 is
    1, HMMA.1688 (tf32 m16n8k8) 0.5; an HGMMA.64xNxK is one warpgroup's, so a warp's share is 64*N*K/4."""
    if ins.base == "HMMA" or ins.base == "IMMA" or ins.base == "DMMA":
        shape = ins.op.split(".")[1]
        m, n, k = int(shape[:2]), int(shape[2]), int(shape[3:])
        return m * n * k / 2048
    if ins.base in ("HGMMA", "IGMMA", "QGMMA"):
        found = re.search(r"64x(\d+)x(\d+)", ins.op)
        if found:
            return 64 * int(found.group(1)) * int(found.group(2)) / 4 / 2048
    return 0.0


def smem_bytes(ins: Instr) -> int:
    """Shared-memory bytes one warp's `ins` reads (LDSM: 128 per 8x8 matrix; LDS: its width times 32 lanes)."""
    if ins.never:
        return 0
    mods = ins.op.split(".")[1:]
    if ins.base == "LDSM":
        return 128 * next((int(m) for m in mods if m in ("2", "4")), 1)
    if ins.base == "LDS":
        width = next((int(m) // 8 for m in mods if m in ("64", "128")), 0) or \
            next((1 if "8" in m else 2 for m in mods if m in ("U8", "S8", "U16", "S16")), 4)
        return width * LANES
    return 0


def sections(text: str) -> dict[str, str]:
    """`cuobjdump -sass` text cut into each function's part (from its `Function :` line to the next)."""
    out: dict[str, str] = {}
    name: str | None = None
    for line in text.splitlines(keepends=True):
        if (f := _FUNC.search(line)) is not None:
            name = f.group(1)
        if name is not None:
            out[name] = out.get(name, "") + line
    return out


def parse_sass(text: str) -> dict[str, list[Instr]]:
    """`cuobjdump -sass` text as each function's instructions in address order."""
    out: dict[str, list[Instr]] = {}
    for name, part in sections(text).items():
        out[name] = []
        for m in _LINE.finditer(part):
            pred = (m.group(2) or "").strip().lstrip("@")
            out[name].append(Instr(int(m.group(1), 16), pred, m.group(3), m.group(4).strip()))
    return out


def loops(instrs: list[Instr]) -> list[tuple[int, int]]:
    """Each loop as (first, last) indices into `instrs`: a branch back to an earlier address and its target."""
    at = {ins.addr: i for i, ins in enumerate(instrs)}
    out = []
    for i, ins in enumerate(instrs):
        if ins.base == "BRA" and (m := re.search(r"0x([0-9a-f]+)\s*$", ins.args)) is not None:
            target = int(m.group(1), 16)
            if target < ins.addr and target in at:
                out.append((at[target], i))
    return out


def hot_loop(instrs: list[Instr]) -> tuple[str, tuple[int, int] | None]:
    """(the key instruction, the loop): the innermost loop holding an MMA ("MMA"), else the innermost loop in
    which FFMAs are at least a quarter of the instructions (a SIMT matmul's, "FFMA"; an exp's few FFMAs do not
    make softmax's loops such), else the largest loop holding no other ("none"); None where there is no loop."""
    spans = loops(instrs)

    def ffma_heavy(s: tuple[int, int]) -> bool:
        return 4 * sum(x.base == "FFMA" for x in instrs[s[0]:s[1] + 1]) >= s[1] - s[0] + 1

    for key, test in (("MMA", lambda s: any(x.base in MMA_OPS for x in instrs[s[0]:s[1] + 1])), ("FFMA", ffma_heavy)):
        having = [s for s in spans if test(s)]
        if having:
            return key, min(having, key=lambda s: s[1] - s[0])
    inner = [s for s in spans if not any(t != s and s[0] <= t[0] and t[1] <= s[1] for t in spans)]
    return "none", max(inner, key=lambda s: s[1] - s[0]) if inner else None


@dataclasses.dataclass
class KernelReport:
    """The figures `analyze` reads off one kernel's SASS and resource usage (see the module docstring)."""

    name: str
    regs: int
    stack: int
    local: int
    shared: int
    dynamic_shared: int
    stl: int
    ldl: int
    key: str
    loop_instrs: int
    mix: dict[str, int]
    mma_units: float
    smem_read: int
    guarded_loads: int

    @property
    def key_count(self) -> int:
        """The hot loop's key instructions: its MMAs, or its FFMAs where key is FFMA."""
        return self.mix.get("ffma", 0) if self.key == "FFMA" else self.mix.get("mma", 0)

    @property
    def other_per_key(self) -> float:
        """The hot loop's other instructions (filler included: it takes issue slots) per key instruction."""
        return (self.loop_instrs - self.key_count) / self.key_count if self.key_count else 0.0

    @property
    def units(self) -> float:
        """The hot loop's work: m16n8k16-equivalents of MMA, or FFMA instructions where key is FFMA."""
        return float(self.key_count) if self.key == "FFMA" else self.mma_units

    @property
    def other_per_unit(self) -> float:
        return (self.loop_instrs - self.key_count) / self.units if self.units else 0.0

    @property
    def smem_per_unit(self) -> float:
        """Shared bytes a warp reads (LDSM, LDS) per unit of work in the hot loop."""
        return self.smem_read / self.units if self.units else 0.0

    def row(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(other_per_key=round(self.other_per_key, 3), other_per_unit=round(self.other_per_unit, 3),
                 smem_per_unit=round(self.smem_per_unit, 1))
        return d


def analyze(name: str, instrs: list[Instr], usage: dict[str, int], dynamic_shared: int = 0) -> KernelReport:
    """The report of kernel `name` from its instructions and its `cuobjdump -res-usage` figures."""
    key, span = hot_loop(instrs)
    body = instrs[span[0]:span[1] + 1] if span is not None else []
    mix = dict.fromkeys(COLUMNS, 0)
    for ins in body:
        c = klass(ins)
        if key == "FFMA" and ins.base == "FFMA":
            c = "ffma"
        mix[c] = mix.get(c, 0) + 1
    loads = ("LDG", "LDS", "LDSM", "LDGSTS")
    return KernelReport(
        name=name, regs=usage.get("REG", 0), stack=usage.get("STACK", 0), local=usage.get("LOCAL", 0),
        shared=usage.get("SHARED", 0), dynamic_shared=dynamic_shared,
        stl=sum(x.base == "STL" for x in instrs), ldl=sum(x.base == "LDL" for x in instrs), key=key,
        loop_instrs=len(body), mix=mix, mma_units=sum(mma_units(x) for x in body) if key == "MMA" else 0.0,
        smem_read=sum(smem_bytes(x) for x in body),
        guarded_loads=sum(x.base in loads and bool(x.pred) and not x.never for x in body))


# ---------------------------------------------------------------- the tools


def _wheel_bins() -> list[str]:
    """The `bin` folders of the `nvidia` namespace package's CUDA wheels (cu13/ for CUDA 13, cuda_*/ for 12)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    subs = ("cu13", "cuda_cuobjdump", "cuda_nvdisasm")
    return [os.path.join(r, s, "bin") for r in roots for s in subs if os.path.isdir(os.path.join(r, s, "bin"))]


def tool(name: str) -> str:
    """The path of CUDA binary utility `name` (cuobjdump, nvdisasm): on PATH, else in a wheel's bin folder; a
    CompileError saying what to install where neither has it."""
    found = shutil.which(name) or next((os.path.join(d, name) for d in _wheel_bins()
                                        if os.access(os.path.join(d, name), os.X_OK)), None)
    if found is None:
        raise CompileError(f"cuda: {name} is not installed: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm "
                           f"(the project's test extra), or put a CUDA toolkit's bin folder on PATH")
    return found


def _run(cmd: list[str], cubin: bytes) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        # cuobjdump -sass runs nvdisasm, which it looks for on PATH: the one `tool` found goes first there
        env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(tool("nvdisasm")), os.environ.get("PATH", "")])}
        r = subprocess.run([*cmd, path], capture_output=True, text=True, timeout=120, env=env, check=False)
    if r.returncode != 0:
        raise CompileError(f"cuda: {' '.join(os.path.basename(c) for c in cmd[:1])} {' '.join(cmd[1:])} failed: "
                           f"{(r.stderr or r.stdout).strip()[:500]}")
    return r.stdout


def resource_usage(cubin: bytes) -> dict[str, dict[str, int]]:
    """Each function's `cuobjdump -res-usage` figures: REG, STACK, SHARED, LOCAL (bytes), ..."""
    out: dict[str, dict[str, int]] = {}
    name = None
    for line in _run([tool("cuobjdump"), "-res-usage"], cubin).splitlines():
        if (m := re.match(r"\s*Function\s+(\S+):", line)) is not None:
            name = m.group(1)
        elif name is not None and "REG:" in line:
            out[name] = {k: int(v) for k, v in re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line)}
    return out


def analyze_cubin(cubin: bytes, only: str | None = None, dynamic_shared: int = 0,
                  dump: str | None = None) -> list[KernelReport]:
    """A report per function of `cubin` (only function `only` when given); its SASS written to `dump`/NAME.sass."""
    text = _run([tool("cuobjdump"), "-sass"], cubin)
    funcs, usage = parse_sass(text), resource_usage(cubin)
    if dump is not None:
        os.makedirs(dump, exist_ok=True)
        for fn, part in sections(text).items():
            if only is None or fn == only:
                with open(os.path.join(dump, f"{fn}.sass"), "w") as f:
                    f.write(part)
    return [analyze(fn, ins, usage.get(fn, {}), dynamic_shared) for fn, ins in funcs.items()
            if only is None or fn == only]


# ---------------------------------------------------------------- the kernels


def our_reports(sm: str, cases: list[str] | None, knobs: dict[str, str], dump: str | None = None
                ) -> list[KernelReport]:
    """The reports of our kernels for `cases` (None: all) lowered for `sm` under `knobs`, compiled by the cuda
    device (its compiler: CUDA_COMPILER among the knobs picks one) for that target."""
    from benchmarks.gpu_compile import lowered_kernels
    from devices.base import gpu_target
    from devices.cuda import DEVICE
    from rewrite.env import Context

    with Context(**knobs):
        target = gpu_target(sm, tf32=True)
        kernels = lowered_kernels(sm, tf32=None, only=cases)
        compiled = DEVICE.compile_batch([(lin, name) for name, lin in kernels], target)
        out = []
        for (name, _), k in zip(kernels, compiled, strict=True):
            rep = analyze_cubin(k.cubin, k.symbol, k.dynamic_shared, dump)
            if not rep:
                raise CompileError(f"cuda: no function {k.symbol} in the cubin of {name}")
            rep[0].name = name
            out.extend(rep)
            if dump is not None:
                with open(os.path.join(dump, f"{k.symbol}.cu"), "w") as f:
                    f.write(k.src)
    return out


def tinygrad_reports(sm: str, cases: list[str] | None, dump: str | None = None, timeout: float = 300.0
                     ) -> tuple[list[KernelReport], str | None]:
    """(reports, None) of tinygrad's kernels for `cases` on its null CUDA device for `sm`, else ([], why not)."""
    from benchmarks.gpu_compile import tinygrad_compile

    with tempfile.TemporaryDirectory() as d:
        extra = ["--cubins", d, *(["--cases", ",".join(cases)] if cases else [])]
        res = tinygrad_compile(os.path.join(d, "tinygrad.json"), f"NULL:CUDA:{sm}", timeout, extra=extra)
        if res.get("error"):
            return [], str(res["error"])
        out = []
        for case, fn in zip(res.get("cases", []), res.get("cubins", []), strict=True):
            with open(os.path.join(d, fn), "rb") as f:
                reps = analyze_cubin(f.read(), dump=dump)
            for r in reps:
                r.name = f"{case}_{r.name}"
            out.extend(reps)
    return out, None


def table(reports: list[KernelReport]) -> str:
    """One line per kernel: resources, then the hot loop's mix and its ratios."""
    head = (f"{'kernel':44s} {'reg':>3s} {'stl/ldl':>7s} {'smem':>6s} {'key':>4s} {'loop':>4s} "
            + " ".join(f"{c[:6]:>6s}" for c in COLUMNS) + f" {'oth/key':>7s} {'oth/u':>5s} {'smB/u':>5s} {'grd':>3s}")
    lines = [head]
    for r in reports:
        smem = r.shared + r.dynamic_shared
        cols = " ".join(f"{(r.mix.get('ffma', 0) if c == 'mma' and r.key == 'FFMA' else r.mix.get(c, 0)):6d}"
                        for c in COLUMNS)
        lines.append(f"{r.name[:44]:44s} {r.regs:3d} {f'{r.stl}/{r.ldl}':>7s} {smem:6d} {r.key[:4]:>4s} "
                     f"{r.loop_instrs:4d} {cols} {r.other_per_key:7.2f} {r.other_per_unit:5.2f} "
                     f"{r.smem_per_unit:5.0f} {r.guarded_loads:3d}")
    return "\n".join(lines)


LEGEND = ("reg: registers a thread; stl/ldl: local-memory stores/loads in the kernel (spills); smem: shared bytes "
          "(static + dynamic); key: MMA or FFMA (SIMT) or none; loop: instructions in the hot loop, then its mix "
          "(mma: the key instructions; nop: never-executed filler); oth/key: other instructions per key one; "
          "oth/u and smB/u: per unit of work, an m16n8k16-equivalent of MMA work or an FFMA (smB: bytes a warp "
          "reads from shared memory with LDSM/LDS); grd: loads in the loop under a guard predicate")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_sass", description=__doc__.split("\n")[0])
    ap.add_argument("--sm", default="sm_90")
    ap.add_argument("--case", action="append", default=[], help="a case of benchmarks.gpu.gpu_cases (repeatable; "
                    "default: all)")
    ap.add_argument("--knob", action="append", default=[], help="KNOB=value for lowering and compiling, e.g. "
                    "WGMMA=1, TMA=1, CUDA_COMPILER=nvcc (repeatable)")
    ap.add_argument("--no-tinygrad", action="store_true", help="skip tinygrad's kernels")
    ap.add_argument("--json", default=os.path.join("results", "gpu-sass.json"))
    ap.add_argument("--dump", default=None, help="a folder for each kernel's .cu and .sass")
    args = ap.parse_args(argv)
    knobs = dict(kv.split("=", 1) for kv in args.knob)
    cases = args.case or None
    ours = our_reports(args.sm, cases, knobs, args.dump)
    print(f"ours, {args.sm}" + (f" {' '.join(args.knob)}" if args.knob else "") + ":")
    print(table(ours))
    result: dict[str, Any] = {"sm": args.sm, "knobs": knobs, "ours": [r.row() for r in ours]}
    if not args.no_tinygrad:
        tg, err = tinygrad_reports(args.sm, cases, os.path.join(args.dump, "tinygrad") if args.dump else None)
        result["tinygrad"] = [r.row() for r in tg]
        result["tinygrad_error"] = err
        print(f"tinygrad, NULL:CUDA:{args.sm}:" if tg else f"tinygrad: none ({err})")
        if tg:
            print(table(tg))
    print(LEGEND)
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
