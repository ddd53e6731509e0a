"""Run a .tpubin on the Verilator RTL: ``run_rtl(...) -> RtlResult``.

Host side (``run_rtl``): build the simulator (cached, cocotb_tests/build.py), write the inputs as
.npy, run the cocotb test ``cocotb_tests/test_tpu.py`` through cocotb's runner with the job in
environment variables, then read back ``rtl_result.json``, the output .npy files and the retire
trace from the output folder. ``prepare_run_dir`` (files in, the test's environment) and
``read_result`` (files out) are shared with the RTL server (cocotb_tests/rtl_server.py), which
runs many programs from one simulator process.

Simulator side (helpers used by test_tpu.py): the ctypes view of the DPI-C DDR memory
(``DdrMem``), the testbench base time ``t0_ps`` and the performance counter names.

Environment variables of the cocotb test (set by ``run_rtl``; usable by hand too):
  TPU_BIN          path of the .tpubin
  TPU_CONFIG       hardware config name or YAML path
  TPU_INPUTS       JSON object {input name: path of an int8 NCHW .npy}
  TPU_OUT          output folder (outputs <name>.npy, rtl_result.json, retire.trace)
  TPU_MAX_CYCLES   watchdog: total core cycles after T0 (default 1,000,000,000)
  TPU_STALL_CYCLES watchdog: core cycles without any retire (default 2,000,000; 0 = off)
  TPU_DEADLOCK_CYCLES deadlock watch: core cycles with no engine busy, no dispatch, no retire and
                   no halt before the run ends as "deadlock" (or "error" if error_o is set);
                   default 10,000; 0 = off (passed to tb_top as +tpu_deadlock_cycles)
  TPU_QUIET_CYCLES core cycles to wait after halt before reading counters (default 200)

Output folder after a run:
  <output name>.npy   int8 NCHW, read back from DDR through TensorDesc.from_blocked
  rtl_result.json     status ("ok" | "error" | "deadlock" | "timeout" | "crash"), cycles, counters,
                      error_code (number), error_name, error_pc, error_cycle, waiting, ...
  retire.trace        one line per retire: "<time_ps - T0> <ENGINE> <pc>" (pc: byte offset)
  sim.log             the simulator's stdout/stderr
  rtl.lock            only while a run uses the folder: its PID and the simulator's
                      (cocotb_tests/procguard.py; left by a killed run, taken over by the next)
  arch.vcd            waves="arch": architectural signals (waves/arch_map.yaml), model time base
  waves.vcd           waves="vcd" with dump_scopes / dump_window_ps, model time base
  dump.vcd / .fst     waves="vcd"/"fst" otherwise: Verilator's full dump, simulation time
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cocotb_tests.build import TOPLEVEL, build, verilator_env
from cocotb_tests.procguard import GuardedVerilator, RunLock
from cocotb_tests.rtl_dump import check_dump_scopes, dump_request
from tpusim.arch.config import ClockConfig, HwConfig, load_config
from tpusim.arch.costs import AreaTable, EnergyTable
from tpusim.arch.errors import SimulationError
from tpusim.arch.fileio import write_text_atomic
from tpusim.arch.isa import ENGINE_NAMES
from tpusim.arch.perf import COUNTERS
from tpusim.arch.timebase import Timebase

RESULT_JSON = "rtl_result.json"
TRACE_FILE = "retire.trace"
DEFAULT_MAX_CYCLES = 1_000_000_000
DEFAULT_STALL_CYCLES = 2_000_000
DEFAULT_QUIET_CYCLES = 200
DEFAULT_DEADLOCK_CYCLES = 10_000
RETIRE_NAMES = ENGINE_NAMES + ("HALT",)  # retire_o bit order


def counter_names() -> tuple[str, ...]:
    """perf_sel_i index -> name (tpusim.arch.perf.COUNTERS)."""
    return COUNTERS


def config_from_json(path: str | Path) -> HwConfig:
    """Inverse of ``json.dumps(cfg.to_dict())``, or a config name / YAML path."""
    p = Path(path)
    if p.suffix != ".json":
        return load_config(path)
    d = json.loads(p.read_text())
    for k in ("clk_core", "clk_ddr", "clk_dma"):
        d[k] = ClockConfig(**d[k])
    d["energy"], d["area"] = EnergyTable(**d["energy"]), AreaTable(**d["area"])
    return HwConfig(**d)


def t0_ps(cfg: HwConfig) -> int:
    """Base time T0: model time 0 = core edge 0 = T0 in simulation time.

    T0 is a multiple of 5000 ps and of every clock period (so that each domain's edges keep their
    configured phase relative to T0), late enough for at least 3 edges of every domain while
    rst_ni is low (released at T0 - 500 ps). Raises SimulationError if a domain would have an
    edge in (T0 - 500, T0 + phase), which would make the first edge after reset not edge 0.
    """
    tb = Timebase(cfg)
    step = 5000
    for d in tb.domains.values():
        step = step * d.period_ps // math.gcd(step, d.period_ps)
        if d.period_ps - d.phase_ps <= 500:
            raise SimulationError(f"clock {d.name}: an edge falls {d.period_ps - d.phase_ps} ps before "
                                  "T0, inside the 500 ps between reset release and T0")
    # clocks start with their first rising edge at phase + period (see start_clocks)
    need = max(d.phase_ps + 4 * d.period_ps for d in tb.domains.values()) + 500
    return -(-need // step) * step


class DdrMem:
    """The DPI-C sparse DDR memory of the running simulator (cocotb_tests/tb/ddr_mem.cpp), via
    ctypes. Only usable inside the simulator process (the executable is linked -rdynamic)."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(None)
        try:
            self._write = lib.ddr_mem_write
            self._read = lib.ddr_mem_read
            self._clear = lib.ddr_mem_clear
            self._stat = lib.ddr_mem_stat
        except AttributeError as e:
            raise SimulationError(f"DDR memory C API not found in the simulator ({e}); "
                                  "was it linked with -LDFLAGS -rdynamic?") from None
        self._write.argtypes = [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint64]
        self._write.restype = ctypes.c_int
        self._read.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64]
        self._read.restype = ctypes.c_int
        self._clear.argtypes = []
        self._clear.restype = None
        self._stat.argtypes = [ctypes.c_int]
        self._stat.restype = ctypes.c_uint64

    def write(self, addr: int, data: bytes) -> None:
        if self._write(addr, bytes(data), len(data)) != 0:
            raise SimulationError(f"DDR write at {addr:#x} + {len(data)} bytes passes 2^40")

    def read(self, addr: int, n: int) -> bytes:
        buf = ctypes.create_string_buffer(n)
        if self._read(addr, buf, n) != 0:
            raise SimulationError(f"DDR read at {addr:#x} + {n} bytes passes 2^40")
        return buf.raw

    def clear(self) -> None:
        self._clear()

    def stats(self) -> dict:
        return {"pages": self._stat(0), "read_beats": self._stat(1), "write_beats": self._stat(2),
                "out_of_range": self._stat(3)}


