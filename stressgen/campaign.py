"""A stress campaign: N generated programs run by J worker processes, results in the database.

Seeds: program ``i`` of the campaign with root seed ``S`` has seed ``derive_seed(S, i)`` =
the first 8 bytes (little endian) of SHA-256 of the ASCII text ``"tpusim-stress:<S>:<i>"``,
shifted right by one bit (a 63-bit integer, so it fits SQLite's INTEGER). ``python -m stressgen
replay --seed P`` regenerates the program from ``P`` alone (plus --hw and --invalid-rate).

Processes: the parent owns the database (only it writes, one transaction per finished program)
and hands program indices to ``jobs`` long-lived workers (multiprocessing "spawn"). Each worker
is the leader of its own process group (the RTL simulator it starts is in that group too) and
dies with the parent (Linux PR_SET_PDEATHSIG). A worker that exceeds the per-program timeout is
killed with its whole group, a worker that dies is noticed through its sentinel; either way the
program is recorded as status "error" (reason "timeout in <step>" / "worker died ...") with a
bundle written by the parent, and a fresh worker takes its place. The campaign never hangs.

Resume: the campaign's identity (``db.Campaign``: root seed, hw, bug, invalid rate, rtl) is
its database key; a restart runs only the indices in ``range(count)`` without a row, or whose
row says its files could not be written (status "error", reason ``cannot write <file>: ...``,
stressgen.writefail: disk full, file-size limit); that program gets no bundle (its run folder
is removed) and its row is replaced by the rerun's.
"""
from __future__ import annotations

import ctypes
import hashlib
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait as mp_wait
from pathlib import Path

from stressgen import bundle as bundle_mod
from stressgen.db import ProgramRow, ResultsDb
from stressgen.runner import prebuild, run_spec_program
from stressgen.spec import (  # noqa: F401
    DEFAULT_INVALID_RATE,
    DEFAULT_MINIMIZE_BUDGET_S,
    DEFAULT_TIMEOUT_S,
    MAX_COUNT,
    MAX_SEED,
    CampaignError,
    RunSpec,
    derive_seed,
    replay_command,
)
from stressgen.writefail import is_write_failure, write_failure
from tpusim.arch.config import load_config


def execute_program(spec: RunSpec, campaign_id: str, idx: int, seed: int, phase=lambda p: None) -> ProgramRow:
    """Generate, run and judge program ``idx`` (seed ``seed``); bundle it if it fails.

    Never raises for a problem of the program or the tools: an exception becomes status
    "error" with reason "exception in <step>: <type>: <message>" (bundle written if possible);
    a file that cannot be written (run folder or bundle) gives status "error", reason
    "cannot write <file>: <why>" and no bundle (stressgen.writefail; rerun on resume)."""
    t0 = time.monotonic()
    row = ProgramRow(idx=idx, seed=seed, hw=spec.hw, bug=spec.bug, status="error")
    step = {"name": "generate"}

    def set_phase(p):
        step["name"] = p
        if p == "minimize":
            step["minimize_t0"] = time.monotonic()
        phase(p)

    work = Path(spec.work_root) / campaign_id
    try:
        outcome, prog, run_dir = run_spec_program(spec, seed, work, phase=set_phase)
    except Exception as e:  # the tools failed on this program: record it, keep the campaign going
        why = write_failure(e, work / str(seed), step["name"])
        row.reason = why or f"exception in {step['name']}: {type(e).__name__}: {e}".splitlines()[0][:400]
        row.divergence = f"{why}\n{type(e).__name__}: {e}" if why else traceback.format_exc()[-4000:]
        row.wall_s = time.monotonic() - t0
        if why:
            bundle_mod.remove_tree(work / str(seed))
        else:
            _crash_bundle(spec, campaign_id, seed, row)
        return row
    row.status = outcome.status
    row.reason, row.signal = outcome.reason, outcome.signal
    row.divergence = outcome.first_divergence
    row.bins, row.timings = {**prog.bins, **outcome.bins}, dict(outcome.timings_s)
    row.invalid, row.n_instrs = prog.invalid, len(prog.instrs)
    if outcome.passed or is_write_failure(outcome.reason):
        bundle_mod.remove_tree(run_dir)     # a write failure: nothing to look at, rerun on resume
    else:
        set_phase("bundle")
        _bundle(spec, campaign_id, prog, outcome, run_dir, row, set_phase)
        if "minimize_t0" in step:     # the report keeps minimisation out of the throughput
            row.timings["minimize"] = round(time.monotonic() - step["minimize_t0"], 4)
    row.wall_s = time.monotonic() - t0
    return row


