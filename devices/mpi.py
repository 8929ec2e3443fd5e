"""Scale-out across processes through MPI (OpenMPI + mpi4py): each rank is a process that owns its devices.

This module is the transport: a `Comm` over `MPI.COMM_WORLD` whose collectives move numpy arrays (a device
buffer's host view) with MPI's own algorithms: `allreduce`, `allgather`, `reduce_scatter`, `bcast`, `gather`,
`reduce`, and point-to-point `send`/`recv`. Nothing here is a home-made transport; it only adds what a compiler's
runtime needs around MPI:

- Never a hang. Every call runs under a watchdog: if it has not finished after `MPI_TIMEOUT` seconds (a rank died,
  or a rank skipped the collective), the rank prints one line naming the call, its rank, the sizes and the fix,
  and aborts the whole job (`MPI_Abort`), so every rank exits non-zero. The call itself is MPI's blocking one, so
  the watchdog costs nothing on the fast path (a non-blocking call polled from Python would stall MPI's progress
  between polls).
- An uncaught exception on one rank aborts the job too (as `python -m mpi4py` does), instead of leaving the other
  ranks blocked in their next collective.
- Typed errors: a shape or dtype that differs from what the call needs is a `CollectiveError` naming both.

`world()` is None when the process was not started by an MPI launcher (no `mpirun`), so single-process programs
never import mpi4py or initialise MPI.
"""

from __future__ import annotations

import collections
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, cast

import numpy as np

from rewrite.env import knob_int
from rewrite.errors import CollectiveError

# environment variables that MPI launchers set in every rank they start (OpenMPI, MPICH/Hydra, Slurm's PMI)
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")

_REDUCE_OPS = ("sum", "prod", "max", "min")


def launched_by_mpi() -> bool:
    """True when an MPI launcher started this process (cheap: reads the environment, does not initialise MPI)."""
    return any(v in os.environ for v in _LAUNCHER_VARS)