# ------------------------------------------------------------------------------------ host side
@dataclass
class RtlResult:
    """Result of one RTL run. ``retire``: [(pc, engine name, time_ps from T0)] in file order."""
    status: str                      # "ok", "error" (device error), "deadlock", "timeout" (or
                                     # stall), "crash"
    cycles: int | None               # core cycles to HALT retire (perf counter 'cycles')
    counters: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)      # name -> int8 NCHW ndarray
    retire: list = field(default_factory=list)
    out_dir: Path | None = None
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0               # simulator wall time (whole process)
    sim_s: float = 0.0               # wall time from reset release to halt
    raw: dict = field(default_factory=dict)         # the whole rtl_result.json
    # device error (status "error"; docs/architecture.md "Device errors"): tpusim.arch.isa
    # DEVICE_ERRORS name, pc (byte offset), core edge at which error_o rose
    error_code: str | None = None
    error_pc: int | None = None
    error_cycle: int | None = None
    # status "deadlock" (or "error" without halt): [(engine, head pc, (missing senders...))]
    waiting: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def cycles_per_s(self) -> float:
        return (self.cycles or 0) / self.sim_s if self.sim_s else 0.0


def read_retire_trace(path: Path) -> list[tuple[int, str, int]]:
    """retire.trace -> [(pc, engine, time_ps)]."""
    out = []
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        if line.strip():
            t, eng, pc = line.split()
            out.append((int(pc), eng, int(t)))
    return out


@contextmanager
def not_under_pytest():
    """cocotb's runner sys.exit()s on a failing test when it sees PYTEST_CURRENT_TEST; run_rtl
    reports through RtlResult instead. WAVES is decided by the build, not by the runner."""
    saved = {k: os.environ.pop(k, None) for k in ("PYTEST_CURRENT_TEST", "WAVES")}
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is not None:
                os.environ[k] = v