def _bundle(spec, campaign_id, prog, outcome, run_dir: Path, row: ProgramRow, phase) -> None:
    """Bundle a failing program into ``row.bundle``. If the bundle cannot be written (disk full,
    size limit) the row becomes a write failure (rerun on resume); another exception is noted in
    the row's divergence."""
    try:
        row.bundle = str(bundle_mod.write_bundle(spec, campaign_id, prog, outcome, run_dir, phase=phase))
    except Exception as e:
        bundle_mod.remove_tree(run_dir)
        why = write_failure(e, bundle_mod.bundle_dir(spec, campaign_id, prog.seed).parent, "bundle")
        if why is None:
            row.divergence += f"\n(bundle not written: {type(e).__name__}: {e})"
            return
        row.divergence = (f"{why}\n(the bundle of this {outcome.status}ed program could not be "
                          f"written; it runs again when the campaign resumes; it was: "
                          f"{outcome.reason})\n" + row.divergence)
        row.status, row.reason, row.signal = "error", why, None


def _crash_bundle(spec, campaign_id: str, seed: int, row: ProgramRow) -> None:
    try:
        row.bundle = bundle_mod.write_crash_bundle(spec, campaign_id, seed, row.reason, row.divergence)
    except Exception as e:  # the bundle is a convenience; the row must be recorded regardless
        row.divergence += f"\n(bundle not written: {type(e).__name__}: {e})"


def _die_with_parent(parent_pid: int) -> None:
    """PR_SET_PDEATHSIG(SIGTERM); SIGTERM kills this worker's whole process group."""
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(os.getpgrp(), signal.SIGKILL))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:                   # the parent died before prctl
        os.killpg(os.getpgrp(), signal.SIGKILL)


