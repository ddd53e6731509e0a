"""What ``run_rtl(..., waves=..., dump_scopes=..., dump_window_ps=...)`` dumps, and the scoped dumper.

Modes (``dump_request``):
  * ``"arch"``: the testbench probe (cocotb_tests/tb/tb_arch_probe.sv) writes ``arch.vcd``: only
    the architectural signals of waves/arch_map.yaml, in ps from core edge 0 (the model's time
    base). Works on the ordinary build (no ``--trace``); ``dump_window_ps=(t0, t1)`` limits it.
  * ``"vcd"`` / ``"fst"`` / True without scopes or window: Verilator's own full dump of the
    tracing build (``dump.vcd`` / ``dump.fst``, simulation time = model time + T0).
  * ``"vcd"`` with ``dump_scopes`` and/or ``dump_window_ps``: ``waves.vcd``, only the signals under
    the given hierarchical prefixes (``"tb_top.u_tpu.u_vpu"``), only inside the window, times in
    model ps. The tracing build's own full dump is off; the cocotb test opens a Verilator VCD
    writer of its own (cocotb_tests/tb/tb_waves.cpp, restricted with ``dumpvars``) at ``t0`` and
    writes it after every clock edge up to ``t1`` (``scoped_dump``), so nothing outside the window
    is ever written.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tpusim.arch.errors import WaveError

ARCH_VCD = "arch.vcd"
SCOPED_VCD = "waves.vcd"
ENV_VCD, ENV_SCOPES, ENV_WINDOW = "TPU_DUMP_VCD", "TPU_DUMP_SCOPES", "TPU_DUMP_WINDOW"


@dataclass
class DumpRequest:
    build_waves: object = ""          # build(waves=...): "" plain build, "vcd"/"fst", None $WAVES
    full: bool = False                # cocotb's own full dump (runner waves=True)
    plusargs: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    stale: list = field(default_factory=list)    # files to delete before the run
    path: Path | None = None          # the dump this run writes (None: none or Verilator's own)


def _check_window(window) -> tuple[int, int] | None:
    if window is None:
        return None
    try:
        t0, t1 = (int(x) for x in window)
    except (TypeError, ValueError):
        raise WaveError(f"dump_window_ps must be (t0_ps, t1_ps), got {window!r}") from None
    if not 0 <= t0 < t1:
        raise WaveError(f"dump_window_ps must satisfy 0 <= t0 < t1, got {window!r}")
    return t0, t1


def _check_scopes(scopes) -> list[str] | None:
    if scopes is None:
        return None
    if isinstance(scopes, str) or not all(isinstance(s, str) and s.strip() for s in scopes):
        raise WaveError(f"dump_scopes must be a list of hierarchical names, got {scopes!r}")
    return [s.strip() for s in scopes]


def dump_request(out: Path, waves, scopes=None, window=None) -> DumpRequest:
    """The build flavour, plusargs and environment for one run (WaveError on a bad request)."""
    window, scopes = _check_window(window), _check_scopes(scopes)
    mode = waves.strip().lower() if isinstance(waves, str) else waves
    if mode == "arch":
        if scopes:
            raise WaveError("dump_scopes applies to waves='vcd'; the arch dump has fixed signals")
        req = DumpRequest(build_waves="", path=out / ARCH_VCD, stale=[out / ARCH_VCD])
        req.plusargs = [f"+tpu_arch_vcd={out / ARCH_VCD}"]
        if window:
            req.plusargs += [f"+tpu_arch_w0={window[0]}", f"+tpu_arch_w1={window[1]}"]
        return req
    if mode in (False, None, "", "0", "off", "no", "false"):
        if scopes or window:
            raise WaveError("dump_scopes / dump_window_ps need waves='vcd' (or 'arch')")
        return DumpRequest(build_waves=None, full=True)        # $WAVES decides, as before
    if mode not in (True, "1", "vcd", "fst", "yes", "on", "true"):
        raise WaveError(f"waves must be False, 'arch', 'vcd' or 'fst', got {waves!r}")
    build = "fst" if mode == "fst" else "vcd"
    if not (scopes or window):
        return DumpRequest(build_waves=build, full=True)
    if build == "fst":
        raise WaveError("scoped / windowed dumps are VCD only: use waves='vcd'")
    path = out / SCOPED_VCD
    env = {ENV_VCD: str(path), ENV_SCOPES: json.dumps(scopes or []),
           ENV_WINDOW: json.dumps(list(window) if window else None)}
    return DumpRequest(build_waves="vcd", full=False, env=env, stale=[path], path=path)


_PUSH = re.compile(r'VL_TRACE_PUSH_PREFIX\(tracep, "([^"]*)", VerilatedTracePrefixType::(\w+)')
_TPU_SCOPE = "tb_top.u_tpu"


def rtl_scopes(build_dir: Path) -> set[str]:
    """Hierarchical scope names (``tb_top.u_tpu.u_vpu``) declared by a tracing build's
    Verilator trace code (``V*__Trace__*__Slow.cpp`` in ``build_dir``); empty if none found.
    Read line by line: the push/pop prefix calls nest within each generated function."""
    found: set[str] = set()
    for src in sorted(Path(build_dir).glob("V*__Trace__*__Slow.cpp")):
        stack: list[tuple[str, bool]] = []
        for line in src.read_text(errors="replace").splitlines():
            if line.startswith(("VL_ATTR_COLD void", "void ")) and line.rstrip().endswith("{"):
                stack = []                             # a new generated function
            m = _PUSH.search(line)
            if m:
                stack.append((m.group(1), m.group(2) == "SCOPE_MODULE"))
                if stack[-1][1]:
                    found.add(".".join(n for n, mod in stack if mod and n != "$rootio"))
            elif "VL_TRACE_POP_PREFIX" in line and stack:
                stack.pop()
    found.discard("")
    return found


def check_dump_scopes(build_dir: Path, scopes) -> None:
    """WaveError naming the first of ``scopes`` that is no scope of the tracing build in
    ``build_dir`` (nor a prefix of one), with the top-level scopes under tb_top.u_tpu. Does
    nothing if the build's scopes cannot be read (a Verilator whose trace code differs)."""
    known = rtl_scopes(build_dir)
    if not known:
        return
    for s in scopes or ():
        s = s.strip()
        if not any(k == s or k.startswith(s + ".") for k in known):
            top = sorted(k.rsplit(".", 1)[1] for k in known
                         if k.startswith(_TPU_SCOPE + ".") and k.count(".") == _TPU_SCOPE.count(".") + 1)
            raise WaveError(f"dump scope {s!r} matches no scope of the RTL; top-level scopes under "
                            f"{_TPU_SCOPE}: {', '.join(top) or '(none found)'}")


