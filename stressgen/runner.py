"""Run one stress program on golden, SimPy and RTL and judge it: ``run_one(...) -> Outcome``.

Valid program (``prog.invalid is None``), in this order, every step timed:

  assemble ``prog.to_binary`` -> program.tpubin, ``prog.asm()`` -> program.asm
  golden   ``stressgen.golden.run_golden``: the output regions' bytes
  simpy    ``tpusim.sim.run_binary(..., vcd=model.vcd)`` (VCD only with the RTL and waves):
           outputs read from its final DDR
  rtl      ``cocotb_tests.harness.run_rtl(..., waves="arch", bugs=...)`` (``rtl=True``); its
           watchdog stops a hang after 2 x the SimPy cycle count + 10,000 core cycles. The run
           goes to this process's RTL server (``cocotb_tests.rtl_server.shared``: one simulator
           process per worker that forks a fresh copy of itself per program, the same results
           without the ~0.7 s simulator start); ``STRESS_RTL_SERVER=0`` in the environment: one
           simulator process per program
  waves    ``waves.triage.triage(model.vcd, rtl vcd, waves/arch_map.yaml, out_dir)``

and the checks, the first failing one giving ``Outcome.reason``:

  simpy_error / rtl_status   a side stopped with a device error, a deadlock, a watchdog timeout
  golden_vs_simpy            output bytes differ (region, first offset, both values, count)
  simpy_vs_rtl               output bytes differ
  retire                     first differing (pc, engine, time_ps) of the retire traces
  counters                   performance counters differ
  waves                      the architectural waveforms differ (``Outcome.signal`` = the first
                             diverging signal; set whenever the waves differ, whatever the reason)

Invalid program (``prog.invalid`` set): ``stressgen.invalid.assembler_rejects`` must refuse it
(reason ``assembler_accepted``); forced through as raw words, SimPy and the RTL must flag it the
same way: the same ``tpusim.arch.errors.flag_of`` tuple, e.g. ("error", code, pc, cycle) or
("deadlock", waiting engines) (reason ``flag_mismatch``), and not ("ok",) (reason
``not_flagged``); after a device error both sides halt at the same cycle with the same
performance counters (reason ``counters``: a decoder that keeps fetching after an error).

Dynamic coverage (``Outcome.bins``): ``stressgen.coverage.observed_bins`` of the SimPy
performance counters, ``drain_bins`` of its retire trace (of the RTL's when SimPy stopped) and
``dma_bins`` of its SRAM grant log.

``Outcome.status``: "pass", "fail" (a check failed) or "error" (a tool raised: reason
``exception in <step>``). Files in ``out_dir``: program.asm, program.tpubin, model.vcd, rtl/
(the RTL run folder, its arch VCD), the triage files (merged.vcd, triage.gtkw,
divergence.txt: only when a check failed), outcome.json.

A file that cannot be written (disk full, file-size limit: stressgen.writefail) is status "error"
with reason ``cannot write <file>: <why>``, also when the write failed silently (a simulator's
``$fwrite``) and only shows as a cut file and a failed check: a failing check in a folder with a
file at the size limit, or on a full disk, is not trusted.
"""
from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from cocotb_tests import rtl_server
from cocotb_tests.build import build
from cocotb_tests.harness import DEFAULT_STALL_CYCLES, run_rtl
from cocotb_tests.rtl_dump import dump_request
from stressgen.coverage import dma_bins, drain_bins, observed_bins
from stressgen.gen import generate
from stressgen.golden import run_golden
from stressgen.invalid import assembler_rejects
from stressgen.writefail import cut_files, is_write_failure, write_failure
from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError, flag_of
from tpusim.arch.fileio import write_text_atomic
from tpusim.arch.retire import first_retire_difference
from tpusim.arch.timebase import Timebase
from tpusim.sim import run_binary
from waves.triage import triage

REPO = Path(__file__).resolve().parent.parent
ARCH_MAP = REPO / "waves" / "arch_map.yaml"
RTL_WAVES = "arch"
RTL_SERVER_ENV = "STRESS_RTL_SERVER"


