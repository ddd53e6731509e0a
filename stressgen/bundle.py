"""Failure bundles: one folder per failing program, everything needed to look at it and replay it.

``<bundle_root>/<campaign id>/<seed>/``:

  program.asm, program.tpubin  the program (and any data files the program writes beside them)
  seed.txt                     seed, hw, bug, invalid rate / class, campaign
  replay.sh                    the exact command that replays the program from its seed
  model.vcd, rtl.vcd           the SimPy and RTL architectural waveforms
  merged.vcd, triage.gtkw      both sides in one file, GTKWave view with the divergence marked
  divergence.txt               the first-divergence report of every failed check
  verdict.json                 the runner's Outcome (status, reason, signal, timings, details)
  min/                         the minimised reproducer: program.asm, program.tpubin,
                               divergence.txt, verdict.json, sizes.json (before / after), replay.sh,
                               and its model.vcd, rtl.vcd, merged.vcd, triage.gtkw

The folder is assembled under a temporary name and renamed into place, so a bundle is either
complete or absent (a previous bundle of the same seed is replaced).

A Dask worker (stressgen.worker) writes the bundle in its own scratch folder and ships it to the
campaign's client as bytes (``pack_bundle``: a gzip'd tar); the client publishes it in its bundle
folder (``unpack_bundle``: the same temporary name and rename, tar "data" filter, the triage
view's paths and the replay scripts rewritten for the client's folder, repository and Python).
"""
from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from stressgen.gen import generate
from stressgen.minimize import MinimizeError, minimize
from stressgen.runner import run_one
from stressgen.spec import replay_command
from tpusim.arch.config import load_config
from tpusim.arch.fileio import write_text_atomic

REPO = Path(__file__).resolve().parent.parent
_VCDS = {"model_vcd": "model.vcd", "rtl_vcd": "rtl.vcd", "merged_vcd": "merged.vcd"}


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def bundle_dir(spec, campaign_id: str, seed: int) -> Path:
    return Path(spec.bundle_root) / campaign_id / str(seed)


class BundleFile(str):
    """An argument of ``replay_script`` naming a file beside the script (the bundle may move)."""


def replay_script(argv: list[str]) -> str:
    """A POSIX shell script running ``python -m stressgen <argv>`` from the repository; a
    ``BundleFile`` argument is found through the script's own folder, so a moved or copied bundle
    still replays."""
    def arg(a: str) -> str:
        return f'"$here"/{shlex.quote(a)}' if isinstance(a, BundleFile) else shlex.quote(a)
    cmd = " ".join(arg(a) for a in [sys.executable, "-m", "stressgen", *argv])
    return ("#!/bin/sh\n# replay this program alone (extra arguments are passed on, e.g. --out DIR)\n"
            'here=$(cd "$(dirname "$0")" && pwd) || exit 1\n'
            f"cd {shlex.quote(str(REPO))} && exec {cmd} \"$@\"\n")


def _write_script(path: Path, text: str) -> None:
    write_text_atomic(path, text)
    path.chmod(0o755)


def _seed_text(spec, campaign_id: str, seed: int, invalid: str | None) -> str:
    return (f"seed {seed}\nhw {spec.hw}\nbug {spec.bug or '-'}\ninvalid_rate {spec.invalid_rate}\n"
            f"invalid_class {invalid or '-'}\nrtl {spec.rtl}\ncampaign {campaign_id}\n")


def _copy_program_files(src: Path, dst: Path) -> None:
    for f in src.iterdir():
        if f.is_file() and f.name.startswith("program."):
            shutil.copy2(f, dst / f.name)


