"""A stress campaign: N generated programs run as Dask tasks, results in the database.

Seeds: program ``i`` of the campaign with root seed ``S`` has seed ``derive_seed(S, i)`` =
the first 8 bytes (little endian) of SHA-256 of the ASCII text ``"tpusim-stress:<S>:<i>"``,
shifted right by one bit (a 63-bit integer, so it fits SQLite's INTEGER). ``python -m stressgen
replay --seed P`` regenerates the program from ``P`` alone (plus --hw and --invalid-rate).

Processes: the campaign's process is the Dask client (stressgen.cluster: a LocalCluster of
``jobs`` single-thread worker processes on 127.0.0.1 by default, or the cluster at
``--scheduler``). It is the only writer of the database (one transaction per finished program)
and submits one task per program: ``stressgen.worker.run_program(spec fields, campaign id,
index, seed, config digest)``, plain data, about two per worker thread at a time (PER_THREAD). On the
worker the program runs in a child process with the per-program timeout (stressgen.child: its
own process group, killed with it at the deadline, dies with the worker); a program that times
out or whose child dies is recorded as status "error" (reason "timeout in <step>" / "worker
died in <step>") with a crash bundle. Bundles come back as bytes and are published in the
client's bundle folder (stressgen.bundle.unpack_bundle): workers need no shared file system.

A Dask worker that dies (killed, out of memory, its machine lost) is not a program failure:
Dask runs its task again on another worker, and the client records whatever result comes
back, once. A program that kills its worker every time ends as Dask's KilledWorker (after
``distributed.scheduler.allowed-failures`` tries, default 3) and is recorded as "worker died in
dask: ..." with a crash bundle. The campaign never hangs on a program.

Two campaigns on one database: each ``run_campaign`` is an ``Owner`` and claims a program in the
database before submitting it (stressgen.db: claims with a lease of ``LEASE_S`` renewed every
``RENEW_S`` while the campaign runs). A program with a row or another live owner's claim is
skipped, the skipped claims are looked at again when the rest is done, so two runs of the same
command split the work and each finishes only when every program has its row; no seed runs
twice. The claims of a campaign that stops are dropped; those of one killed with SIGKILL are
free at once on the same host (its pid is gone) and after the lease elsewhere.

Resume: the campaign's identity (``db.Campaign``: root seed, hw, bug, invalid rate, rtl) is
its database key; a restart runs only the indices in ``range(count)`` without a row, or whose
row says its files could not be written (status "error", reason ``cannot write <file>: ...``,
stressgen.writefail: disk full, file-size limit); that program gets no bundle (its run folder
is removed) and its row is replaced by the rerun's.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from distributed import Client, KilledWorker, wait
from distributed.client import FutureCancelledError, FuturesCancelledError

from stressgen import bundle as bundle_mod
from stressgen.cluster import ClusterSpec, connect, worker_count
from stressgen.db import Owner, ProgramRow, ResultsDb
from stressgen.execute import execute_program, lost_row
from stressgen.runner import prebuild
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
from stressgen.worker import config_digest, run_program
from stressgen.writefail import write_failure
from tpusim.arch.config import load_config
from tpusim.arch.errors import TpuError

#: a claim's lease (s) and how often the campaign renews it (s)
LEASE_S = 120.0
RENEW_S = 10.0
#: programs in flight: PER_THREAD per worker thread (one running, one queued), at least
#: MIN_INFLIGHT; topped up (claims in one transaction) when half of them have finished
PER_THREAD = 2
MIN_INFLIGHT = 4


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


def prepare(spec: RunSpec, build: bool = True) -> str:
    """Load the config, build the RTL (``build``: once, before the workers start, not inside any
    program's timeout; the local workers then reuse it), return the config's digest. TpuError
    for a bad --hw / --bug."""
    cfg = load_config(spec.hw)
    if spec.rtl and build:
        prebuild(cfg, spec.bugs, spec.waves)
    return config_digest(spec.hw)


def pending_indices(count: int, done: set[int]) -> Iterator[int]:
    """Indices ``0..count-1`` not in ``done``, generated lazily (memory independent of count)."""
    return (i for i in range(count) if i not in done)


class _Claims:
    """The programs this campaign may run, claimed from the database a few at a time."""

    def __init__(self, db: ResultsDb, cid: str, owner: Owner, todo: Iterator[int]):
        self.db, self.cid, self.owner, self.todo = db, cid, owner, todo
        self.busy: list[int] = []              # claimed by another live campaign: look again later
        self.ended = False                     # ``todo`` exhausted
        self.retry_at = 0.0

    @property
    def exhausted(self) -> bool:
        return self.ended and not self.busy

    def take(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n and not self.ended:
            batch = list(itertools.islice(self.todo, n - len(out)))
            self.ended = len(batch) < n - len(out)
            got, busy = self.db.claim(self.cid, self.owner, batch, LEASE_S)
            out += got
            self.busy += busy
        if len(out) < n and self.ended and self.busy and time.monotonic() >= self.retry_at:
            again, self.busy = self.busy, []
            got, self.busy = self.db.claim(self.cid, self.owner, again, LEASE_S)
            out += got
            self.retry_at = time.monotonic() + 1.0
        return out


def run_campaign(spec: RunSpec, count: int, jobs: int, db: ResultsDb, stop_after_fails: int | None = None,
                 progress: bool = True, cfg_digest: str | None = None, on_row=None,
                 cluster: ClusterSpec | None = None, client: Client | None = None) -> CampaignStats:
    """Run programs ``0..count-1`` of the campaign not yet in ``db``; returns the stats.

    Runs on ``client`` if given, else on ``cluster`` (default: a local cluster of ``jobs``
    workers, started and stopped here). KeyboardInterrupt is propagated after the programs in
    flight are cancelled and their claims dropped (finished programs are in the database;
    the others are redone by the next run). CampaignError for a bad count, a cluster that cannot
    be reached or a worker that runs another config."""
    cfg_digest = cfg_digest or prepare(spec)
    cid = db.ensure_campaign(spec.campaign(cfg_digest))
    if not 1 <= count <= MAX_COUNT:
        raise CampaignError(f"--count must be between 1 and {MAX_COUNT}, got {count}")
    done = db.done_indices(cid)
    n_done = sum(1 for i in done if i < count)
    st = CampaignStats(cid, count, skipped_done=n_done)
    fails_before = sum(1 for r in db.programs(cid) if r["status"] != "pass" and r["idx"] in done) \
        if stop_after_fails else 0
    if n_done == count or (stop_after_fails and fails_before >= stop_after_fails):
        st.stopped_early = n_done < count
        return st
    t0 = time.monotonic()
    owner = Owner.me()
    claims = _Claims(db, cid, owner, pending_indices(count, done))
    given = contextlib.nullcontext(client) if client is not None else None
    try:
        with given or connect(cluster or ClusterSpec(jobs=jobs), spec.work_root) as c:
            bar = _Progress(progress, count, n_done, cid)          # once the cluster is there
            try:
                _drive(spec, cid, cfg_digest, db, c, claims, st, bar, stop_after_fails, fails_before, on_row)
            finally:
                bar.close()
    except KeyboardInterrupt:
        st.interrupted = True
        raise
    finally:
        db.release(owner)
        st.wall_s = time.monotonic() - t0
        _remove_if_empty(Path(spec.work_root))
    return st


def _drive(spec, cid, cfg_digest, db, client, claims: _Claims, st: CampaignStats, bar, stop_after_fails,
           fails_before: int, on_row) -> None:
    """Submit claimed programs, record their results, until none is left (or enough failed)."""
    n_workers = worker_count(client)
    session = db.start_session(cid, n_workers)
    if n_workers == 0:
        print(f"stressgen: the Dask cluster at {client.scheduler.address} has no worker yet: waiting for one "
              "(Ctrl-C to stop)", file=sys.stderr)
    fields = asdict(spec)
    inflight: dict = {}
    slots, renewed = max(1, n_workers), time.monotonic()
    try:
        while True:
            if time.monotonic() - renewed > RENEW_S:
                db.renew(claims.owner, LEASE_S)
                slots, renewed = max(1, worker_count(client)), time.monotonic()
            target = max(MIN_INFLIGHT, PER_THREAD * slots)
            if not st.stopped_early and len(inflight) <= target // 2:
                for idx in claims.take(target - len(inflight)):
                    seed = derive_seed(spec.root_seed, idx)
                    f = client.submit(run_program, fields, cid, idx, seed, cfg_digest, pure=False,
                                      key=f"stress-{cid}-{idx}-{claims.owner.token[:12]}")
                    inflight[f] = (idx, seed)
            if not inflight:
                if claims.exhausted or st.stopped_early:
                    return
                time.sleep(0.5)                # the rest is claimed by another live campaign
                continue
            try:
                finished, _ = wait(list(inflight), timeout=1.0, return_when="FIRST_COMPLETED")
            except TimeoutError:               # distributed.wait raises when nothing finished
                continue
            except (FutureCancelledError, FuturesCancelledError) as e:
                raise _cancelled(e) from None
            for f in finished:
                idx, seed = inflight.pop(f)
                row = _result_row(spec, cid, f, idx, seed)
                f.release()
                if not db.record(cid, session, row, claims.owner):
                    continue                   # recorded by another campaign meanwhile
                st.finished += 1
                st.passed += row.status == "pass"
                st.failed += row.status != "pass"
                st.rows.append(row)
                bar.advance(row)
                if on_row is not None:
                    on_row(row)
                if stop_after_fails and fails_before + st.failed >= stop_after_fails:
                    st.stopped_early = True
            if st.stopped_early and inflight:
                return                         # the programs in flight are not needed: stop now
    finally:
        for f in inflight:
            f.cancel()


def _cancelled(e: BaseException) -> CampaignError:
    """The cluster dropped the tasks (scheduler lost or restarted): not the programs' doing."""
    groups = getattr(e, "error_groups", None)
    reasons = sorted({g.reason for g in groups}) if groups else [getattr(e, "reason", "unknown")]
    return CampaignError(f"the Dask cluster cancelled the programs in flight ({', '.join(reasons)}): the "
                         "finished programs are recorded, run the same command again to resume")


def _result_row(spec: RunSpec, cid: str, f, idx: int, seed: int) -> ProgramRow:
    """The row of a finished task, its bundle published here; CampaignError (a TpuError) of a
    worker that cannot run the campaign is raised."""
    try:
        res = f.result()
    except TpuError:
        raise
    except FutureCancelledError as e:
        raise _cancelled(e) from None
    except KilledWorker as e:
        return lost_row(spec, cid, idx, seed, "worker died in dask", f"KilledWorker: {e}")
    except Exception as e:
        return lost_row(spec, cid, idx, seed, f"exception in dask task: {type(e).__name__}", str(e)[:2000])
    row = ProgramRow(**res["row"])
    row.bundle = None
    if res["bundle"] is not None:
        try:
            row.bundle = str(bundle_mod.unpack_bundle(res["bundle"], spec, cid, seed, res["bundle_was"]))
        except Exception as e:
            why = write_failure(e, bundle_mod.bundle_dir(spec, cid, seed).parent, "bundle")
            if why is None:
                row.divergence += f"\n(bundle not published: {type(e).__name__}: {e})"
            else:
                row.divergence = f"{why}\n(the bundle could not be published; it runs again when the " \
                                 f"campaign resumes; it was: {row.reason})\n" + row.divergence
                row.status, row.reason, row.signal = "error", why, None
    return row


def _remove_if_empty(d: Path) -> None:
    """Remove the work folder if only empty folders are left in it (Dask's scratch space)."""
    try:
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            sub.rmdir()
        d.rmdir()
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
           "prepare", "CampaignStats", "pending_indices", "CampaignError", "DEFAULT_INVALID_RATE", "MAX_COUNT",
           "MAX_SEED", "DEFAULT_TIMEOUT_S", "DEFAULT_MINIMIZE_BUDGET_S", "ClusterSpec", "LEASE_S"]
