"""The process a program runs in: ``ProgramChild`` keeps one long-lived child (``python -m
stressgen.child``, started with subprocess: a Dask worker is a daemonic process, which
multiprocessing does not let have children) and runs programs in it one at a time, each with its
deadline. Parent and child talk over two pipes given to the child (multiprocessing Connections:
pickled tuples between these two processes only: the program's index and seed, its phases, its
row as a dict).

The child is the leader of its own process group (the RTL simulator it starts is in that group
too) and dies with the process that started it (Linux PR_SET_PDEATHSIG; the signal follows the
*thread* that started the child, so a Dask worker keeps one ``ProgramChild`` per task thread,
and Dask's task threads live as long as the worker). A program that exceeds ``spec.timeout_s``
(plus ``spec.minimize_budget_s`` once it minimises) is killed with its whole group, a child that
dies is noticed (its pipe closes, it has an exit code); either way ``run`` returns the reason ("timeout in <step>"
/ "worker died in <step>") and a fresh child takes its place for the next program.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from multiprocessing.connection import Connection
from pathlib import Path

from stressgen.execute import execute_program
from stressgen.spec import RunSpec

REPO = Path(__file__).resolve().parent.parent


def _die_with_parent(parent_pid: int) -> None:
    """PR_SET_PDEATHSIG(SIGTERM); SIGTERM kills this child's whole process group."""
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(os.getpgrp(), signal.SIGKILL))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:                   # the parent died before prctl
        os.killpg(os.getpgrp(), signal.SIGKILL)


def _child_main(conn, spec_dict: dict, campaign_id: str, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is the campaign's business
    _die_with_parent(parent_pid)
    spec = RunSpec(**spec_dict)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        idx, seed = msg
        row = execute_program(spec, campaign_id, idx, seed, phase=lambda p, i=idx: conn.send(("phase", i, p)))
        conn.send(("done", idx, asdict(row)))


class ProgramChild:
    """One child process running ``spec``'s programs of campaign ``campaign_id``."""

    def __init__(self, spec: RunSpec, campaign_id: str):
        self.spec, self.campaign_id = spec, campaign_id
        self.proc = self.conn = None

    def _start(self) -> None:
        down_r, down_w = os.pipe()                 # parent -> child
        up_r, up_w = os.pipe()                     # child -> parent
        arg = json.dumps({"spec": asdict(self.spec), "campaign": self.campaign_id, "parent": os.getpid(),
                          "fds": [down_r, up_w]})
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        try:
            # its own session (process group) from the start: a Ctrl-C never reaches it
            self.proc = subprocess.Popen([sys.executable, "-m", "stressgen.child", arg], pass_fds=(down_r, up_w),
                                         start_new_session=True, stdin=subprocess.DEVNULL, env=env)
        finally:
            os.close(down_r)
            os.close(up_w)
        self.conn = _Duplex(Connection(up_r), Connection(down_w))

    def run(self, idx: int, seed: int) -> tuple[dict | None, tuple[str, str] | None]:
        """Run program ``idx`` (seed ``seed``): (its row as a dict, None), or (None, (reason,
        detail)) if it was killed at its deadline or its process died."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        started = time.monotonic()
        deadline, phase = started + self.spec.timeout_s, "start"
        try:
            self.conn.send((idx, seed))
        except OSError:
            self.kill()
            return None, ("worker died in start", "its process was gone")
        while True:
            dead = False
            try:
                while time.monotonic() <= deadline and self.conn.poll(min(0.5, max(0.0, deadline - time.monotonic()))):
                    msg = self.conn.recv()
                    if msg[0] == "done":
                        return msg[2], None
                    phase = msg[2]
                    if phase == "minimize":             # the minimiser has its own budget
                        deadline = time.monotonic() + self.spec.timeout_s + self.spec.minimize_budget_s
            except (EOFError, OSError):
                dead = True
            if dead or self.proc.poll() is not None:
                try:
                    code = self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    code = None
                self.kill()
                return None, (f"worker died in {phase}", f"exit code {code}")
            if time.monotonic() > deadline:
                self.kill()
                return None, (f"timeout in {phase}", f"killed after {time.monotonic() - started:.1f} s "
                                                     f"(--timeout {self.spec.timeout_s:g} s)")

    def kill(self) -> None:
        """Kill the child and its process group (the next ``run`` starts a new one)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.kill()
        self.proc.wait()
        self.conn.close()
        self.proc = self.conn = None

    def close(self) -> None:
        """Stop the child (politely if idle)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.conn.send(None)
                self.proc.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


class _Duplex:
    """A receiving and a sending Connection used as one."""

    def __init__(self, rx: Connection, tx: Connection):
        self.rx, self.tx = rx, tx

    def poll(self, timeout_s: float = 0.0) -> bool:
        return self.rx.poll(timeout_s)

    def recv(self):
        return self.rx.recv()

    def send(self, obj) -> None:
        self.tx.send(obj)

    def close(self) -> None:
        self.rx.close()
        self.tx.close()


def main(argv: list[str]) -> None:
    """Child entry point: ``python -m stressgen.child JSON`` (written by ``ProgramChild``)."""
    a = json.loads(argv[0])
    rx, tx = a["fds"]
    _child_main(_Duplex(Connection(rx), Connection(tx)), a["spec"], a["campaign"], a["parent"])


if __name__ == "__main__":
    main(sys.argv[1:])


__all__ = ["ProgramChild"]