def _copy_waves(outcome, run_dir: Path, dst: Path) -> None:
    files = dict(outcome.files)
    files.setdefault("model_vcd", str(run_dir / "model.vcd"))
    for role, name in _VCDS.items():
        p = Path(files[role]) if files.get(role) else None
        if p is not None and p.exists():
            shutil.copy2(p, dst / name)
    g = Path(files["gtkw"]) if files.get("gtkw") else None
    if g is not None and g.exists():
        text = g.read_text()
        merged = files.get("merged_vcd")
        final = bundle_final_path(dst)                                 # the name after the rename
        if merged:
            text = text.replace(str(Path(merged)), str(final / "merged.vcd"))
        text = text.replace(str(g), str(final / "triage.gtkw"))
        write_text_atomic(dst / "triage.gtkw", text)


def _publish(tmp: Path, final: Path) -> Path:
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def _tmp_for(final: Path) -> Path:
    """A fresh temporary folder beside ``final``; the ones a killed writer of the same bundle
    left behind are removed first (one writer per seed: the campaign's claims)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}.tmp*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp", dir=final.parent))
    tmp.chmod(0o755)                       # mkdtemp makes it private; a bundle is for everyone
    return tmp


def write_bundle(spec, campaign_id: str, prog, outcome, run_dir: Path, phase=lambda p: None,
                 minimize: bool | None = None) -> Path:
    """Write the bundle of a failing program from its run folder (then removed); minimise it
    first when ``spec.minimize`` (and the failure is a check failure, not a tool error)."""
    final = bundle_dir(spec, campaign_id, prog.seed)
    tmp = _tmp_for(final)
    try:
        _copy_program_files(run_dir, tmp)
        write_text_atomic(tmp / "seed.txt", _seed_text(spec, campaign_id, prog.seed, prog.invalid))
        _write_script(tmp / "replay.sh", replay_script(replay_command(spec, prog.seed)))
        _copy_waves(outcome, run_dir, tmp)
        write_text_atomic(tmp / "divergence.txt", outcome.first_divergence + "\n")
        verdict = {"seed": prog.seed, "hw": spec.hw, "bug": spec.bug, "campaign": campaign_id,
                   "invalid": prog.invalid, "n_instrs": len(prog.instrs), **outcome.to_json()}
        write_text_atomic(tmp / "verdict.json", json.dumps(verdict, indent=1, default=str))
        do_min = spec.minimize if minimize is None else minimize
        if do_min and outcome.status == "fail" and not prog.invalid:
            phase("minimize")
            write_min(spec, prog, outcome, tmp / "min", run_dir.parent / f"{prog.seed}.min")
        return _publish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        remove_tree(run_dir)


def write_min(spec, prog, outcome, dst: Path, scratch: Path) -> None:
    """Minimise ``prog`` keeping ``outcome.signature``; write min/ (see the module docstring)."""
    cfg = load_config(spec.hw)
    dst.mkdir(parents=True, exist_ok=True)
    count = {"n": 0}

    def predicate(candidate):
        count["n"] += 1
        d = scratch / f"c{count['n']}"
        try:
            return run_one(candidate, cfg, d, rtl=spec.rtl, bugs=spec.bugs, waves=spec.waves).signature
        finally:
            remove_tree(d)

    try:
        res = minimize(prog, cfg, predicate, budget_s=spec.minimize_budget_s)
    except MinimizeError as e:   # e.g. a failure that does not reproduce (flaky): say so
        write_text_atomic(dst / "divergence.txt", f"not minimised: {e}\n")
        return
    final = run_one(res.prog, cfg, scratch / "final", rtl=spec.rtl, bugs=spec.bugs, waves=spec.waves)
    _copy_program_files(scratch / "final", dst)
    _copy_waves(final, scratch / "final", dst)
    sizes = res.to_json()
    write_text_atomic(dst / "sizes.json", json.dumps(sizes, indent=1))
    head = (f"minimised: {res.before.instrs} -> {res.after.instrs} instructions, "
            f"{res.before.work_units} -> {res.after.work_units} work units "
            f"({res.tests} runs, {res.seconds:.1f} s{', budget exhausted' if res.budget_exhausted else ''})\n"
            f"failure kept: {res.signature}; minimised program's verdict: {final.signature}\n")
    write_text_atomic(dst / "divergence.txt", head + final.first_divergence + "\n")
    write_text_atomic(dst / "verdict.json", json.dumps(final.to_json(), indent=1, default=str))
    _write_script(dst / "replay.sh", replay_script(_min_replay_argv(spec)))
    remove_tree(scratch)


def _min_replay_argv(spec) -> list[str]:
    """min/replay.sh's command: the minimised program.asm found beside the script."""
    argv = ["replay", "--asm", BundleFile("program.asm"), "--hw", spec.hw]
    if spec.bug:
        argv += ["--bug", spec.bug]
    if not spec.rtl:
        argv += ["--no-rtl"]
    return argv