class Comm:
    """The ranks of one MPI communicator. Arrays passed in are C-contiguous numpy arrays (copied if not)."""

    def __init__(self, comm: Any, timeout: float) -> None:
        self._comm = comm
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self.timeout = timeout
        self.calls: collections.Counter[str] = collections.Counter()  # MPI calls made, by name (Allreduce, Send..)

    def __repr__(self) -> str:
        return f"Comm(rank={self.rank}, size={self.size}, timeout={self.timeout:g}s)"

    # ---- collectives ---------------------------------------------------------------------------------------------

    def allreduce(self, x: np.ndarray, op: str = "sum", out: np.ndarray | None = None) -> np.ndarray:
        """The elementwise reduction of `x` over all ranks, on every rank (written into `out` when given: a
        C-contiguous array of x's size and dtype)."""
        x, mop = _contig(x), _mpi_op(op)
        if out is None:
            out = np.empty_like(x)
        elif out.size != x.size or out.dtype != x.dtype or not out.flags.c_contiguous:
            raise CollectiveError(f"allreduce: out must be a C-contiguous {x.dtype} array of {x.size} elements, got "
                                  f"{out.dtype}{list(out.shape)}")
        self.calls["Allreduce"] += 1
        wd = self._watchdog
        token = wd.arm(self.timeout, lambda: self._timeout_message("allreduce", x))
        try:
            self._comm.Allreduce(x, out, op=mop)
        finally:
            wd.disarm(token)
        return out

    def allreduce_checked(self, x: np.ndarray, out: np.ndarray, mop: Any, message: Callable[[], str]) -> None:
        """`allreduce` for a caller that has checked its arrays (a path run per call, lower.mpi_cache): `x` and
        `out` C-contiguous numpy arrays of one size and dtype, `mop` from `mpi_op`, `message` what a timeout
        prints (`timeout_message`). Nothing is checked or copied; the watchdog is armed through its one-call slot
        (`_Watchdog.slot`: two attribute stores, no clock read)."""
        self.calls["Allreduce"] += 1
        wd = self.__dict__.get("_wd") or self._watchdog
        wd.seq += 1
        wd.slot = message
        try:
            self._comm.Allreduce(x, out, mop)
        finally:
            wd.slot = None

    def timeout_message(self, what: str, x: np.ndarray | None) -> Callable[[], str]:
        """What the watchdog prints if `what` on `x` times out, made when needed (for allreduce_checked); it keeps
        x's size, dtype and shape, not x."""
        size = "" if x is None else f" of {x.nbytes} bytes ({x.dtype}{list(x.shape)})"
        return lambda: self._timeout_text(what, size)

    def allgather(self, x: np.ndarray, out: np.ndarray | None = None, what: str = "allgather") -> np.ndarray:
        """Every rank's `x` stacked along a new leading axis (size, *x.shape), on every rank (written into `out`
        when given: a C-contiguous array of size times x's size, x's dtype). `what` names the call in a timeout
        message; a call with another name is counted under it too (`calls`), as the schedule check's is."""
        x = _contig(x)
        if out is None:
            out = np.empty((self.size, *x.shape), x.dtype)
        elif out.size != self.size * x.size or out.dtype != x.dtype or not out.flags.c_contiguous:
            raise CollectiveError(f"allgather: out must be a C-contiguous {x.dtype} array of {self.size} x {x.size} "
                                  f"elements, got {out.dtype}{list(out.shape)}")
        with self._watch("Allgather" if what == "allgather" else what, what, x):
            self._comm.Allgather(x, out)
        return out

    def reduce_scatter(self, x: np.ndarray, op: str = "sum", out: np.ndarray | None = None) -> np.ndarray:
        """Reduce `x` (leading axis = size blocks) over ranks; rank r gets block r, of shape x.shape[1:]. With
        `out` (a C-contiguous array of x's dtype with one block's elements), x may have any shape whose size
        divides into `size` blocks, and block r of its flat form lands in `out`."""
        x = _contig(x)
        if out is None:
            if x.ndim == 0 or x.shape[0] != self.size:
                raise CollectiveError(f"reduce_scatter: the input's leading axis must be the rank count {self.size}, "
                                      f"got shape {x.shape}; reshape it to ({self.size}, -1) first")
            out = np.empty(x.shape[1:], x.dtype)
        elif x.size != self.size * out.size or out.dtype != x.dtype or not out.flags.c_contiguous:
            raise CollectiveError(f"reduce_scatter: out must be a C-contiguous {x.dtype} array of {x.size} / "
                                  f"{self.size} elements, got {out.dtype}{list(out.shape)}")
        mop = _mpi_op(op)
        with self._watch("Reduce_scatter_block", "reduce_scatter", x):
            self._comm.Reduce_scatter_block(x, out, op=mop)
        return out

    def bcast(self, x: np.ndarray, root: int = 0) -> np.ndarray:
        """Rank `root`'s `x` on every rank (every rank passes an array of the same shape and dtype)."""
        self._check_rank("bcast", root)
        buf = _contig(x).copy() if self.rank != root else _contig(x)
        with self._watch("Bcast", "bcast", buf):
            self._comm.Bcast(buf, root=root)
        return buf

    def gather(self, x: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Every rank's `x` stacked along a new leading axis on rank `root`; None on the other ranks."""
        self._check_rank("gather", root)
        x = _contig(x)
        out = np.empty((self.size, *x.shape), x.dtype) if self.rank == root else None
        with self._watch("Gather", "gather", x):
            self._comm.Gather(x, out, root=root)
        return out

    def reduce(self, x: np.ndarray, op: str = "sum", root: int = 0) -> np.ndarray | None:
        """The elementwise reduction of `x` over ranks on rank `root`; None on the other ranks."""
        self._check_rank("reduce", root)
        x, mop = _contig(x), _mpi_op(op)
        out = np.empty_like(x) if self.rank == root else None
        with self._watch("Reduce", "reduce", x):
            self._comm.Reduce(x, out, op=mop, root=root)
        return out

    def barrier(self) -> None:
        with self._watch("Barrier", "barrier", None):
            self._comm.Barrier()

    # ---- point to point ------------------------------------------------------------------------------------------

    def send(self, x: np.ndarray, dest: int, tag: int = 0) -> None:
        self._check_rank("send", dest)
        x = _contig(x)
        with self._watch("Send", f"send to rank {dest}", x):
            self._comm.Send(x, dest=dest, tag=tag)

    def recv(self, shape: tuple[int, ...], dtype: np.dtype | type, source: int, tag: int = 0) -> np.ndarray:
        self._check_rank("recv", source)
        out = np.empty(shape, dtype)
        with self._watch("Recv", f"recv from rank {source}", out):
            self._comm.Recv(out, source=source, tag=tag)
        return out

    def sendrecv(self, x: np.ndarray, peer: int, tag: int = 0) -> np.ndarray:
        """Exchange equal-shaped arrays with `peer` (both ranks call it): no deadlock whatever the order."""
        self._check_rank("sendrecv", peer)
        x = _contig(x)
        out = np.empty_like(x)
        with self._watch("Sendrecv", f"sendrecv with rank {peer}", x):
            self._comm.Sendrecv(x, dest=peer, sendtag=tag, recvbuf=out, source=peer, recvtag=tag)
        return out

    # ---- helpers -------------------------------------------------------------------------------------------------

    def _check_rank(self, what: str, r: int) -> None:
        if not (isinstance(r, int) and 0 <= r < self.size):
            raise CollectiveError(f"{what}: rank {r!r} is not one of this job's ranks 0..{self.size - 1}")

    @contextmanager
    def _watch(self, name: str, what: str, x: np.ndarray | None) -> Iterator[None]:
        """Run the enclosed MPI call under the watchdog: past `timeout` seconds the job is aborted with a message.
        The message is only formatted when it is needed; the call is counted in `calls` under `name`."""
        self.calls[name] += 1
        token = self._watchdog.arm(self.timeout, lambda: self._timeout_message(what, x))
        try:
            yield
        finally:
            self._watchdog.disarm(token)

    def _timeout_message(self, what: str, x: np.ndarray | None) -> str:
        return self._timeout_text(what, "" if x is None else f" of {x.nbytes} bytes ({x.dtype}{list(x.shape)})")

    def _timeout_text(self, what: str, size: str) -> str:
        return (f"uopc: rank {self.rank}/{self.size}: MPI {what}{size} did not finish in {self.timeout:g} s: a rank "
                "died or never reached this call; aborting every rank (raise MPI_TIMEOUT if the call is just slow)")

    @property
    def _watchdog(self) -> _Watchdog:
        wd = self.__dict__.get("_wd")
        if wd is None:
            wd = self.__dict__["_wd"] = _Watchdog(self._abort, timeout=lambda: self.timeout)
            wd.start()
        return cast(_Watchdog, wd)

    def _abort(self, code: int) -> None:
        self._comm.Abort(code)


class _Watchdog:
    """One thread per communicator that aborts the job when an armed call passes its deadline. Arming a call is one
    dict entry under the GIL (no lock: the calls come from one thread, and the thread only reads a snapshot of the
    entries); the thread wakes on its own every `poll` seconds instead of being notified (a thread started per
    call, or a notify that hands it the GIL, cost milliseconds per call on a loaded host)."""

    def __init__(self, abort: Callable[[int], None], poll: float = 0.5,
                 timeout: Callable[[], float] = lambda: 60.0) -> None:
        self._abort = abort
        self._poll = poll
        # the one-call slot (Comm.allreduce_checked): the message of the call running now (None: none) and a count
        # of the calls armed there; the thread aborts when it sees the same call there for `timeout()` seconds
        self.slot: Callable[[], str] | None = None
        self.seq = 0
        self.timeout = timeout
        self._armed: dict[int, tuple[float, Callable[[], str]]] = {}
        self._tokens = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    def arm(self, timeout: float, message: Callable[[], str]) -> int:
        token = next(self._tokens)
        self._armed[token] = (time.monotonic() + timeout, message)
        self.start()
        return token

    def start(self) -> None:
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="uopc MPI watchdog", daemon=True)
                    self._thread.start()

    def disarm(self, token: int) -> None:
        self._armed.pop(token, None)

    def _run(self) -> None:
        seen, since = -1, 0.0  # the slot's call last seen there, and since when
        while True:
            time.sleep(self._poll)
            now = time.monotonic()
            seq, msg = self.seq, self.slot
            if msg is None or seq != seen:
                seen, since = (seq, now) if msg is not None else (-1, now)
            elif now - since >= self.timeout():
                _expire(msg(), self._abort)
            while True:
                try:  # a snapshot: the calling thread may arm or disarm meanwhile
                    armed = tuple(self._armed.values())
                    break
                except RuntimeError:
                    continue
            late = [m for deadline, m in armed if deadline <= now]
            if late:
                _expire(late[0](), self._abort)