# ------------------------------------------------------------------------ simulator side
def _lib():
    import ctypes
    lib = ctypes.CDLL(None)
    try:
        fns = lib.tb_waves_open, lib.tb_waves_dump, lib.tb_waves_close
    except AttributeError:
        raise WaveError("this simulator has no scoped VCD writer (built without --trace?)") from None
    fns[0].argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    fns[0].restype = ctypes.c_int
    fns[1].argtypes = [ctypes.c_uint64]
    fns[1].restype = None
    fns[2].argtypes = []
    fns[2].restype = None
    return fns


async def scoped_dump(dut, t0_sim_ps: int, clocks) -> None:
    """cocotb coroutine (started by test_tpu.py when $TPU_DUMP_VCD is set): dump the requested
    scopes from model time w0 to w1 (whole run without a window) after every edge of
    ``clocks`` (the clock signals), times in model ps."""
    import cocotb
    from cocotb.triggers import Edge, First, ReadOnly, Timer
    from cocotb.utils import get_sim_time

    path = os.environ[ENV_VCD]
    scopes = json.loads(os.environ.get(ENV_SCOPES) or "[]")
    window = json.loads(os.environ.get(ENV_WINDOW) or "null")
    w0, w1 = (window if window else (0, None))
    opened, dump, close = _lib()
    now = int(get_sim_time("ps"))
    if t0_sim_ps + w0 > now:
        await Timer(t0_sim_ps + w0 - now, "ps")
    await ReadOnly()
    if opened(path.encode(), "\n".join(scopes).encode()) != 0:
        raise WaveError(f"cannot open {path} for writing")
    try:
        dump(int(get_sim_time("ps")) - t0_sim_ps)
        edges = [Edge(c) for c in clocks]
        while True:
            await First(*edges)
            await ReadOnly()
            t = int(get_sim_time("ps")) - t0_sim_ps
            if w1 is not None and t > w1:
                break
            dump(t)
    finally:
        close()
    cocotb.log.info("scoped dump %s written up to %s ps", path, w1)


def start_scoped_dump(dut, t0_sim_ps: int):
    """Start ``scoped_dump`` if the harness asked for one ($TPU_DUMP_VCD); returns the task or
    None. The clocks are tb_top's clock ports (cocotb-driven clocks)."""
    if not os.environ.get(ENV_VCD):
        return None
    import cocotb
    return cocotb.start_soon(scoped_dump(dut, t0_sim_ps,
                                         [dut.clk_core_i, dut.clk_ddr_i, dut.clk_dma_i]))


def stop_scoped_dump(task) -> None:
    """End the scoped dump (if any) and close its file."""
    if task is None:
        return
    if not task.done():
        task.cancel()
    _lib()[2]()


__all__ = ["ARCH_VCD", "SCOPED_VCD", "DumpRequest", "check_dump_scopes", "dump_request", "rtl_scopes", "scoped_dump",
           "start_scoped_dump", "stop_scoped_dump"]
