"""This machine's physical limits: peak fp32 FLOP/s and STREAM-like memory bandwidth, measured once and cached.

The kernel benchmarks quote every figure as a percentage of what this machine can do at all, so they need:

* peak fp32 FMA throughput, 1 thread and all threads, for the cpu Target the kernels are compiled for
  (devices.base: CPU_TARGET or the host's): independent FMA chains (`a = a*b + c`, b < 1 so values stay
  normal), each one vector register of the Target wide (GCC vector types of `Target.vector_bytes`), as many as
  its registers hold (`chain_counts`: 12 of AVX2's 16 ymm, 16 of AVX-512's 32 zmm) -- enough to cover the FMA
  latency on both ports, as shared/anchors/machine-limits.md section 1 does -- and 12 scalar chains. A target
  without FMA instructions (x86-64-v2) gets a multiply and an add per step (rows `muladd_*`). Each peak row
  has a `_cpu` twin over the threads' CPU time instead of wall time: what the cores do while they run, which
  stays at the peak on a loaded machine (the wall-clock row, the one kernels are compared with, does not);
* memory bandwidth, 1 thread and all threads: STREAM triad (`a = b + s*c`, 12 bytes per element, the
  write-allocate read not counted, STREAM's convention), copy (8 B) and read (a vectorised sum, 4 B), each
  over a working set far beyond the last-level cache (1.5 GiB in all, 384 MiB with --quick), first touched by
  the thread that uses it, in 2 MiB-aligned maps advised MADV_HUGEPAGE (as devices.memory allocates the kernels'
  buffers: a triad over 4 KiB pages would be a different, lower limit); plus triad over a 12 MiB working set,
  the "cache-resident" bandwidth that working sets of a few tens of MiB see instead of DRAM's; on x86 also the
  triad with streaming (non-temporal) stores, `triad_nt`: no line is read before it is written, so its 12 bytes
  an element are what really moves, the limit of a kernel that streams its output (rules.streaming).

Both come from one small C program (its text in benchmarks.limits_program) compiled with `cc -O3 -fopenmp` and
the Target's instruction-set flags (`-march=x86-64-v3`, ...; `-march=native` for the host's own). Results are cached as
JSON under rewrite.env.cache_dir(), keyed by CPU model, core count, the Target and FORMAT, because they are a
property of the machine and the instructions used, not of the code; a file that is corrupt (checksum) or holds
figures that make no sense is measured again (benchmarks.checked_cache, `valid`). A quick measurement is
upgraded by the next full one; `python -m benchmarks.limits --remeasure` (or REMEASURE_LIMITS=1 for any run)
measures again; CACHE=0 (the project's knob for all its disk caches) measures every time and stores nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from benchmarks import checked_cache
from benchmarks.limits_program import SOURCE
from devices import target_for
from devices.base import Target
from rewrite.env import getenv

# bump when the program, the meaning of a figure or the file's layout changes: old files are ignored
# (4: the stream arrays are huge-page advised, as the cpu device's buffers are)
FORMAT = 4


# every peak row a program may report, widest first (Limits.peak's fallback when the target's row is not named)
_PEAK_ROWS = ("fma_avx512", "fma_avx2", "fma_neon", "fma_sse", "muladd_avx512", "muladd_avx2", "muladd_sse",
              "fma_scalar", "muladd_scalar")
_LABELS = {"avx512": "AVX-512", "avx2": "AVX2", "neon": "NEON", "sse": "SSE", "scalar": "scalar"}
DRAM_MIB, DRAM_MIB_QUICK = 1536, 384  # all three arrays together; the anchors saw DRAM figures from ~384 MiB up
CACHE_MIB = 12  # three 4 MiB arrays: past L2, inside the last-level cache share (anchors: 12-96 MiB plateau)


@dataclass
class Row:
    """One measured limit: the median and best over the trials, and every trial."""

    name: str
    threads: int
    unit: str
    median: float
    best: float
    samples: list[float]


@dataclass
class Limits:
    """What this machine can do; `key` names the machine the figures belong to."""

    key: str
    cpu: str
    cores: int
    measured: str
    quick: bool
    compiler: str
    fgn: float | None  # foreign CPU load while measuring (vCPUs): a high value means the figures are low
    rows: list[Row] = field(default_factory=list)
    cached: bool = False
    target: str = ""  # str(Target) of the code measured
    vector: str = ""  # the name of its vector peak row (row_names)

    @property
    def threads_all(self) -> int:
        return max(r.threads for r in self.rows) if self.rows else 1

    def get(self, name: str, threads: int) -> float | None:
        """The limit `name` at `threads`: the best trial, since other processes on a shared machine can only
        slow a trial down, never speed it up (on a quiet machine best and median agree within ~1%). A count
        that was not measured is scaled linearly from 1 thread (the 2-vCPU anchors found peak and bandwidth
        scale about that way) up to the all-thread figure; more threads never lower a limit (a loaded
        measurement can show that)."""
        by_t = {r.threads: r.best for r in self.rows if r.name == name}
        if not by_t:
            return None
        fewer = [v for t, v in by_t.items() if t <= threads] or [by_t[min(by_t)]]
        if threads in by_t:
            v = by_t[threads]
        elif 1 in by_t and threads < max(by_t):
            v = min(by_t[1] * threads, by_t[max(by_t)])  # bandwidth saturates: never above the all-thread figure
        else:
            v = max(fewer)
        return max(v, *fewer)

    def peak(self, threads: int) -> tuple[str, float | None]:
        """The target's vector multiply-add peak (what a compiler could reach at best with its instructions), and
        its name; the widest measured where the row is not named."""
        for name in (self.vector, *_PEAK_ROWS):
            if (v := self.get(name, threads)) is not None:
                return name, v
        return "none", None

    def triad(self, threads: int) -> float | None:
        return self.get("triad", threads)

    def summary(self) -> str:
        t = self.threads_all
        parts = []
        peaks = [(n, f"{'FMA' if n.startswith('fma_') else 'mul+add'} {_LABELS.get(n.partition('_')[2], n)}",
                  "GFLOP/s") for n in dict.fromkeys((self.vector, *_PEAK_ROWS)) if n]
        if self.vector:
            peaks.insert(1, (f"{self.vector}_cpu", "(per CPU second)", "GFLOP/s"))
        for name, label, unit in (*peaks, ("triad", "DRAM triad", "GB/s"),
                                  ("read", "DRAM read", "GB/s"), ("triad_cache", f"{CACHE_MIB} MiB triad", "GB/s")):
            one, al = self.get(name, 1), self.get(name, t)
            if one is not None:
                parts.append(f"{label} {one:.0f}" + (f" / {al:.0f}" if t > 1 and al is not None else "") + f" {unit}")
        how = "cached" if self.cached else "measured now"
        fg = "" if self.fgn is None else f", foreign load {self.fgn:.2f}"
        tgt = f" for {self.target}" if self.target else ""
        return (f"machine limits{tgt} (1 / {t} threads; {how} {self.measured}{', quick sizes' if self.quick else ''}"
                f"{fg}): " + "; ".join(parts))

    def to_json(self) -> dict[str, object]:
        return {"format": FORMAT, "key": self.key, "cpu": self.cpu, "cores": self.cores, "measured": self.measured,
                "quick": self.quick, "compiler": self.compiler, "fgn": self.fgn, "target": self.target,
                "vector": self.vector, "rows": [vars(r) for r in self.rows]}

    @staticmethod
    def from_json(d: dict) -> Limits:
        rows = [Row(**r) for r in d["rows"]]
        return Limits(d["key"], d["cpu"], d["cores"], d["measured"], d["quick"], d["compiler"], d.get("fgn"), rows,
                      target=d.get("target", ""), vector=d.get("vector", ""))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown")
    except OSError:
        import platform

        return platform.processor() or "unknown"


def machine_key(target: Target | None = None) -> str:
    """The CPU model, its core count and the target's instruction set and vector facts (default: the cpu
    device's target): figures for AVX2 code are not those for AVX-512 code on the same machine."""
    t = target or target_for("cpu")
    return f"{cpu_model()} x{os.cpu_count()} {t.isa} {t.vector_bytes * 8}-bit x{t.vector_registers}" + \
        (" fma" if t.fma else "")