def _worker_main(conn, spec_dict: dict, campaign_id: str, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is the parent's business
    os.setsid()
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
        row = execute_program(spec, campaign_id, idx, seed,
                              phase=lambda p, i=idx: conn.send(("phase", i, p)))
        conn.send(("done", idx, asdict(row)))


# ----------------------------------------------------------------------------- parent side
@dataclass
class _Worker:
    proc: mp.Process
    conn: object
    idx: int | None = None
    seed: int | None = None
    started: float = 0.0
    deadline: float = 0.0
    phase: str = ""


@dataclass
class CampaignStats:
    """What one ``run_campaign`` call did (the database holds the whole campaign)."""
    campaign_id: str
    requested: int
    skipped_done: int = 0
    finished: int = 0
    passed: int = 0
    failed: int = 0
    stopped_early: bool = False
    interrupted: bool = False
    wall_s: float = 0.0
    rows: list = field(default_factory=list)


class Pool:
    """``jobs`` spawn workers; ``submit``/``poll`` with per-program deadlines."""

    def __init__(self, spec: RunSpec, campaign_id: str, jobs: int):
        self.spec, self.campaign_id = spec, campaign_id
        self.ctx = mp.get_context("spawn")
        self.workers = [self._start() for _ in range(jobs)]

    def _start(self) -> _Worker:
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker_main, daemon=True,
                             args=(child, asdict(self.spec), self.campaign_id, os.getpid()))
        # a Ctrl-C while the worker starts (before its setsid) must not reach it: an ignored
        # SIGINT is inherited through exec, and Python then keeps ignoring it
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            p.start()
        finally:
            if main:
                signal.signal(signal.SIGINT, old)
        child.close()
        return _Worker(p, parent)

    def idle(self) -> list[_Worker]:
        return [w for w in self.workers if w.idx is None]

    def busy(self) -> list[_Worker]:
        return [w for w in self.workers if w.idx is not None]

    def submit(self, w: _Worker, idx: int, seed: int) -> None:
        now = time.monotonic()
        w.idx, w.seed, w.started, w.deadline, w.phase = idx, seed, now, now + self.spec.timeout_s, "start"
        w.conn.send((idx, seed))

    def _kill(self, w: _Worker) -> None:
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(5)
        w.conn.close()

    def _replace(self, w: _Worker) -> None:
        self._kill(w)
        self.workers[self.workers.index(w)] = self._start()

    def poll(self, timeout_s: float = 0.25) -> list[tuple[int, int, dict | None, tuple | None]]:
        """Finished programs: [(idx, seed, row dict or None, (reason, detail) if the worker was
        lost: "timeout in <step>" / "worker died in <step>")]."""
        busy = self.busy()
        if not busy:
            return []
        objs = [w.conn for w in busy] + [w.proc.sentinel for w in busy]
        ready = set(mp_wait(objs, timeout_s))
        out = []
        for w in busy:
            lost = None
            if w.conn in ready:
                try:
                    while w.conn.poll():
                        msg = w.conn.recv()
                        if msg[0] == "phase":
                            w.phase = msg[2]
                            if msg[2] == "minimize":      # the minimiser has its own budget
                                w.deadline = time.monotonic() + self.spec.timeout_s + self.spec.minimize_budget_s
                        elif msg[0] == "done":
                            out.append((w.idx, w.seed, msg[2], None))
                            w.idx = None
                            break
                except (EOFError, OSError):
                    lost = (f"worker died in {w.phase}", f"exit code {w.proc.exitcode}")
            if w.idx is None:
                continue
            if lost is None and w.proc.sentinel in ready and not w.proc.is_alive():
                lost = (f"worker died in {w.phase}", f"exit code {w.proc.exitcode}")
            if lost is None and time.monotonic() > w.deadline:
                lost = (f"timeout in {w.phase}", f"killed after {time.monotonic() - w.started:.1f} s "
                        f"(--timeout {self.spec.timeout_s:g} s)")
            if lost is not None:
                out.append((w.idx, w.seed, None, lost))
                w.idx = None
                self._replace(w)
        return out

    def close(self) -> None:
        for w in self.workers:
            if w.idx is None and w.proc.is_alive():
                try:
                    w.conn.send(None)
                except OSError:
                    pass
        for w in self.workers:
            if w.idx is not None:
                self._kill(w)
            else:
                w.proc.join(2)
                if w.proc.is_alive():
                    self._kill(w)


def _lost_row(spec: RunSpec, campaign_id: str, idx: int, seed: int, lost: tuple) -> ProgramRow:
    why, detail = lost
    row = ProgramRow(idx=idx, seed=seed, hw=spec.hw, bug=spec.bug, status="error", reason=why,
                     divergence=f"{why} ({detail}): the program did not finish; replay it to see "
                                "where it hangs or crashes")
    try:
        row.bundle = bundle_mod.write_crash_bundle(spec, campaign_id, seed, why, row.divergence)
    except Exception as e:  # the bundle is a convenience; the row must be recorded regardless
        row.divergence += f"\n(bundle not written: {type(e).__name__}: {e})"
    return row


def prepare(spec: RunSpec) -> str:
    """Load the config, build the RTL (once, before the workers start: not inside any program's
    timeout), return the config's digest. TpuError for a bad --hw / --bug."""
    cfg = load_config(spec.hw)
    if spec.rtl:
        prebuild(cfg, spec.bugs, spec.waves)
    return hashlib.sha256(cfg.hash_bytes()).hexdigest()[:16]


def pending_indices(count: int, done: set[int]) -> Iterator[int]:
    """Indices ``0..count-1`` not in ``done``, generated lazily (memory independent of count)."""
    return (i for i in range(count) if i not in done)