@dataclass
class Outcome:
    """Judgement of one program. ``reason``: "" when passed, else the failure kind (module
    docstring); ``first_divergence``: human-readable report of every failed check;
    ``signal``: first diverging architectural signal (model name) or None;
    ``timings_s``: step -> wall seconds; ``details``: JSON-able facts (cycles, flags, diffs)."""
    status: str = "pass"
    reason: str = ""
    first_divergence: str = ""
    signal: str | None = None
    timings_s: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    bins: dict = field(default_factory=dict)       # dynamic coverage bins observed (counters)
    checks: list = field(default_factory=list)     # [(reason, text)] of every failed check
    files: dict = field(default_factory=dict)      # role -> path (model_vcd, rtl_vcd, merged_vcd, gtkw)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def signature(self) -> tuple[str, str | None] | None:
        """(reason, signal) for a failing outcome, None when it passed (the minimiser's key)."""
        return None if self.passed else (self.reason, self.signal)

    def fail(self, reason: str, text: str) -> None:
        self.checks.append((reason, text))
        if self.status == "pass":
            self.status, self.reason = "fail", reason

    def finish(self) -> "Outcome":
        """Build ``first_divergence``; an RTL hang (status timeout) is always its first line."""
        lines = [f"[{r}] {t}" for r, t in self.checks]
        hang = self.details.get("rtl_hang")
        if hang and not (lines and lines[0].startswith(f"[rtl_status] {hang}")):
            lines.insert(0, hang)
        self.first_divergence = "\n".join(lines)
        return self

    def to_json(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        return d


class _Steps:
    """Time named steps into ``timings``; tell ``phase`` which step runs."""

    def __init__(self, outcome: Outcome, phase):
        self.o, self.phase = outcome, phase or (lambda p: None)

    def __call__(self, name: str):
        self.phase(name)
        return _Timer(self.o.timings_s, name)


class _Timer:
    def __init__(self, store: dict, name: str):
        self.store, self.name = store, name

    def __enter__(self):
        self.t = time.perf_counter()

    def __exit__(self, *exc):
        self.store[self.name] = round(self.store.get(self.name, 0.0) + time.perf_counter() - self.t, 4)
        return False


# -------------------------------------------------------------------------- byte comparisons
def region_bytes_from_arrays(binary, arrays: dict) -> dict[str, bytes]:
    """Output name -> the region's bytes, from int8 NCHW arrays (RtlResult.outputs)."""
    out = {}
    for d in binary.outputs:
        if d.name in arrays:
            out[d.name] = d.to_blocked(np.asarray(arrays[d.name]), fill=d.zero_point)
    return out


def compare_regions(a: dict[str, bytes], b: dict[str, bytes], label_a: str, label_b: str) -> str | None:
    """None if equal, else a report: per differing region the count, first offset and values."""
    lines = []
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x is None or y is None:
            lines.append(f"region {name}: missing on {label_a if x is None else label_b}")
            continue
        if x == y:
            continue
        if len(x) != len(y):
            lines.append(f"region {name}: {len(x)} bytes on {label_a}, {len(y)} on {label_b}")
            continue
        ax, ay = np.frombuffer(x, np.int8), np.frombuffer(y, np.int8)
        bad = np.flatnonzero(ax != ay)
        i = int(bad[0])
        lines.append(f"region {name}: {len(bad)} of {len(x)} bytes differ; first at offset {i}: "
                     f"{label_a}={int(ax[i])} {label_b}={int(ay[i])}")
    return "\n".join(lines) or None


# -------------------------------------------------------------------------------- device flags
def flag(result) -> tuple:
    """``tpusim.arch.errors.flag_of``: the comparable flag of a SimPy result / exception or an
    RtlResult: ("ok",), ("error", code, pc, cycle), ("deadlock", waiting), (status,), ..."""
    return flag_of(result)


# ------------------------------------------------------------------------------------- steps
def _write_program(prog, cfg, out: Path):
    binary = prog.to_binary(cfg)
    binary.write(out / "program.tpubin")
    write_text_atomic(out / "program.asm", prog.asm())
    return binary


def _simpy(binary, cfg, out: Path, waves: bool):
    vcd = out / "model.vcd" if waves else None
    try:
        return run_binary(binary, cfg, {}, vcd=vcd, keep_ddr=True), None
    except SimulationError as e:
        return None, e


def use_rtl_server() -> bool:
    """False when ``$STRESS_RTL_SERVER`` is "0": one simulator process per program."""
    return os.environ.get(RTL_SERVER_ENV, "1").strip() != "0"


def _rtl(cfg, out: Path, bugs, waves: bool, simpy_cycles: int | None = None):
    """Run the RTL (on this process's RTL server unless ``use_rtl_server()`` is False); with the
    SimPy cycle count known, its watchdog stops a hang after 2 x SimPy cycles + 10,000 (the cycle
    counts must match anyway) instead of 10^9."""
    limit = 2 * simpy_cycles + 10_000 if simpy_cycles is not None else None
    stall = min(DEFAULT_STALL_CYCLES, limit) if limit else DEFAULT_STALL_CYCLES
    mode = RTL_WAVES if waves else False
    if use_rtl_server():
        srv = rtl_server.shared(cfg, tuple(bugs), mode)
        return srv.run(out / "program.tpubin", {}, out / "rtl", max_cycles=limit, stall_cycles=stall)
    return run_rtl(out / "program.tpubin", cfg, {}, out / "rtl", waves=mode, bugs=tuple(bugs),
                   max_cycles=limit, stall_cycles=stall)


def rtl_vcd_path(res) -> Path | None:
    """The architectural VCD of an RTL run (None if it wrote none)."""
    p = getattr(res, "vcd", None)
    if p:
        return Path(p)
    if res.out_dir is not None:
        for name in ("arch.vcd", "dump.vcd"):
            if (res.out_dir / name).exists():
                return res.out_dir / name
    return None


def _compare_waves(o: Outcome, cfg, model_vcd: Path, rtl_vcd: Path | None, out: Path) -> None:
    if rtl_vcd is None or not rtl_vcd.exists() or not model_vcd.exists():
        o.fail("waves", f"no waveform to compare (model {model_vcd.exists()}, rtl {rtl_vcd})")
        return
    tr = triage(model_vcd, rtl_vcd, ARCH_MAP, out, core_period_ps=Timebase(cfg).core.period_ps,
                write_identical=not o.passed)      # the triage files are for a failing program's bundle
    o.files.update(model_vcd=str(model_vcd), rtl_vcd=str(rtl_vcd))
    if getattr(tr, "merged_vcd", None):
        o.files["merged_vcd"] = str(tr.merged_vcd)
    if getattr(tr, "gtkw", None):
        o.files["gtkw"] = str(tr.gtkw)
    if not tr.identical:           # a divergence, or a dump cut short (identical only up to the cut)
        first = tr.first
        o.signal = getattr(first, "signal_a", None) if first is not None else None
        o.fail("waves" if first is not None else "waves_cut", tr.report)


def _check_valid(prog, cfg, out: Path, rtl: bool, bugs, waves: bool, o: Outcome, step) -> None:
    with step("assemble"):
        binary = _write_program(prog, cfg, out)
    with step("golden"):
        gold = run_golden(prog, cfg)
    with step("simpy"):
        sim, sim_exc = _simpy(binary, cfg, out, waves and rtl)     # the VCD is for the RTL diff
    if sim_exc is not None:
        o.fail("simpy_error", f"SimPy stopped: {sim_exc}")
        o.details["simpy_flag"] = flag(sim_exc)
    else:
        sb = {r.name: sim.read_ddr(r.ddr_addr, r.size_bytes) for r in prog.outputs}
        o.details.update(cycles_simpy=sim.cycles, retired_simpy=len(sim.retire))
        o.bins = (observed_bins(sim.counters) | drain_bins(prog, cfg, sim.retire, sim.timeline)
                  | dma_bins(cfg, sim.sram_grants, sim.timeline))
        d = compare_regions(gold, sb, "golden", "simpy")
        if d:
            o.fail("golden_vs_simpy", d)
    if not rtl:
        return
    with step("rtl"):
        res = _rtl(cfg, out, bugs, waves, sim.cycles if sim is not None else None)
    o.details.update(rtl_status=res.status, cycles_rtl=res.cycles)
    _note_hang(o, res)
    if res.status != "ok":
        o.details["rtl_flag"] = flag(res)
        o.fail("rtl_status", f"RTL status {res.status}: {res.message}".strip())
    elif sim is None:
        o.bins = observed_bins(res.counters) | drain_bins(prog, cfg, res.retire)
    if sim is not None and res.status == "ok":
        rb = region_bytes_from_arrays(binary, res.outputs)
        d = compare_regions(sb, rb, "simpy", "rtl")
        if d:
            o.fail("simpy_vs_rtl", d)
        rd = first_retire_difference(sim.retire, res.retire)
        if rd is not None or sim.cycles != res.cycles:
            o.details["first_retire_diff"] = rd
            o.fail("retire", f"cycles simpy {sim.cycles} rtl {res.cycles}; first differing retire: "
                             f"{json.dumps(rd)}")
        cd = {k: {"simpy": v, "rtl": res.counters.get(k)} for k, v in sim.counters.items()
              if res.counters.get(k) != v}
        if cd:
            o.details["counter_diffs"] = cd
            o.fail("counters", "performance counters differ: " + json.dumps(cd))
    if waves:
        with step("waves"):
            _compare_waves(o, cfg, out / "model.vcd", rtl_vcd_path(res), out)


def _note_hang(o: Outcome, res) -> None:
    """Keep the hang line of an RTL watchdog timeout for the top of ``first_divergence``."""
    if res.status == "timeout":
        o.details["rtl_hang"] = f"RTL status timeout: {res.message}".strip()


def _check_invalid(prog, cfg, out: Path, rtl: bool, bugs, o: Outcome, step) -> None:
    with step("assembler"):
        rejected = assembler_rejects(prog, cfg)
    if not rejected:
        o.fail("assembler_accepted", f"the assembler accepted the invalid program ({prog.invalid})")
    with step("assemble"):
        binary = _write_program(prog, cfg, out)
    with step("simpy"):
        sim, exc = _simpy(binary, cfg, out, waves=False)
    fs = flag(exc if exc is not None else sim)
    o.details["simpy_flag"] = fs
    if fs[0] in ("ok", "exception"):
        o.fail("not_flagged", f"SimPy did not flag the {prog.invalid} program: {fs} {exc or ''}".strip())
    if not rtl:
        return
    with step("rtl"):
        res = _rtl(cfg, out, bugs, waves=False)
    fr = flag(res)
    o.details["rtl_flag"] = fr
    _note_hang(o, res)
    if fr != fs:
        o.fail("flag_mismatch", f"{prog.invalid}: SimPy flags {fs}, RTL flags {fr} ({res.message})")
    run = getattr(exc, "run", None)
    if fr == fs and fs[0] == "error" and run is not None:   # the halt after the error is cycle-exact too
        cd = {k: {"simpy": v, "rtl": res.counters.get(k)} for k, v in run.counters.items() if res.counters.get(k) != v}
        if run.cycles != res.cycles or cd:
            o.fail("counters", f"{prog.invalid}: after the device error, cycles SimPy {run.cycles} RTL "
                               f"{res.cycles}; counters differ: {json.dumps(cd)}")


def run_one(prog, cfg, out_dir, rtl: bool = True, bugs=(), waves: bool = True, phase=None) -> Outcome:
    """Run ``prog`` (StressProgram) on golden, SimPy and (``rtl``) the RTL with ``bugs``
    compiled in, compare everything (module docstring) and return the Outcome.

    ``out_dir`` receives the program and every dump; ``waves``: dump and compare the
    architectural waveforms; ``phase(step_name)`` is called as each step starts.
    Never raises for a failure of the program: a tool exception gives status "error"."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    o = Outcome()
    step = _Steps(o, phase)
    current = {"name": "assemble"}

    def tracking(name):
        current["name"] = name
        return step(name)

    try:
        if prog.invalid:
            _check_invalid(prog, cfg, out, rtl, bugs, o, tracking)
        else:
            _check_valid(prog, cfg, out, rtl, bugs, waves, o, tracking)
    except Exception as e:  # a tool raised: the program cannot be judged
        o.status = "error"
        why = write_failure(e, out, current["name"])
        o.reason = why or f"exception in {current['name']}: {type(e).__name__}"
        o.checks.append((o.reason, f"{type(e).__name__}: {e} (step {current['name']}; the program "
                                   "runs again when the campaign resumes)" if why else
                         f"{e}\n{traceback.format_exc()[-3000:]}"))
    if not o.passed and not is_write_failure(o.reason):
        _distrust_cut_files(o, out)
    o.finish()
    _write_outcome(o, out)
    return o


def _distrust_cut_files(o: Outcome, out: Path) -> None:
    """A failed check next to a file cut by a silent write error is an "error" (writefail)."""
    cut = cut_files(out)
    if cut is not None:
        o.checks.insert(0, (cut, "a file of this run may be cut short, so the checks below are "
                                 "not trusted; the program runs again when the campaign resumes"))
        o.status, o.reason, o.signal = "error", cut, None


def _write_outcome(o: Outcome, out: Path) -> None:
    """outcome.json; a write failure makes the outcome an "error" (other OSErrors propagate)."""
    try:
        write_text_atomic(out / "outcome.json", json.dumps(o.to_json(), indent=1, default=str))
    except OSError as e:
        why = write_failure(e, out, "outcome")
        if why is None:
            raise
        o.checks.insert(0, (why, "the outcome could not be saved"))
        o.status, o.reason, o.signal = "error", why, None
        o.finish()


def prebuild(cfg, bugs=(), waves: bool = True) -> None:
    """Build (or reuse) the RTL simulator ``run_one`` will use, outside any program's timeout."""
    req = dump_request(REPO / "build", RTL_WAVES if waves else False)   # only its build flavour
    build(cfg, waves=req.build_waves, bugs=tuple(bugs))


def run_spec_program(spec, seed: int, work_root: Path, phase=None):
    """Generate program ``seed`` as ``spec`` says and run it: (Outcome, StressProgram, run dir)."""
    cfg = load_config(spec.hw)
    if phase:
        phase("generate")
    t = time.perf_counter()
    prog = generate(seed, cfg, invalid_rate=spec.invalid_rate)
    gen_s = time.perf_counter() - t
    run_dir = Path(work_root) / str(seed)
    o = run_one(prog, cfg, run_dir, rtl=spec.rtl, bugs=spec.bugs, waves=spec.waves, phase=phase)
    o.timings_s["generate"] = round(gen_s, 4)
    return o, prog, run_dir


__all__ = ["Outcome", "run_one", "run_spec_program", "prebuild", "compare_regions", "flag",
           "region_bytes_from_arrays", "ARCH_MAP"]