def cache_path(target: Target | None = None) -> str:
    return checked_cache.path_for("limits", machine_key(target))


def chain_counts(target: Target) -> tuple[int, int]:
    """Independent multiply-add chains (vector, scalar) for the peak: enough to hide the FMA latency (4-5 cycles)
    on two pipes (8-10 in flight), as many as the registers hold with b, c and two spare (AVX2 and SSE: 12 of 16;
    AVX-512 and NEON: 16 of 32)."""
    return max(8, min(16, target.vector_registers - 4)), 12


def row_names(target: Target) -> tuple[str, str]:
    """The peak rows' names for `target`: `fma_<vector kind>` and `fma_scalar` (`muladd_` where the target has no
    FMA instructions: a multiply and an add, still 2 FLOP a lane)."""
    kind = {("x86_64", 16): "sse", ("x86_64", 32): "avx2", ("x86_64", 64): "avx512",
            ("aarch64", 16): "neon"}.get((target.arch, target.vector_bytes), f"v{target.vector_bytes * 8}")
    pre = "fma_" if target.fma else "muladd_"
    return pre + kind, pre + "scalar"


def _chains(n: int, vector: bool) -> str:
    t, zero = ("vf", "(vf){0} + ") if vector else ("float", "")
    lines = [f"{t} a{i} = {zero}(va + {i} * 1e-3f);" for i in range(n)]
    lines.append("for (long k = 0; k < iters; k++) {")
    lines += [f"  a{i} = a{i} * b + c;" for i in range(n)]
    lines.append("}")
    lines.append(f"{t} s = " + " + ".join(f"a{i}" for i in range(n)) + ";")
    if vector:
        lines.append("float r = 0;\n  for (int l = 0; l < VEC_LANES; l++) r += s[l];\n  return r;")
    else:
        lines.append("return s;")
    return "\n  ".join(lines)


