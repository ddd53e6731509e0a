"""A persistent RTL simulator serving many runs: ``RtlServer(cfg).run(...) -> RtlResult``.

``run_rtl`` starts a simulator process per run, and that start (Verilator model, embedded
Python, cocotb, numpy, tpusim imports) is ~0.7 s of a small program's ~0.75 s. The server starts
the simulator once, with the cocotb test ``cocotb_tests/test_tpu_server.py``, which forks a
fresh copy of the never-evaluated simulator for every job (see there why no state can pass from
one program to the next); the job runs the same test body as ``run_rtl`` and leaves the same
files in its folder (rtl_result.json, retire.trace, <output>.npy, sim.log, arch.vcd with
``waves="arch"``), read back by the same code (``harness.read_result``).

What differs from ``run_rtl``: the dump mode (False or "arch", no window, no scopes, no tracing
build), the bugs and the deadlock watch are fixed when the server starts (they are plusargs or
build flavours); ``run`` refuses a job for another config. sim.log holds the job's part of the
log only (the simulator's start banner is in the server's own log, ``server.log`` in its
folder). ``shared(...)`` keeps one server per process and key (a few keys at once),
restarting a dead one.

The server is a child of the calling process (same process group: killing the group kills it);
it exits when the job pipe closes (the caller exited or ``close()``), and a running job's process
dies with the server.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from cocotb_tests.build import TOPLEVEL, build, rtl_dir, verilator_env
from cocotb_tests.harness import (
    DEFAULT_DEADLOCK_CYCLES,
    DEFAULT_QUIET_CYCLES,
    DEFAULT_STALL_CYCLES,
    TRACE_FILE,
    RtlResult,
    not_under_pytest,
    prepare_run_dir,
    read_result,
    sim_plusargs,
    simulator_pythonpath,
)
from cocotb_tests.procguard import die_with_parent
from cocotb_tests.rtl_dump import ARCH_VCD
from tpusim.arch.config import HwConfig, load_config
from tpusim.arch.errors import SimulationError

JOBS_FD_ENV, DONE_FD_ENV = "TPU_SERVER_JOBS_FD", "TPU_SERVER_DONE_FD"
SERVER_TEST_MODULE = "test_tpu_server"
SERVER_LOG = "server.log"
CPUS_ENV = "TPU_SERVER_CPUS"


def simulator_command(info, test_module: str, test_dir: Path, plusargs: list[str]) -> tuple[list, dict]:
    """(argv, environment) with which cocotb's Verilator runner would run ``test_module`` on the
    build ``info`` (the runner's own command construction, without running it)."""
    from cocotb_tools.runner import Verilator  # host only

    class _CommandOnly(Verilator):
        def _execute(self, cmds, cwd):               # record instead of running
            self.cmds = cmds

    with verilator_env(), not_under_pytest():
        simulator_pythonpath()
        r = _CommandOnly()
        r.test(test_module=test_module, hdl_toplevel=TOPLEVEL, hdl_toplevel_lang="verilog",
               build_dir=info.build_dir, test_dir=test_dir, results_xml=str(test_dir / "results.xml"),
               waves=False, plusargs=plusargs)
    return list(r.cmds[0]), dict(r.env)


@contextmanager
def _one_cpu(cpus: set[int]):
    """The calling thread (and so a process it starts) on one CPU of ``cpus``, restored after.

    Verilator's context starts a thread pool of one thread per CPU of the process's affinity,
    less one, that a model verilated without --threads never uses; a forked child has no copy of
    those threads and hangs in the pool's destructor at exit. Started on one CPU the simulator
    makes no pool and stays a one-thread process, safe to fork; the server test then gives it
    back the CPUs of ``$TPU_SERVER_CPUS``."""
    os.sched_setaffinity(0, {min(cpus)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)


class RtlServer:
    """One simulator process of ``cfg`` with ``bugs`` compiled in, dumping ``waves`` (False or
    "arch") with the deadlock watch ``deadlock_cycles``. SimulationError if the build fails;
    ValueError for another waves mode."""

    def __init__(self, cfg: HwConfig | str, bugs: tuple[str, ...] = (), waves: bool | str = False,
                 deadlock_cycles: int = DEFAULT_DEADLOCK_CYCLES):
        if waves not in (False, "arch"):
            raise ValueError(f"RtlServer waves must be False or 'arch', got {waves!r}")
        self.cfg = load_config(cfg) if isinstance(cfg, str) else cfg
        self.waves, self.deadlock_cycles = waves, deadlock_cycles
        self.info = build(self.cfg, waves="", bugs=bugs)
        self.dir = Path(tempfile.mkdtemp(prefix="tpu-rtl-server-"))
        plus = sim_plusargs(self.cfg, TRACE_FILE, deadlock_cycles) + ([f"+tpu_arch_vcd={ARCH_VCD}"] if waves else [])
        cmd, env = simulator_command(self.info, SERVER_TEST_MODULE, self.dir, plus)
        jobs_r, self._jobs_w = os.pipe()
        self._done_r, done_w = os.pipe()
        cpus = os.sched_getaffinity(0)
        env.update({JOBS_FD_ENV: str(jobs_r), DONE_FD_ENV: str(done_w),
                    CPUS_ENV: ",".join(str(c) for c in sorted(cpus))})
        with open(self.dir / SERVER_LOG, "w") as log, _one_cpu(cpus):
            self.proc = subprocess.Popen(cmd, cwd=self.dir, env=env, pass_fds=(jobs_r, done_w),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=die_with_parent(os.getpid()))  # dies with its worker
        os.close(jobs_r)
        os.close(done_w)
        self._jobs = os.fdopen(self._jobs_w, "w", buffering=1)
        self._done = os.fdopen(self._done_r, "r")
        self.runs = 0

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self) -> float:
        """Wait until the simulator has started (cocotb, the model, the imports); the seconds
        waited. SimulationError if it died."""
        t = time.monotonic()
        self._ask({"ping": True})
        return time.monotonic() - t

    def _ask(self, job: dict) -> dict:
        try:
            self._jobs.write(json.dumps(job) + "\n")
            line = self._done.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            raise SimulationError(f"the RTL server stopped (exit {self.proc.poll()}); {self._log_tail()}")
        return json.loads(line)

    def run(self, tpubin_path: str | Path, inputs: dict, out_dir: str | Path, max_cycles: int | None = None,
            stall_cycles: int = DEFAULT_STALL_CYCLES, quiet_cycles: int = DEFAULT_QUIET_CYCLES) -> RtlResult:
        """Run one program, like ``run_rtl(tpubin_path, cfg, inputs, out_dir, waves, ...)`` with
        this server's config, bugs, waves and deadlock watch. SimulationError if the server died
        or the run wrote no result."""
        out = Path(out_dir).resolve()
        out.mkdir(parents=True, exist_ok=True)
        env = prepare_run_dir(out, tpubin_path, self.cfg, inputs, [out / ARCH_VCD], max_cycles=max_cycles,
                              stall_cycles=stall_cycles, quiet_cycles=quiet_cycles,
                              deadlock_cycles=self.deadlock_cycles)
        t = time.monotonic()
        code = self._ask({"out": str(out), "env": env})["exit"]
        self.runs += 1
        return read_result(out, self.info, code, time.monotonic() - t)

    def _log_tail(self) -> str:
        p = self.dir / SERVER_LOG
        return f"log {p}:\n" + (p.read_text()[-3000:] if p.exists() else "")

    def close(self) -> None:
        """Stop the server (its current job, if any, dies with it) and remove its folder."""
        for f in (self._jobs, self._done):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_SHARED: dict[tuple, RtlServer] = {}     # least recently used first
#: servers ``shared`` keeps running at once (e.g. a buggy build and the clean one it is checked
#: against, stressgen.mutants); the least recently used beyond this is stopped
MAX_SHARED = 3


def shared(cfg: HwConfig, bugs: tuple[str, ...] = (), waves: bool | str = False,
           deadlock_cycles: int = DEFAULT_DEADLOCK_CYCLES) -> RtlServer:
    """This process's server for (RTL source folder, config, bugs, waves, deadlock watch), started
    on first use and restarted if it died; at most ``MAX_SHARED`` run at once. The source folder
    is part of the key: stressgen.mutants checks a mutant tree's failures on the clean tree."""
    key = (str(rtl_dir()), cfg.name, cfg.hash_bytes(), tuple(sorted(bugs)), waves, deadlock_cycles)
    srv = _SHARED.pop(key, None)
    if srv is not None and not srv.alive:
        srv.close()
        srv = None
    while srv is None and len(_SHARED) >= MAX_SHARED:
        _SHARED.pop(next(iter(_SHARED))).close()
    _SHARED[key] = srv = srv or RtlServer(cfg, bugs, waves, deadlock_cycles)
    return srv


def close_shared() -> None:
    """Stop every server ``shared`` started (also run at exit)."""
    while _SHARED:
        _SHARED.popitem()[1].close()


atexit.register(close_shared)

__all__ = ["RtlServer", "shared", "close_shared", "simulator_command", "JOBS_FD_ENV", "DONE_FD_ENV", "CPUS_ENV"]