def run_rtl(tpubin_path: str | Path, cfg: HwConfig | str, inputs: dict, out_dir: str | Path,
            waves: bool | str = False, max_cycles: int | None = None,
            stall_cycles: int = DEFAULT_STALL_CYCLES,
            quiet_cycles: int = DEFAULT_QUIET_CYCLES, internal_clocks: bool = False,
            bugs: tuple[str, ...] = (), dump_scopes=None, dump_window_ps=None,
            deadlock_cycles: int = DEFAULT_DEADLOCK_CYCLES) -> RtlResult:
    """Build (cached) and run ``tpubin_path`` on the RTL for ``cfg``.

    ``waves``: False; ``"arch"``: the architectural signals (waves/arch_map.yaml) to
    ``arch.vcd``, model time base (no tracing build); ``"vcd"``/``"fst"``/True: Verilator tracing
    build; with ``dump_scopes`` (hierarchical prefixes, e.g. ``["tb_top.u_tpu.u_vpu"]``) or
    ``dump_window_ps`` (``(t0, t1)`` model time) only those scopes / that window go to
    ``waves.vcd`` (model time base, cocotb_tests/rtl_dump.py), else everything to ``dump.vcd``
    (simulation time). ``dump_window_ps`` also limits the ``"arch"`` dump.

    ``bugs``: injected RTL bugs to compile in (cocotb_tests/bugs.py; ConfigError if unknown);
    recorded as ``"bugs"`` in rtl_result.json.

    ``inputs``: {input name: int8 NCHW ndarray or path of a .npy}. Writes everything into
    ``out_dir`` (see the module docstring). The simulator dies with this process (kill -9
    included) and ``out_dir`` is locked for the run (cocotb_tests/procguard.py): RunLockedError
    (a SimulationError naming the PID and folder) if another live run uses it; a dead run's lock
    is taken over. Raises SimulationError if the build fails or the
    simulator dies without writing a result; a device error or a watchdog timeout is reported
    in ``RtlResult.status`` / ``message``.
    """

    cfg = load_config(cfg) if isinstance(cfg, str) else cfg
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out) as lock:         # RunLockedError while another live run uses `out`
        return _run_locked(lock, tpubin_path, cfg, inputs, out, waves, max_cycles, stall_cycles,
                           quiet_cycles, internal_clocks, bugs, dump_scopes, dump_window_ps,
                           deadlock_cycles)


def _run_locked(lock, tpubin_path, cfg, inputs, out, waves, max_cycles, stall_cycles, quiet_cycles,
                internal_clocks, bugs, dump_scopes, dump_window_ps, deadlock_cycles) -> RtlResult:
    """run_rtl holding the folder's RunLock; the simulator dies with this process."""
    dump = dump_request(out, waves, dump_scopes, dump_window_ps)
    info = build(cfg, waves=dump.build_waves, internal_clocks=internal_clocks,  # None -> $WAVES
                 bugs=bugs)
    if dump_scopes and not dump.full:
        check_dump_scopes(info.build_dir, dump_scopes)     # WaveError: a scope matching nothing
    env = prepare_run_dir(out, tpubin_path, cfg, inputs, dump.stale,
                          max_cycles=max_cycles, stall_cycles=stall_cycles, quiet_cycles=quiet_cycles,
                          internal_clocks=internal_clocks, deadlock_cycles=deadlock_cycles)
    t = time.monotonic()
    with verilator_env(), not_under_pytest():
        runner = GuardedVerilator()
        runner.lock = lock
        simulator_pythonpath()
        try:
            runner.test(test_module="test_tpu", hdl_toplevel=TOPLEVEL, hdl_toplevel_lang="verilog",
                        build_dir=info.build_dir, test_dir=out, results_xml=str(out / "results.xml"),
                        extra_env={**env, **dump.env}, waves=bool(info.waves) and dump.full,
                        plusargs=sim_plusargs(cfg, out / TRACE_FILE, deadlock_cycles) + dump.plusargs,
                        log_file=out / "sim.log")
        except SystemExit as e:  # simulator exited non-zero; the result JSON says why if it got that far
            code = e.code
        else:
            code = 0
    return read_result(out, info, code, time.monotonic() - t)


