"""What a campaign is: its parameters (``RunSpec``), the seed of each program and the command
that replays one program alone. Shared by the campaign runner (stressgen.campaign), the bundles
(stressgen.bundle) and the command line.

Seeds: program ``i`` of the campaign with root seed ``S`` has seed ``derive_seed(S, i)`` =
the first 8 bytes (little endian) of SHA-256 of the ASCII text ``"tpusim-stress:<S>:<i>"``,
shifted right by one bit (a 63-bit integer, so it fits SQLite's INTEGER).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from stressgen.db import Campaign
from tpusim.arch.errors import TpuError

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MINIMIZE_BUDGET_S = 300.0
#: --invalid-rate of `stressgen run` and `replay` (the same, so a seed replays with the defaults).
DEFAULT_INVALID_RATE = 0.05
#: Largest --count of one campaign (program indices are generated lazily, so memory does not grow
#: with it; the cap keeps the progress bar and the database's indices sane).
MAX_COUNT = 10**9
#: Seeds (root and program) are 63-bit: 0 <= seed < MAX_SEED (SQLite INTEGER).
MAX_SEED = 2**63


class CampaignError(TpuError):
    """A campaign parameter out of range (the message names the value)."""


def derive_seed(root_seed: int, index: int) -> int:
    """Seed of program ``index`` of the campaign with root seed ``root_seed`` (63-bit int)."""
    d = hashlib.sha256(f"tpusim-stress:{int(root_seed)}:{int(index)}".encode("ascii")).digest()
    return int.from_bytes(d[:8], "little") >> 1


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker needs (picklable). Paths are absolute strings."""
    hw: str
    root_seed: int
    rtl: bool = True
    bug: str | None = None
    invalid_rate: float = 0.0
    bundle_root: str = "stress_runs/bundles"
    work_root: str = "stress_runs/work"
    timeout_s: float = DEFAULT_TIMEOUT_S
    minimize: bool = True
    minimize_budget_s: float = DEFAULT_MINIMIZE_BUDGET_S
    waves: bool = True

    @property
    def bugs(self) -> tuple[str, ...]:
        return (self.bug,) if self.bug else ()

    def campaign(self, cfg_digest: str) -> Campaign:
        return Campaign(self.root_seed, self.hw, self.bug, float(self.invalid_rate), self.rtl,
                        json.dumps({"cfg_sha256": cfg_digest}))


def replay_command(spec: RunSpec, seed: int) -> list[str]:
    """The argv (after ``python -m stressgen``) that replays program ``seed`` alone."""
    cmd = ["replay", "--seed", str(seed), "--hw", spec.hw]
    if spec.bug:
        cmd += ["--bug", spec.bug]
    if spec.invalid_rate != DEFAULT_INVALID_RATE:
        cmd += ["--invalid-rate", repr(float(spec.invalid_rate))]
    if not spec.rtl:
        cmd += ["--no-rtl"]
    return cmd


# ----------------------------------------------------------------------------- worker side