def program_source(target: Target) -> str:
    """The measuring program for `target`: the peak's chains as wide as one of its vector registers, as many as
    chain_counts says (a*b + c contracts to one FMA instruction where the target has them)."""
    nv, ns = chain_counts(target)
    vrow, srow = row_names(target)
    head = (f"#define VEC_BYTES {max(4, target.vector_bytes)}\n#define N_VEC {nv}\n#define N_SCALAR {ns}\n"
            f"#define VEC_ROW \"{vrow}\"\n#define SCALAR_ROW \"{srow}\"\n")
    return head + SOURCE.replace("CHAINS_VEC", _chains(nv, True)).replace("CHAINS_SCALAR", _chains(ns, False))


def _compile(workdir: str, target: Target | None = None) -> tuple[str, str]:
    """Build the measuring program for `target` (default: the cpu device's, CPU_TARGET or the host) with its
    instruction-set flags; returns (executable, compiler identity). OpenMP when the compiler has it, else
    single-threaded rows only."""
    target = target or target_for("cpu")
    if not target.runs_here:
        raise RuntimeError(f"limits: the target {target} does not run on this host; measure it where it does")
    cc = str(getenv("CC", "")) or next((c for c in ("gcc", "clang", "cc") if shutil.which(c)), "")
    if not cc:
        raise RuntimeError("limits: no C compiler (gcc, clang or cc) found; set CC")
    src = os.path.join(workdir, "limits.c")
    exe = os.path.join(workdir, "limits")
    with open(src, "w") as f:
        f.write(program_source(target))
    base = [cc, "-O3", *target.compile_flags, "-ffp-contract=fast", src, "-o", exe, "-lm"]
    r = subprocess.run([*base, "-fopenmp"], capture_output=True, text=True)
    if r.returncode != 0:
        r = subprocess.run(base, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"limits: {cc} failed:\n{r.stderr}")
    ver = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()
    return exe, (ver[0] if ver else cc)