def simulator_pythonpath() -> None:
    """The runner passes sys.path to the simulator as PYTHONPATH: make test_tpu and the
    tpusim / cocotb_tests packages importable there."""
    for d in (str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)):
        if d not in sys.path:
            sys.path.insert(0, d)


def sim_plusargs(cfg: HwConfig, trace: Path | str, deadlock_cycles: int) -> list[str]:
    """tb_top's plusargs: retire trace file, T0, deadlock watch (the dump adds its own)."""
    return [f"+tpu_retire_trace={trace}", f"+tpu_t0_ps={t0_ps(cfg)}",
            f"+tpu_deadlock_cycles={deadlock_cycles}"]


def prepare_run_dir(out: Path, tpubin_path: str | Path, cfg: HwConfig, inputs: dict, stale=(),
                    max_cycles: int | None = None, stall_cycles: int = DEFAULT_STALL_CYCLES,
                    quiet_cycles: int = DEFAULT_QUIET_CYCLES, internal_clocks: bool = False,
                    deadlock_cycles: int = DEFAULT_DEADLOCK_CYCLES) -> dict:
    """Delete the previous run's results (and ``stale`` dumps) from ``out``, write the inputs
    (.npy) and hw_config.json there; return the cocotb test's environment (module docstring)."""
    for f in [out / RESULT_JSON, out / TRACE_FILE, *stale]:
        f.unlink(missing_ok=True)
    in_paths = {}
    (out / "inputs").mkdir(exist_ok=True)
    for name, x in inputs.items():
        if isinstance(x, (str, Path)):
            in_paths[name] = str(Path(x).resolve())
        else:
            p = out / "inputs" / f"{name.replace('/', '_')}.npy"
            np.save(p, np.asarray(x))
            in_paths[name] = str(p)
    cfg_ref = str(out / "hw_config.json")
    Path(cfg_ref).write_text(json.dumps(cfg.to_dict()))
    return {"TPU_BIN": str(Path(tpubin_path).resolve()), "TPU_CONFIG": cfg_ref,
            "TPU_INPUTS": json.dumps(in_paths), "TPU_OUT": str(out),
            "TPU_MAX_CYCLES": str(max_cycles or DEFAULT_MAX_CYCLES),
            "TPU_STALL_CYCLES": str(stall_cycles),
            "TPU_DEADLOCK_CYCLES": str(deadlock_cycles),
            "TPU_QUIET_CYCLES": str(quiet_cycles),
            "TPU_INTERNAL_CLOCKS": "1" if internal_clocks else "0",
            "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "INFO")}


def read_result(out: Path, info, code, run_s: float) -> RtlResult:
    """The RtlResult of the run in ``out`` (simulator exit ``code``, ``run_s`` wall seconds) of
    the build ``info``; records the build's bugs in rtl_result.json. SimulationError if the
    simulator wrote no rtl_result.json (the message has the tail of sim.log)."""
    rj = out / RESULT_JSON
    if not rj.exists():
        tail = (out / "sim.log").read_text()[-3000:] if (out / "sim.log").exists() else ""
        raise SimulationError(f"RTL simulation wrote no {RESULT_JSON} (exit {code}); log {out / 'sim.log'}:\n{tail}")
    raw = json.loads(rj.read_text())
    raw["bugs"] = list(info.bugs)
    write_text_atomic(rj, json.dumps(raw, indent=1))
    outputs = {}
    for name in raw.get("outputs", []):
        p = out / f"{name.replace('/', '_')}.npy"
        if p.exists():
            outputs[name] = np.load(p)
    err = raw["status"] == "error"
    return RtlResult(status=raw["status"], cycles=raw.get("cycles"), counters=raw.get("counters", {}),
                     outputs=outputs, retire=read_retire_trace(out / TRACE_FILE), out_dir=out,
                     message=raw.get("message", ""), build_s=info.seconds, run_s=run_s,
                     sim_s=raw.get("sim_wall_s", 0.0), raw=raw,
                     error_code=raw.get("error_name") if err else None,
                     error_pc=raw.get("error_pc") if err else None,
                     error_cycle=raw.get("error_cycle") if err else None,
                     waiting=[(e, pc, tuple(m)) for e, pc, m in raw.get("waiting", [])])


__all__ = ["run_rtl", "RtlResult", "prepare_run_dir", "read_result", "sim_plusargs", "not_under_pytest",
           "simulator_pythonpath", "DdrMem", "t0_ps", "counter_names", "read_retire_trace"]