def run_campaign(spec: RunSpec, count: int, jobs: int, db: ResultsDb, stop_after_fails: int | None = None,
                 progress: bool = True, cfg_digest: str | None = None, on_row=None) -> CampaignStats:
    """Run programs ``0..count-1`` of the campaign not yet in ``db``; returns the stats.

    KeyboardInterrupt is propagated after the workers are killed (finished programs are in the
    database; programs in flight are redone by the next run)."""
    cfg_digest = cfg_digest or prepare(spec)
    cid = db.ensure_campaign(spec.campaign(cfg_digest))
    if not 1 <= count <= MAX_COUNT:
        raise CampaignError(f"--count must be between 1 and {MAX_COUNT}, got {count}")
    done = db.done_indices(cid)
    n_done = sum(1 for i in done if i < count)
    n_todo = count - n_done
    todo = pending_indices(count, done)
    st = CampaignStats(cid, count, skipped_done=n_done)
    fails_before = sum(1 for r in db.programs(cid) if r["status"] != "pass" and r["idx"] in done) \
        if stop_after_fails else 0
    if not n_todo or (stop_after_fails and fails_before >= stop_after_fails):
        st.stopped_early = bool(n_todo)
        return st
    session = db.start_session(cid, jobs)
    t0 = time.monotonic()
    bar = _Progress(progress, count, st.skipped_done, cid)
    pool = Pool(spec, cid, min(jobs, n_todo))
    nxt = next(todo, None)
    try:
        while nxt is not None or pool.busy():
            for w in pool.idle():
                if nxt is not None and not st.stopped_early:
                    pool.submit(w, nxt, derive_seed(spec.root_seed, nxt))
                    nxt = next(todo, None)
            if not pool.busy():
                break
            for idx, seed, rowd, lost in pool.poll():
                row = ProgramRow(**rowd) if rowd is not None else _lost_row(spec, cid, idx, seed, lost)
                db.record(cid, session, row)
                st.finished += 1
                st.passed += row.status == "pass"
                st.failed += row.status != "pass"
                st.rows.append(row)
                bar.advance(row)
                if on_row is not None:
                    on_row(row)
                if stop_after_fails and fails_before + st.failed >= stop_after_fails:
                    st.stopped_early = True
                    nxt = None
            if st.stopped_early and pool.busy() and nxt is None:
                break           # the programs in flight are not needed: stop now
    except KeyboardInterrupt:
        st.interrupted = True
        raise
    finally:
        pool.close()
        bar.close()
        st.wall_s = time.monotonic() - t0
        _remove_if_empty(Path(spec.work_root) / cid)
    return st


def _remove_if_empty(d: Path) -> None:
    try:
        d.rmdir()                  # only succeeds when no program left files behind
        d.parent.rmdir()
    except OSError:
        pass


class _Progress:
    """rich progress bar on stderr (nothing when disabled)."""

    def __init__(self, enabled: bool, total: int, done: int, label: str):
        self.p = None
        self.fails = 0
        self.passes = 0
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("[green]{task.fields[passes]} pass[/green] "
                                     "[red]{task.fields[fails]} fail[/red]"),
                          TimeElapsedColumn(), TimeRemainingColumn(),
                          console=Console(stderr=True, soft_wrap=True))   # no wrap: paths copyable
        self.p.start()
        self.task = self.p.add_task(label, total=total, completed=done, passes=0, fails=0)

    def advance(self, row: ProgramRow) -> None:
        if row.status == "pass":
            self.passes += 1
        else:
            self.fails += 1
        if self.p is not None:
            self.p.update(self.task, advance=1, passes=self.passes, fails=self.fails)
            if row.status != "pass":
                from rich.markup import escape
                self.p.console.print(f"[red]{row.status}[/red] program {row.idx} seed {row.seed}: "
                                     + escape(f"{row.reason}" + (f" ({row.bundle})" if row.bundle else "")),
                                     highlight=False)

    def close(self) -> None:
        if self.p is not None:
            self.p.stop()


__all__ = ["derive_seed", "RunSpec", "run_campaign", "execute_program", "replay_command",
           "prepare", "CampaignStats", "pending_indices", "CampaignError", "DEFAULT_INVALID_RATE", "MAX_COUNT", "MAX_SEED",
           "DEFAULT_TIMEOUT_S", "DEFAULT_MINIMIZE_BUDGET_S"]
