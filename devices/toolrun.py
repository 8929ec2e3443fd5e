"""Running an external compiler (gcc, clang, nvcc) as the devices do: one subprocess with a time limit, whose
failures become a CompileError that names the tool, the kernel, and shows the numbered source."""

from __future__ import annotations

import os
import subprocess


def numbered(src: str) -> str:
    """`src` with line numbers, as compile errors show it."""
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(src.splitlines(), 1))


def run_compiler(cmd: list[str], who: str, what: str, src: str, timeout: int, stdin: str | None = None,
                 where: str = "") -> None:
    """Run `cmd` (its tool is `cmd[0]`); `who` is the device ("cpu", "cuda"), `what` the kernel(s), `src` the
    source shown on failure, `stdin` what is piped in, `where` extra words after the kernel (e.g. " for sm_90")."""
    from rewrite.errors import CompileError

    tool = os.path.basename(cmd[0])
    try:
        r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CompileError(f"{who}: {tool} took over {timeout} s on {what}\n{numbered(src)}") from None
    except OSError as e:
        raise CompileError(f"{who}: cannot run {tool}: {e}") from None
    if r.returncode != 0:
        raise CompileError(f"{who}: {tool} failed on {what}{where} (exit {r.returncode}):\n"
                           f"{r.stderr.strip()}\n--- source ---\n{numbered(src)}")
