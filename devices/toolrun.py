"""Running an external compiler (gcc, clang, nvcc) as the devices do: one subprocess with a time limit, whose
failures become a CompileError that names the tool, the kernel, and shows the numbered source."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence


def host_cores() -> int:
    """The cores this process may use: how many compiler runs (processes, or NVRTC calls on threads) go at once."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


def balanced_groups(sizes: list[int], workers: int, least: int, busy: Sequence[float] = ()) -> list[list[int]]:
    """Indices of kernels (of source sizes `sizes`) in groups of about equal size, one source file each: at most
    `workers` groups and none much under `least` (below it another compiler run costs more in its start than it
    saves in parallel); the largest first, each to the group of least load so far (a kernel's compile time grows
    with its source). `busy`: what some of the workers still have to do before they take a group, in the same
    units (their groups come out that much smaller, or empty). Each group keeps the kernels' order."""
    n = max(1, min(workers, len(sizes), sum(sizes) // least))
    groups: list[list[int]] = [[] for _ in range(n)]
    load = [0.0] * n
    for j, b in enumerate(sorted(busy, reverse=True)[:n - 1]):  # a free worker is always left
        load[n - 1 - j] = b
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        g = load.index(min(load))
        groups[g].append(i)
        load[g] += sizes[i]
    return [sorted(g) for g in groups if g]


def numbered(src: str) -> str:
    """`src` with line numbers, as compile errors show it."""
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(src.splitlines(), 1))


def run_compiler(cmd: list[str], who: str, what: str, src: str, timeout: int, stdin: str | None = None,
                 where: str = "", live: set[subprocess.Popen] | None = None) -> None:
    """Run `cmd` (its tool is `cmd[0]`); `who` is the device ("cpu", "cuda"), `what` the kernel(s), `src` the
    source shown on failure, `stdin` what is piped in, `where` extra words after the kernel (e.g. " for sm_90").
    `live`: the process runs in a process group of its own and is in this set while it runs, so that another thread
    may end it and the processes it started (`terminate`). It stays in this process's session: a session of its own
    would put it in a scheduler autogroup of its own on Linux, whose weight is a whole session's whatever the nice
    value its compiler runs at (devices.cpu's background -O2 builds, nice 19, took a core's half from the first
    step's Python and compiler that way)."""
    from rewrite.errors import CompileError

    tool = os.path.basename(cmd[0])
    # a process that may be ended (`live`) keeps its temporary files in a directory of its own, removed once it and
    # its children are gone: ended by a signal, the driver removes its own files, but a child (cc1, as) signalled
    # at the same moment may create one after that (seen under load: a gcc `cc*.s` left in TMPDIR)
    private = tempfile.mkdtemp(prefix="uopc-tool-") if live is not None else None
    env = {**os.environ, "TMPDIR": private} if private is not None else None
    try:
        with subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin is not None else None,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              process_group=0 if live is not None else None) as p:
            if live is not None:
                live.add(p)
            try:
                _, err = p.communicate(stdin, timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                raise CompileError(f"{who}: {tool} took over {timeout} s on {what}\n{numbered(src)}") from None
            finally:
                if live is not None:
                    live.discard(p)
    except OSError as e:
        raise CompileError(f"{who}: cannot run {tool}: {e}") from None
    finally:  # communicate returned: every process holding its pipes (the driver's children too) has ended
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
    if p.returncode != 0:
        raise CompileError(f"{who}: {tool} failed on {what}{where} (exit {p.returncode}):\n"
                           f"{err.strip()}\n--- source ---\n{numbered(src)}")


def terminate(p: subprocess.Popen) -> None:
    """End a compiler that run_compiler started with `live`, and its own processes (gcc's cc1 and as: the driver
    removes its temporary files when they end, but a cc1 left running would write one afterwards)."""
    import signal

    try:
        os.killpg(p.pid, signal.SIGTERM)
    except OSError:  # gone already, or no process groups here
        with contextlib.suppress(OSError):
            p.terminate()
