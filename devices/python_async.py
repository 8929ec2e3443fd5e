"""The python device's cp.async copies (lower.tc_async): a STORE arg "cp.async" reads its source when it runs but
writes LOCAL memory only when a wait retires it. BARRIER "cp.async.commit" closes the thread's group of copies,
BARRIER ("cp.async.wait", n) lands every group of the thread but the newest n (oldest first) and is then a
BARRIER; so a read that runs ahead of its wait sees the old contents. Each thread's state is the last slot of its
values (devices.python.PythonKernel.init)."""

from __future__ import annotations

from collections.abc import Callable

from devices.python_mem import Mem, issue_epoch, land
from devices.python_wgmma import barrier_step as wgmma_barrier
from devices.python_wgmma import is_wgmma_barrier
from rewrite.errors import CompileError
from rewrite.uop import UOp

Step = Callable[[list], "int | None"]


def async_groups(v: list) -> tuple[list, list]:
    """This thread's cp.async state: (the copies issued since the last commit, the committed groups, oldest
    first), each copy (memory, element, value); made on first use."""
    if v[-1] is None:
        v[-1] = ([], [])
    return v[-1]


def async_store(store: Step, idx: int) -> Step:
    """A cp.async copy (STORE arg "cp.async"): the source value is read now (the LOAD before it), but the
    element is written only when a wait retires its group; until then LOCAL memory holds what it held."""
    def step(v: list) -> None:
        mem, i = v[idx]
        issued = async_groups(v)[0]
        at = issue_epoch(mem)
        v[idx] = (Mem(None, mem.size, mem.label, mem.read, lambda _m, a, x: issued.append((mem, a, x, at))), i)
        try:
            store(v)
        finally:
            v[idx] = (mem, i)
    return step


def async_barrier(u: UOp, at_barrier: int) -> Step:
    """BARRIER "cp.async.commit": the copies issued so far become a group (no meeting). BARRIER ("cp.async.wait",
    n): the thread's groups but the newest n complete (their writes land, oldest first), then a BARRIER (the step
    returns `at_barrier`)."""
    if is_wgmma_barrier(u.arg):
        return wgmma_barrier(u.arg, at_barrier)
    if u.arg == "cp.async.commit":
        def commit(v: list) -> None:
            issued, groups = async_groups(v)
            groups.append(list(issued))
            issued.clear()
        return commit
    if not (isinstance(u.arg, tuple) and len(u.arg) in (2, 3) and u.arg[0] == "cp.async.wait"):
        raise CompileError(f"BARRIER arg {u.arg!r}: the python device knows None, 'cp.async.commit', "
                           f"('cp.async.wait', n[, 'proxy']) and the wgmma ones (devices.python_wgmma)")
    keep = int(u.arg[1])

    def wait(v: list) -> int:
        groups = async_groups(v)[1]
        while len(groups) > keep:
            for mem, a, x, at in groups.pop(0):
                land(mem, a, at)
                mem.write(mem, a, x)
        return at_barrier
    return wait


__all__ = ["async_barrier", "async_groups", "async_store"]