def _parse(out: str) -> list[Row]:
    rows = []
    for ln in out.splitlines():
        p = ln.split()
        if len(p) >= 6:
            rows.append(Row(p[0], int(p[1]), p[2], float(p[3]), float(p[4]), [float(x) for x in p[5:]]))
    return rows


def foreign_load(seconds: float) -> float | None:
    """CPU use of other processes (in vCPUs) over the next `seconds`."""
    from benchmarks.runner import LoadMeter

    m = LoadMeter()
    time.sleep(seconds)
    return m.foreign()


def wait_quiet(max_s: float, below: float = 0.3, window: float = 0.5) -> float | None:
    """Wait up to `max_s` for a `window` in which other processes use under `below` vCPUs (a figure measured
    while another process holds a core is cached as this machine's limit for good). Returns the last load."""
    end = time.monotonic() + max_s
    while True:
        f = foreign_load(window)
        if f is None or f < below or time.monotonic() >= end:
            return f


_NOW: dict[str, str] = {}  # str(target) -> the measuring program this process compiled for triad_now
_NOW_DIRS: list[tempfile.TemporaryDirectory] = []  # kept for the process: removed at exit


def triads_now(threads: int, target: Target | None = None, mib: int = DRAM_MIB_QUICK, gb: float = 1.0
               ) -> dict[str, float]:
    """The DRAM triads (GB/s, best trial) at `threads` measured now, `mib` MiB of arrays, by row name: "triad"
    (plain stores: each line written is read first, STREAM's convention counts 12 bytes an element) and, on x86,
    "triad_nt" (streaming stores: the same 12 bytes really moved). What a figure measured beside it is compared
    with: this machine kind's DRAM bandwidth moves with its neighbours (the same VM measured 16 and 26 GB/s two
    minutes apart), so a share of a triad cached earlier says little. The program is compiled once per process;
    empty where it cannot be built or run (a target that does not run here)."""
    target = target or target_for("cpu")
    key = str(target)
    try:
        if key not in _NOW:
            d = tempfile.TemporaryDirectory(prefix="uopc-limits-")
            _NOW_DIRS.append(d)
            _NOW[key] = _compile(d.name, target)[0]
        env = dict(os.environ)
        env.setdefault("OMP_PROC_BIND", "true")
        env.pop("OMP_NUM_THREADS", None)
        out = subprocess.run([_NOW[key], "stream", str(mib), str(gb)], capture_output=True, text=True, env=env,
                             check=True, timeout=120).stdout
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return {}
    found: dict[str, float] = {}
    for name in ("triad", "triad_nt"):
        rows = {r.threads: r.best for r in _parse(out) if r.name == name}
        if rows:
            fewer = [t for t in rows if t <= threads]  # the count asked for, else the nearest below it measured
            found[name] = rows[max(fewer)] if fewer else rows[min(rows)]
    return found


def triad_now(threads: int, target: Target | None = None, mib: int = DRAM_MIB_QUICK, gb: float = 1.0
              ) -> float | None:
    """The plain-store DRAM triad of triads_now (None where it cannot be measured)."""
    return triads_now(threads, target, mib, gb).get("triad")


