"""Campaign summary from the results database: ``python -m stressgen report --db FILE``.

Per campaign: programs run (pass / fail / error), failures grouped by reason, functional
coverage (every bin of ``stressgen.coverage.ALL_BINS`` with its hit count: the number of
programs that hit it and the total hits), throughput (programs per hour of one worker over the
programs' own run time, minimisation excluded, and mean seconds per program; the minimiser's
time on failing programs and the wall time of the ``run`` sessions shown apart), and the failing
seeds with their bundle folders.

Verdict: a campaign passes when every program passed and no bin it must hit stays empty
(``stressgen.coverage.required_bins``: the invalid-program bins only if it makes invalid ones).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from stressgen.coverage import ALL_BINS, required_bins
from stressgen.db import ResultsDb
from stressgen.program import config
from stressgen.writefail import is_write_failure
from tpusim.arch.errors import ConfigError


@dataclass
class CampaignSummary:
    campaign: str
    hw: str = ""
    bug: str | None = None
    rtl: bool = True
    programs: int = 0
    status: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)         # "status: reason" -> programs
    bin_programs: dict = field(default_factory=dict)          # bin -> programs hitting it
    bin_hits: dict = field(default_factory=dict)              # bin -> total hits
    bins_required: tuple = ALL_BINS                           # bins it must hit
    empty_bins: list = field(default_factory=list)            # of those, never hit
    extra_bins: list = field(default_factory=list)            # hit but not in ALL_BINS
    session_s: float = 0.0
    program_s: float = 0.0                                    # run time, minimisation excluded
    minimize_s: float = 0.0                                   # minimiser time (failing programs)
    minimized: int = 0                                        # programs minimised
    invalid: Counter = field(default_factory=Counter)         # invalid class -> programs
    failing: list = field(default_factory=list)               # rows of failing programs

    @property
    def programs_per_hour(self) -> float:
        """Programs per hour of one worker over the programs' run time (no minimisation)."""
        return self.programs / self.program_s * 3600 if self.program_s > 0 else 0.0

    @property
    def passed(self) -> bool:
        return self.programs > 0 and not self.failing and not self.empty_bins


def all_bins() -> tuple[str, ...]:
    return tuple(ALL_BINS)


def _config_or_none(hw: str):
    """The campaign's hardware config (its non-square bins are required), None if it no longer
    loads (a YAML path gone: only the square bins are then required)."""
    try:
        return config(hw)
    except ConfigError:
        return None


def summarize(db: ResultsDb, campaign_id: str | None = None) -> list[CampaignSummary]:
    """One CampaignSummary per campaign in ``db`` (or only ``campaign_id``)."""
    out = []
    for c in db.campaigns():
        if campaign_id and c["id"] != campaign_id:
            continue
        bins_required = required_bins(c["invalid_rate"], _config_or_none(c["hw"]))
        s = CampaignSummary(c["id"], c["hw"], c["bug"], bool(c["rtl"]), bins_required=bins_required)
        progs = db.programs(c["id"])
        bp, bh = Counter(), Counter()
        for r in progs:
            s.programs += 1
            s.status[r["status"]] += 1
            m = float((r["timings"] or {}).get("minimize", 0.0))
            s.program_s += max((r["wall_s"] or 0.0) - m, 0.0)
            s.minimize_s += m
            s.minimized += m > 0
            if r["invalid"]:
                s.invalid[r["invalid"]] += 1
            if r["status"] != "pass":
                s.reasons[f"{r['status']}: {r['reason']}"] += 1
                s.failing.append(r)
            for b, n in r["bins"].items():
                if n:
                    bp[b] += 1
                    bh[b] += n
        s.bin_programs, s.bin_hits = dict(bp), dict(bh)
        s.empty_bins = [b for b in bins_required if not bp.get(b)]
        s.extra_bins = sorted(set(bp) - set(bins_required))
        s.session_s = sum(max(x["last"] - x["started"], 0.0) for x in db.sessions(c["id"]))
        out.append(s)
    return out


def render(s: CampaignSummary, bins_required: tuple[str, ...] | None = None, max_failing: int = 50) -> str:
    """Plain-text report of one campaign."""
    bins_required = s.bins_required if bins_required is None else bins_required
    L = [f"campaign {s.campaign}  (hw {s.hw}, bug {s.bug or 'none'}, {'RTL' if s.rtl else 'SimPy only'})",
         f"programs: {s.programs}  pass {s.status['pass']}  fail {s.status['fail']}  "
         f"error {s.status['error']}"]
    if s.invalid:
        L.append("invalid programs: " + ", ".join(f"{k} {v}" for k, v in sorted(s.invalid.items())))
    if s.reasons:
        L.append("failures by reason:")
        L += [f"  {n:6d}  {r}" for r, n in s.reasons.most_common()]
    hit = len(bins_required) - len(s.empty_bins)
    L.append(f"coverage: {hit} of {len(bins_required)} bins hit"
             + (f"; EMPTY: {', '.join(s.empty_bins)}" if s.empty_bins else ""))
    w = max((len(b) for b in bins_required), default=10)
    for b in bins_required:
        L.append(f"  {b:<{w}}  {s.bin_programs.get(b, 0):7d} programs  {s.bin_hits.get(b, 0):9d} hits")
    other = [b for b in s.extra_bins if not b.startswith("path_")]
    paths = len(s.extra_bins) - len(other)
    if s.extra_bins:
        L.append("  (also hit, not required: " + ", ".join(other)
                 + (f"; {paths} checker paths, bins path_*" if paths else "") + ")")
    mean = s.program_s / s.programs if s.programs else 0.0
    wall = (f", {s.programs / s.session_s * 3600:,.0f} programs/hour of wall clock"
            if s.session_s > 0 else "")
    L.append(f"throughput: {s.programs_per_hour:,.0f} programs/hour, {mean:.2f} s per program "
             f"(per worker, run time without minimisation); {s.session_s:,.1f} s of run sessions{wall}")
    if s.minimized:
        L.append(f"minimisation: {s.minimize_s:,.1f} s over {s.minimized} failing programs "
                 f"({s.minimize_s / s.minimized:.1f} s each)")
    if s.failing:
        L.append(f"failing seeds ({len(s.failing)}):")
        for r in s.failing[:max_failing]:
            sig = f" signal {r['signal']}" if r["signal"] else ""
            L.append(f"  #{r['idx']} seed {r['seed']}: {r['status']} {r['reason']}{sig}"
                     f"  bundle {r['bundle'] or '-'}")
        if len(s.failing) > max_failing:
            L.append(f"  ... {len(s.failing) - max_failing} more")
    unwritten = sum(1 for r in s.failing if is_write_failure(r["reason"]))
    if unwritten:
        L.append(f"{unwritten} programs could not write their files (disk full or file-size limit): "
                 "run the same command again to redo them")
    L.append(f"verdict: {'PASS' if s.passed else 'FAIL'}"
             + ("" if s.passed else f" ({len(s.failing)} failing programs, {len(s.empty_bins)} empty bins)"))
    return "\n".join(L)


__all__ = ["CampaignSummary", "summarize", "render", "all_bins"]
