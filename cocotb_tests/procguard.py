"""Child processes that die with their parent, and one RTL run per output folder.

* ``GuardedVerilator``: cocotb's Verilator runner whose commands (the simulator ``Vtb_top``) are
  started with ``PR_SET_PDEATHSIG = SIGKILL`` (Linux ``prctl`` through ctypes, in a
  ``preexec_fn``): a ``kill -9`` of the Python process that runs them (``python -m
  tpusim.flow.cosim``, a stress worker) kills the simulator too, instead of leaving it writing
  ``retire.trace``. The signal is tied to the thread that started the child, which waits in
  ``subprocess`` for it, so it only fires when that process dies. The child also inherits the
  run lock below, so the folder stays locked for as long as a simulator might still write there.
* ``RunLock(folder)``: ``<folder>/rtl.lock`` held with ``flock`` (released by the kernel when
  every holder has died, so a lock left by a killed run is never mistaken for a live one) and
  holding the PID of its owner and, once started, of the simulator. A second run into the same
  folder while one is alive raises ``RunLockedError`` naming the PIDs and the folder; a dead run's
  file is simply taken over. The file is removed when the run ends.

Errors: ``RunLockedError`` (a ``SimulationError``) for a folder in use; ``OSError`` if the lock
file cannot be created (the caller's folder is unwritable).
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from cocotb_tools.runner import Verilator

from tpusim.arch.errors import SimulationError

LOCK_NAME = "rtl.lock"
_PR_SET_PDEATHSIG = 1


class RunLockedError(SimulationError):
    """Another live RTL run uses this output folder."""


def die_with_parent(parent_pid: int):
    """A ``preexec_fn``: the child gets SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), and
    kills itself at once if the parent ``parent_pid`` is already gone (it died before prctl)."""
    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(127)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)
    return preexec


class RunLock:
    """``with RunLock(folder) as lock:`` one RTL run in ``folder`` (module docstring)."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / LOCK_NAME
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise RunLockedError(f"{self.path.parent}: another RTL run is still using this folder "
                                     f"(pid {holder}, lock {self.path}); wait for it to end or kill "
                                     "it, or use another output folder") from None
            try:                                 # the file we locked may have been removed
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd = fd
        self._write(str(os.getpid()))
        return self

    def _write(self, text: str) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, (text + "\n").encode(), 0)

    def started(self, sim_pid: int) -> None:
        """Record the simulator's PID next to ours."""
        self._write(f"{os.getpid()} (simulator pid {sim_pid})")

    def __exit__(self, *exc) -> None:
        self.path.unlink(missing_ok=True)        # still locked: nobody takes it in between
        os.close(self.fd)
        self.fd = None


if not callable(getattr(Verilator, "_execute_cmds", None)):      # the one cocotb internal we override
    raise ImportError("cocotb_tools.runner.Verilator has no _execute_cmds: this cocotb cannot start "
                      "the simulator so that it dies with its parent; update cocotb_tests/procguard.py")


class GuardedVerilator(Verilator):
    """cocotb's Verilator runner; its commands die with this process and keep ``lock`` held."""

    lock: RunLock | None = None

    def _execute_cmds(self, cmds: Sequence, cwd, stdout: TextIO | None = None) -> None:
        for cmd in cmds:
            self.log.info("Running command %s in directory %s", " ".join(map(str, cmd)), cwd)
            stderr = None if stdout is None else subprocess.STDOUT
            keep = (self.lock.fd,) if self.lock is not None and self.lock.fd is not None else ()
            p = subprocess.Popen(cmd, cwd=cwd, env=self.env, stdout=stdout, stderr=stderr,
                                 pass_fds=keep, preexec_fn=die_with_parent(os.getpid()))
            try:
                if self.lock is not None:
                    self.lock.started(p.pid)
                rc = p.wait()
            except BaseException:                # e.g. Ctrl-C: as subprocess.run, kill and reap
                p.kill()
                p.wait()
                raise
            if rc != 0:
                raise RuntimeError(f"Command failed with return code: {rc}")


__all__ = ["GuardedVerilator", "RunLock", "RunLockedError", "die_with_parent", "LOCK_NAME"]
