"""RTL build and run speed, phase by phase (``make bench-rtl``).

    python -m tpusim.flow.bench_rtl [--hw seed] [--ccache cold|warm|off] [--no-run | --run-only]
                                    [--tb-clocks] [--matmuls N] [--json FILE]

1. Builds the Verilator model of ``--hw`` again from scratch (``cocotb_tests.build.build(...,
   force=True)``, the same folder, flags and C++ options as every build) with each C++ compile
   timed (``TPU_CXX_TIMES=1``), then re-runs only the link (the executable removed, ``make`` again)
   to time it on its own. ``--ccache cold`` compiles through ccache with an empty cache of its
   own (what a fresh machine sees: the cache's miss overhead included), ``warm`` through the
   machine's cache (a rebuild of a tree built before), ``off`` without ccache (TPU_CCACHE=0).
2. Unless ``--no-run``: the synthetic DMA/MATMUL program of ``tpusim.flow.bench_sim``
   (``--matmuls``) on that build: core cycles, cycles/s from reset release to halt (the
   simulator's own loop) and the simulator process's CPU seconds (start-up included), and
   whether the cycles equal SimPy's. ``--run-only`` skips step 1 (the cached build of the current
   flags; TPU_MAKE_OPT chooses another C++ optimisation). ``--tb-clocks``: the ``--timing``
   build with the clocks generated inside tb_top.

Prints one table: Verilator (wall / CPU seconds), the C++ compiles (count, summed CPU, the
largest files), make (wall / CPU: compiles + link), the link alone, the C++ size Verilator wrote,
and the run. CPU seconds are user + sys of the step and its children (``os.wait4``); on a shared
machine they are the comparable figure, and ``uptime``'s load average is printed beside them.
Raises SimulationError if a build or run fails.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cocotb_tests.build import TOPLEVEL, build, restore_environ, verilator_env
from cocotb_tests.harness import run_rtl
from tpusim.arch.cliutil import user_errors
from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError
from tpusim.flow.bench_sim import bench_program
from tpusim.sim import run_binary


def load_average() -> str:
    """``/proc/loadavg``'s 1, 5 and 15 minute figures, e.g. ``"3.1 4.0 4.2"``."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def relink_seconds(bdir: Path) -> tuple[float, float]:
    """(wall s, CPU s) of linking ``bdir``'s executable again from its objects (the executable
    removed, ``make -f Vtop.mk`` re-run: nothing else is out of date). Raises SimulationError if
    make fails."""
    (bdir / TOPLEVEL).unlink()
    with verilator_env():
        t = time.monotonic()
        p = subprocess.Popen(["make", "-C", str(bdir), "-f", "Vtop.mk", "VM_TRACE=0"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - t
    if os.waitstatus_to_exitcode(status) != 0 or not (bdir / TOPLEVEL).exists():
        raise SimulationError(f"re-link of {bdir} failed: {p.stderr.read().decode()[-2000:]}")
    return wall, ru.ru_utime + ru.ru_stime


def bench_build(hw: str, ccache: str, internal_clocks: bool = False) -> dict:
    """Build ``hw`` from scratch with per-file compile timing (module docstring); the phases."""
    saved = {k: os.environ.get(k) for k in ("TPU_CXX_TIMES", "TPU_CCACHE", "CCACHE_DIR")}
    tmp = tempfile.TemporaryDirectory(prefix="tpusim-ccache-")
    os.environ["TPU_CXX_TIMES"] = "1"
    if ccache == "off":
        os.environ["TPU_CCACHE"] = "0"
    elif ccache == "cold":
        os.environ["CCACHE_DIR"] = tmp.name
    load0 = load_average()
    try:
        info = build(hw, waves=False, internal_clocks=internal_clocks, force=True)
    finally:
        restore_environ(saved)
        tmp.cleanup()
    stamp = json.loads((info.build_dir / "build_ok.json").read_text())
    steps = stamp.get("phases", [])
    cxx = sorted((s for s in steps if s["step"].startswith("c++ ")), key=lambda s: -s["cpu_s"])
    link_wall, link_cpu = relink_seconds(info.build_dir)
    cpp = list(info.build_dir.glob("*.cpp"))
    return {"config": hw, "ccache": ccache, "build_dir": str(info.build_dir),
            "build_wall_s": round(info.seconds, 1), "load_before": load0, "load_after": load_average(),
            "verilator": next((s for s in steps if s["step"] == "verilator"), None),
            "make": next((s for s in steps if s["step"] == "make"), None),
            "cxx_files": len(cxx), "cxx_cpu_s": round(sum(s["cpu_s"] for s in cxx), 1),
            "cxx_largest": cxx[:6], "link_wall_s": round(link_wall, 2), "link_cpu_s": round(link_cpu, 2),
            "cpp_files": len(cpp), "cpp_mbytes": round(sum(f.stat().st_size for f in cpp) / 1e6, 1)}


def bench_run(hw: str, matmuls: int, out: Path, internal_clocks: bool = False) -> dict:
    """The synthetic program on the built RTL and on SimPy: cycles, cycles/s, equal cycles."""
    cfg = load_config(hw)
    b = bench_program(cfg, matmuls, 4)
    b.write(out / "bench.tpubin")
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run_rtl(out / "bench.tpubin", cfg, {}, out / "rtl", internal_clocks=internal_clocks)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    if not r.ok:
        raise SimulationError(f"RTL run of the bench program failed: {r.status}: {r.message}")
    sim = run_binary(b, cfg, {})
    return {"cycles": r.cycles, "sim_s": round(r.sim_s, 2), "process_s": round(r.run_s, 2),
            "process_cpu_s": round(cpu_s, 2),
            "cycles_per_s": round(r.cycles_per_s), "cycles_equal_simpy": r.cycles == sim.cycles,
            "load": load_average()}


def report(row: dict) -> str:
    if "verilator" not in row:
        lines = [f"RTL run of {row['config']} (cached build)"]
    else:
        lines = _build_lines(row)
    if "run" in row:
        r = row["run"]
        lines.append(f"  run (bench program) {r['cycles']} cycles in {r['sim_s']} s = {r['cycles_per_s']} "
                     f"cycles/s (process {r['process_s']} s wall, {r['process_cpu_s']} s CPU, load "
                     f"{r['load']}), cycles = SimPy: {r['cycles_equal_simpy']}")
    return "\n".join(lines)


def _build_lines(row: dict) -> list[str]:
    v, m = row["verilator"] or {}, row["make"] or {}
    return [f"RTL build of {row['config']} (ccache {row['ccache']}), load {row['load_before']} -> "
             f"{row['load_after']}",
             f"  Verilator           {v.get('wall_s', 0):7.1f} s wall {v.get('cpu_s', 0):7.1f} s CPU   "
             f"({row['cpp_files']} .cpp, {row['cpp_mbytes']} MB)",
             f"  make (C++ + link)   {m.get('wall_s', 0):7.1f} s wall {m.get('cpu_s', 0):7.1f} s CPU",
             f"    {row['cxx_files']} compiles      {row['cxx_cpu_s']:7.1f} s CPU summed; largest: "
             + ", ".join(f"{s['step'][4:]} {s['cpu_s']:.1f}" for s in row["cxx_largest"]),
             f"    link alone        {row['link_wall_s']:7.1f} s wall {row['link_cpu_s']:7.1f} s CPU",
             f"  whole build         {row['build_wall_s']:7.1f} s wall"]


@user_errors("python -m tpusim.flow.bench_rtl")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tpusim.flow.bench_rtl", description=__doc__.split("\n")[0])
    ap.add_argument("--hw", default="seed")
    ap.add_argument("--ccache", choices=("cold", "warm", "off"), default="cold")
    ap.add_argument("--no-run", action="store_true", help="build only")
    ap.add_argument("--run-only", action="store_true", help="no build from scratch: run on the (cached) build")
    ap.add_argument("--tb-clocks", action="store_true",
                    help="the clocks generated inside tb_top (--timing build) instead of by cocotb")
    ap.add_argument("--matmuls", type=int, default=64, help="MATMULs of the run's bench program")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures there")
    a = ap.parse_args(argv)
    row = {"config": a.hw} if a.run_only else bench_build(a.hw, a.ccache, a.tb_clocks)
    if not a.no_run:
        with tempfile.TemporaryDirectory(prefix="tpusim-bench-rtl-") as d:
            row["run"] = bench_run(a.hw, a.matmuls, Path(d), a.tb_clocks)
    print(report(row))
    if a.json:
        a.json.write_text(json.dumps(row, indent=1))
    return 0 if row.get("run", {}).get("cycles_equal_simpy", True) else 1


__all__ = ["bench_build", "bench_run", "load_average", "relink_seconds"]

if __name__ == "__main__":
    sys.exit(main())
