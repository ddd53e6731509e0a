"""The Dask task of a stress campaign: ``run_program`` runs one program on a worker.

It is a fixed, importable function of stressgen taking plain data only (the ``RunSpec`` fields
as a dict of str / int / float / bool / None, the campaign id, the program index and seed, the
client's config digest) and returning plain data (the row as a dict, the bundle as tar bytes).
Nothing it runs comes from the results database or a bundle: no pickle is ever read from
either. (Dask itself executes whatever function a connected client submits: who may connect to
the scheduler is a matter of the cluster's address and TLS settings, see stressgen.cluster.)

On the worker, once per worker process and (hw, bug, waves): the config is loaded and its
digest compared with the client's (CampaignError: the worker runs another checkout or config
file), and the Verilator model is built or reused (cocotb_tests.build caches it by source hash
under build/rtl, a file lock lets the workers of one machine share one build); this happens
before the program's timeout starts. The program then runs in the thread's
``stressgen.child.ProgramChild`` (timeout, process group, PR_SET_PDEATHSIG). Its run folder
and bundle go to the worker's scratch folder (Dask's ``local_directory``); the bundle comes back
as bytes and is removed there.
"""
from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import threading
from dataclasses import asdict, replace
from pathlib import Path

from distributed import get_worker

from stressgen import bundle as bundle_mod
from stressgen.child import ProgramChild
from stressgen.db import ProgramRow
from stressgen.execute import lost_row
from stressgen.runner import prebuild
from stressgen.spec import CampaignError, RunSpec
from tpusim.arch.config import load_config

_lock = threading.Lock()
_prepared: dict[tuple, str] = {}             # (hw, bugs, waves, rtl) -> config digest
_local = threading.local()                    # .child: this task thread's ProgramChild


def config_digest(hw: str) -> str:
    """SHA-256 (16 hex digits) of the hardware config's hash bytes: the campaign's identity."""
    return hashlib.sha256(load_config(hw).hash_bytes()).hexdigest()[:16]


def prepare_worker(spec: RunSpec, cfg_digest: str) -> None:
    """Load the config and build (or reuse) the RTL model, once per process and flavour;
    CampaignError if this worker's config digest is not the client's ``cfg_digest``."""
    key = (spec.hw, spec.bugs, spec.waves, spec.rtl)
    with _lock:
        if key not in _prepared:
            digest = config_digest(spec.hw)
            if digest == cfg_digest and spec.rtl:
                prebuild(load_config(spec.hw), spec.bugs, spec.waves)
            _prepared[key] = digest
    if _prepared[key] != cfg_digest:
        raise CampaignError(f"worker {socket.gethostname()} pid {os.getpid()}: config {spec.hw!r} has digest "
                            f"{_prepared[key]}, the campaign's client has {cfg_digest}: run the workers "
                            "from the same checkout (and --hw file) as the client")


def scratch_dir() -> Path:
    """The worker's scratch folder (Dask's local_directory; outside a worker: the temp dir)."""
    try:
        base = Path(get_worker().local_directory)
    except ValueError:                         # called directly, not as a Dask task
        base = Path(tempfile.gettempdir()) / f"tpusim-stress-{os.getuid()}"
    return base / "stress"


def _child(spec: RunSpec, campaign_id: str) -> ProgramChild:
    c = getattr(_local, "child", None)
    if c is None or c.spec != spec or c.campaign_id != campaign_id:
        if c is not None:
            c.close()
        c = _local.child = ProgramChild(spec, campaign_id)
    return c


def run_program(spec_fields: dict, campaign_id: str, idx: int, seed: int, cfg_digest: str) -> dict:
    """Run program ``idx`` (seed ``seed``) of the campaign: {"row": the ProgramRow as a dict,
    "bundle": pack_bundle bytes or None, "bundle_was": its folder on the worker, "worker":
    "host:pid"}. CampaignError for a worker that cannot run the campaign (other config)."""
    spec = RunSpec(**spec_fields)
    prepare_worker(spec, cfg_digest)
    scratch = scratch_dir()
    local = replace(spec, work_root=str(scratch / "work"), bundle_root=str(scratch / "bundles"))
    rowd, lost = _child(local, campaign_id).run(idx, seed)
    row = ProgramRow(**rowd) if rowd is not None else lost_row(local, campaign_id, idx, seed, *lost)
    out = {"row": asdict(row), "bundle": None, "bundle_was": row.bundle,
           "worker": f"{socket.gethostname()}:{os.getpid()}"}
    if row.bundle:
        try:
            out["bundle"] = bundle_mod.pack_bundle(row.bundle)
        finally:
            bundle_mod.remove_tree(Path(row.bundle))
    return out


__all__ = ["run_program", "prepare_worker", "config_digest", "scratch_dir"]
