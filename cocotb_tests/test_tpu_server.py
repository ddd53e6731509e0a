"""cocotb test of the RTL server (cocotb_tests/rtl_server.py): one simulator process, many runs.

The simulator starts once (Verilator model, embedded Python, cocotb, numpy, tpusim: ~0.7 s of the
0.7 s a one-program run costs); this test starts at cocotb's start of simulation, *before the
design is evaluated for the first time*, and then serves jobs: for each job it ``fork()``s, and
the child runs the ordinary test body (``test_tpu.run_job``) in the job's folder while the parent
waits for it. The child is a copy of a process whose design never ran: no initial block has
executed, no clock started, no DDR byte written (the checks in ``_pristine``), so each program
starts from exactly the state a fresh simulator process starts from, and nothing of one program
(SRAM contents, registers, DDR, testbench counters, open files) can reach the next.

The child then behaves like a fresh ``run_rtl`` simulator: its cwd is the job's output folder
(the server's plusargs name the retire trace and arch VCD relatively: ``retire.trace``,
``arch.vcd``), its environment the job's ``TPU_*`` variables, its stdout/stderr ``sim.log``; the
tb initial blocks open the files on the first evaluation, the final blocks close them when the
test ends and the child's simulator exits.

Protocol (file descriptors inherited from the host): ``$TPU_SERVER_JOBS_FD`` one JSON object per
line ``{"out": folder, "env": {name: value}}``; ``$TPU_SERVER_DONE_FD`` one line per job
``{"exit": child exit code (negative: killed by that signal)}``; a job ``{"ping": true}`` is
answered ``{"ready": true}`` at once (the server has started). End of file on the jobs: the
server exits. A child dies with the server (PR_SET_PDEATHSIG). The parent's objects are frozen
(``gc.freeze``) before each fork: the child's garbage collections at exit then skip them, so the
child's interpreter shutdown copies few of the parent's pages (0.13 -> 0.05 s per job, small).
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import signal
import sys

import cocotb
from cocotb.utils import get_sim_time

from cocotb_tests.harness import TRACE_FILE
from cocotb_tests.procguard import die_with_parent
from cocotb_tests.rtl_server import CPUS_ENV, DONE_FD_ENV, JOBS_FD_ENV
from cocotb_tests.test_tpu import run_job

_PR_SET_PDEATHSIG = 1


def _pristine() -> None:
    """RuntimeError unless the process is safe to fork (one thread) and the design was never
    evaluated: simulation time 0 and no retire trace opened (tb_top opens it in an initial
    block, relative to the server's folder)."""
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise RuntimeError(f"RTL server: {threads} threads in the simulator; fork() copies only one "
                           "(was it started on one CPU? rtl_server._one_cpu)")
    if get_sim_time("step") != 0 or os.path.exists(TRACE_FILE):
        raise RuntimeError("RTL server: the design was evaluated before the first fork "
                           f"(time {get_sim_time('step')}, {TRACE_FILE} exists: "
                           f"{os.path.exists(TRACE_FILE)}); a forked run would not start fresh")


def _flush_all() -> None:
    """Nothing buffered may be written twice (by the parent and by a child)."""
    sys.stdout.flush()
    sys.stderr.flush()
    ctypes.CDLL(None).fflush(None)


def _enter_job(job: dict) -> None:
    """In the child: the job's folder, environment and log; die with the server."""
    os.chdir(job["out"])
    os.environ.update(job["env"])
    fd = os.open("sim.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


@cocotb.test()
async def serve_tpubins(dut):
    jobs = os.fdopen(int(os.environ[JOBS_FD_ENV]), "r")
    done = os.fdopen(int(os.environ[DONE_FD_ENV]), "w", buffering=1)
    _pristine()
    os.sched_setaffinity(0, {int(c) for c in os.environ[CPUS_ENV].split(",")})   # see rtl_server._one_cpu
    for line in jobs:
        job = json.loads(line)
        if job.get("ping"):
            done.write(json.dumps({"ready": True}) + "\n")
            continue
        _flush_all()
        gc.freeze()     # no refcount/GC writes to the parent's objects: a child's exit stays cheap
        pid = os.fork()
        if pid == 0:
            die_with_parent(os.getppid())()      # a run dies with its server
            jobs.close()
            done.close()
            _enter_job(job)
            await run_job(dut)
            return
        _, status = os.waitpid(pid, 0)
        done.write(json.dumps({"exit": os.waitstatus_to_exitcode(status)}) + "\n")
    _flush_all()
    os._exit(0)
