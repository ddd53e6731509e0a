"""One program of a campaign, start to row: ``execute_program`` generates, runs and judges it and
bundles it if it fails; ``lost_row`` is the row of a program that never finished (timeout, dead
worker). Called inside the per-program child process (stressgen.child) on a Dask worker.

A program's files go to ``<spec.work_root>/<campaign id>/<seed>/`` (removed when it ends) and its
bundle to ``<spec.bundle_root>/<campaign id>/<seed>/`` (stressgen.bundle).
"""
from __future__ import annotations

import time
import traceback
from pathlib import Path

from stressgen import bundle as bundle_mod
from stressgen.db import ProgramRow
from stressgen.runner import run_spec_program
from stressgen.spec import RunSpec
from stressgen.writefail import is_write_failure, write_failure


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


def lost_row(spec: RunSpec, campaign_id: str, idx: int, seed: int, why: str, detail: str) -> ProgramRow:
    """Row (status "error", reason ``why``, e.g. "timeout in rtl") and crash bundle of a program
    that did not finish."""
    row = ProgramRow(idx=idx, seed=seed, hw=spec.hw, bug=spec.bug, status="error", reason=why,
                     divergence=f"{why} ({detail}): the program did not finish; replay it to see "
                                "where it hangs or crashes")
    _crash_bundle(spec, campaign_id, seed, row)
    return row


__all__ = ["execute_program", "lost_row"]