def measure(quick: bool = False, say: object = None, target: Target | None = None) -> Limits:
    """Run the measurements now for `target` (default: the cpu device's), about 15 s after waiting up to a minute
    for a quiet machine; with `quick` about 5 s and no waiting."""
    target = target or target_for("cpu")
    from benchmarks.runner import LoadMeter

    def tell(msg: str) -> None:
        if callable(say):
            say(msg)

    if not quick:
        tell("limits: waiting (up to 60 s) for other processes to leave the CPUs alone")
        wait_quiet(60)

    env = dict(os.environ)
    # threads stay where they first touched their memory, and a figure is the whole team's
    env.setdefault("OMP_PROC_BIND", "true")
    env.pop("OMP_NUM_THREADS", None)
    with tempfile.TemporaryDirectory() as d:
        tell("limits: compiling the measuring program")
        exe, ident = _compile(d, target)
        meter = LoadMeter()
        tell("limits: peak fp32 FLOP/s")
        trials, secs = ("5", "0.05") if quick else ("7", "0.1")
        peak = subprocess.run([exe, "peak", trials, secs], capture_output=True, text=True, env=env, check=True)
        tell(f"limits: DRAM bandwidth ({DRAM_MIB_QUICK if quick else DRAM_MIB} MiB working set)")
        dram = subprocess.run([exe, "stream", str(DRAM_MIB_QUICK if quick else DRAM_MIB), "1" if quick else "4"],
                              capture_output=True, text=True, env=env, check=True)
        tell(f"limits: cache bandwidth ({CACHE_MIB} MiB working set)")
        llc = subprocess.run([exe, "stream", str(CACHE_MIB), "1" if quick else "4", "_cache"], capture_output=True,
                             text=True, env=env, check=True)
        fgn = meter.foreign()
    rows = _parse(peak.stdout) + _parse(dram.stdout) + _parse(llc.stdout)
    return Limits(machine_key(target), cpu_model(), os.cpu_count() or 1, time.strftime("%Y-%m-%d %H:%M"), quick,
                  ident, None if fgn is None else round(fgn, 3), rows, target=str(target), vector=row_names(target)[0])


def load(quick: bool = False, remeasure: bool = False, say: object = None, target: Target | None = None) -> Limits:
    """The cached limits of this machine for `target` (default: the cpu device's), measuring them first when there
    are none (or only quick ones, or ones taken under foreign load while the machine is quiet now, and this is a
    full run; or `remeasure`, or REMEASURE_LIMITS=1, or CACHE=0). A cache file is believed only when it is intact
    (benchmarks.checked_cache: format, key, checksum) and its figures are sane (`valid`); otherwise it is measured
    again and rewritten."""
    target = target or target_for("cpu")
    remeasure = remeasure or bool(int(os.environ.get("REMEASURE_LIMITS", "0") or 0))
    key, path = machine_key(target), cache_path(target)
    d = None if remeasure else checked_cache.read(path, key, FORMAT)
    if d is not None:
        try:
            lim: Limits | None = Limits.from_json(d)
        except (KeyError, TypeError, ValueError):
            lim = None
        # figures taken under foreign load are replaced by a full run that finds the machine quiet now
        noisy = not quick and (d.get("fgn") or 0) > 0.5 and (foreign_load(1.0) or 0) < 0.3
        if lim is not None and valid(lim, target) and (quick or not lim.quick) and not noisy:
            lim.cached = True
            return lim
    lim = measure(quick, say, target)
    checked_cache.write(path, key, FORMAT, lim.to_json())
    return lim


def valid(lim: Limits, target: Target) -> bool:
    """Whether `lim` holds what the kernels suite reads, as finite positive figures: a multiply-add peak row (the
    target's own, or one Limits.peak falls back to) and the DRAM triad, each at 1 thread."""
    nums = [v for r in lim.rows for v in (r.median, r.best, *r.samples)]
    if not lim.rows or not all(isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in nums):
        return False
    names = {(r.name, r.threads) for r in lim.rows}
    peaks = (row_names(target)[0], *_PEAK_ROWS)
    return any((p, 1) in names for p in peaks) and ("triad", 1) in names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.limits", description=__doc__.split("\n\n")[0])
    ap.add_argument("--remeasure", action="store_true", help="measure again even when cached")
    ap.add_argument("--quick", action="store_true", help="smaller working set, fewer trials (a few seconds)")
    args = ap.parse_args(argv)
    print(f"target: {target_for('cpu')}")
    lim = load(args.quick, args.remeasure, say=lambda m: print(m, file=sys.stderr))
    print(lim.summary())
    for r in lim.rows:
        print(f"  {r.name:16s} {r.threads:2d}T  median {r.median:8.1f} {r.unit:8s} best {r.best:8.1f}  "
              f"(min {min(r.samples):.1f}, {len(r.samples)} trials)")
    print(f"cache: {cache_path(target_for('cpu')) if int(getenv('CACHE')) else '(CACHE=0: not stored)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