def _expire(message: str, abort: Callable[[int], None]) -> None:
    print(message, file=sys.stderr, flush=True)
    abort(1)
    time.sleep(5)  # Abort tears the job down; if the launcher does not, leave anyway
    os._exit(1)


def _contig(x: np.ndarray) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise CollectiveError(f"MPI collectives move numpy arrays, got {type(x).__name__}")
    return np.ascontiguousarray(x)


def mpi_op(op: str) -> Any:
    """mpi4py's reduction for `op` (one of "sum", "prod", "max", "min"; CollectiveError for another)."""
    return _mpi_op(op)


def _mpi_op(op: str) -> Any:
    if (mop := _MPI_OPS.get(op)) is not None:
        return mop
    if op not in _REDUCE_OPS:
        raise CollectiveError(f"reduction {op!r} is not one of {', '.join(_REDUCE_OPS)}")
    from mpi4py import MPI

    _MPI_OPS.update({"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN})
    return _MPI_OPS[op]


_MPI_OPS: dict[str, Any] = {}


_world: Comm | None = None
_world_lock = threading.Lock()


def world() -> Comm | None:
    """This job's communicator, or None when no MPI launcher started the process (then MPI is never initialised).

    The first call initialises MPI and installs the abort-on-uncaught-exception hook."""
    global _world
    if _world is not None:
        return _world
    if not launched_by_mpi():
        return None
    with _world_lock:
        if _world is None:
            try:
                from mpi4py import MPI
            except ImportError as e:
                raise CollectiveError("this process was started by an MPI launcher but mpi4py is not installed: "
                                      "pip install mpi4py (and OpenMPI: apt-get install openmpi-bin "
                                      "libopenmpi-dev)") from e
            _world = Comm(MPI.COMM_WORLD, float(knob_int("MPI_TIMEOUT")))
            _install_excepthook(_world)
    return _world


def rank_and_size() -> tuple[int, int]:
    """(this process's rank, the number of ranks): (0, 1) when no MPI launcher started it."""
    if _world is not None:
        return _world.rank, _world.size
    c = world()
    return (0, 1) if c is None else (c.rank, c.size)


def _install_excepthook(comm: Comm) -> None:
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        previous(kind, value, tb)
        if comm.size > 1:
            print(f"uopc: rank {comm.rank}/{comm.size}: uncaught {kind.__name__}; aborting every rank",
                  file=sys.stderr, flush=True)
            comm._abort(1)

    sys.excepthook = hook