def bundle_final_path(p: Path) -> Path:
    """``p`` inside a bundle being assembled, as it will be named after the rename."""
    parts = list(p.parts)
    for i, part in enumerate(parts):
        if part.startswith(".") and ".tmp" in part:
            parts[i] = part[1:].split(".tmp")[0]
    return Path(*parts)


def write_crash_bundle(spec, campaign_id: str, seed: int, reason: str, text: str) -> str | None:
    """Bundle of a program that never finished (timeout, dead worker, tool exception): the
    regenerated program (if the generator works), seed.txt, replay.sh, divergence.txt."""
    final = bundle_dir(spec, campaign_id, seed)
    tmp = _tmp_for(final)
    invalid = None
    try:
        try:
            cfg = load_config(spec.hw)
            prog = generate(seed, cfg, invalid_rate=spec.invalid_rate)
            invalid = prog.invalid
            write_text_atomic(tmp / "program.asm", prog.asm())
            prog.to_binary(cfg).write(tmp / "program.tpubin")
        except Exception as e:
            text += f"\n(program not regenerated: {type(e).__name__}: {e})"
        write_text_atomic(tmp / "seed.txt", _seed_text(spec, campaign_id, seed, invalid))
        _write_script(tmp / "replay.sh", replay_script(replay_command(spec, seed)))
        write_text_atomic(tmp / "divergence.txt", f"{reason}\n{text}\n")
        write_text_atomic(tmp / "verdict.json", json.dumps(
            {"seed": seed, "hw": spec.hw, "bug": spec.bug, "campaign": campaign_id, "status": "error",
             "reason": reason, "passed": False}, indent=1))
        return str(_publish(tmp, final))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def pack_bundle(path: str | Path) -> bytes:
    """The bundle folder ``path`` as a gzip'd tar (members relative to the folder)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as t:
        t.add(str(path), arcname=".")
    return buf.getvalue()


def unpack_bundle(data: bytes, spec, campaign_id: str, seed: int, was: str) -> Path:
    """Publish at ``bundle_dir(spec, campaign_id, seed)`` the bundle ``pack_bundle`` made of the
    folder ``was`` (on a worker): extracted under a temporary name (tar "data" filter: nothing
    outside the folder, no device, no set-uid), ``was`` replaced by the final path in the triage
    view, the replay scripts written for this machine, then renamed into place. The temporary
    folder is removed on any error (OSError of a full disk, tarfile.TarError)."""
    final = bundle_dir(spec, campaign_id, seed)
    tmp = _tmp_for(final)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
            t.extractall(tmp, filter="data")
        tmp.chmod(0o755)
        for g in (tmp / "triage.gtkw", tmp / "min" / "triage.gtkw"):
            if g.exists():
                write_text_atomic(g, g.read_text().replace(str(was), str(final)))
        _write_script(tmp / "replay.sh", replay_script(replay_command(spec, seed)))
        if (tmp / "min" / "program.asm").exists():
            _write_script(tmp / "min" / "replay.sh", replay_script(_min_replay_argv(spec)))
        return _publish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


__all__ = ["write_bundle", "pack_bundle", "unpack_bundle", "write_crash_bundle", "write_min", "bundle_dir",
           "replay_script", "BundleFile", "remove_tree"]
