"""cocotb test: run one .tpubin on tb_top (tpu_top + DDR model) and write the results.

The job comes from environment variables (see cocotb_tests/harness.py, which sets them):
TPU_BIN, TPU_CONFIG, TPU_INPUTS, TPU_OUT, TPU_MAX_CYCLES, TPU_STALL_CYCLES, TPU_QUIET_CYCLES,
TPU_INTERNAL_CLOCKS.

Sequence: preload DDR through ctypes (TpuBinary.ddr_segments, inputs blocked with their zero
point as fill) → start the three clocks with their configured phases (first rising edge of each
domain at phase + period, so every edge is at T0 + phase + k*period for a T0 that is a multiple
of all periods) → hold rst_ni low until T0 − 500 ps → wait for halted_o under a watchdog
(total cycle limit, and a stall limit: no retire for TPU_STALL_CYCLES core cycles) →
wait TPU_QUIET_CYCLES core cycles → read the performance counters through perf_sel_i → read the
outputs from DDR → write <name>.npy and rtl_result.json into TPU_OUT. The retire trace is written
by tb_top itself (+tpu_retire_trace).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import First, RisingEdge, Timer
from cocotb.utils import get_sim_time

from cocotb_tests.harness import (DEFAULT_MAX_CYCLES, DEFAULT_QUIET_CYCLES, DEFAULT_STALL_CYCLES, RESULT_JSON,
                                  RETIRE_NAMES, DdrMem, config_from_json, counter_names, t0_ps)
from tpusim.binary import TpuBinary
from tpusim.sim import input_blobs
from tpusim.timebase import Timebase


def _split(value: int, n: int, bits: int) -> list[int]:
    return [(value >> (i * bits)) & ((1 << bits) - 1) for i in range(n)]


async def _start_clock(sig, period_ps: int, first_edge_ps: int) -> None:
    await Timer(first_edge_ps, "ps")
    Clock(sig, period_ps, "ps").start(start_high=True)


def _retire_book(dut, res) -> tuple[list[int], list[int]]:
    """Last retired PC and retire count per retire_o bit, as kept by tb_top."""
    last_pc = _split(int(dut.tb_last_pc_o.value), 5, 40)
    retired = _split(int(dut.tb_retired_o.value), 5, 32)
    res["last_pc"] = dict(zip(RETIRE_NAMES, last_pc))
    res["retired"] = dict(zip(RETIRE_NAMES, retired))
    return last_pc, retired


@cocotb.test()
async def run_tpubin(dut):
    env = os.environ
    out = Path(env["TPU_OUT"])
    out.mkdir(parents=True, exist_ok=True)
    cfg = config_from_json(env["TPU_CONFIG"])
    tb = Timebase(cfg)
    T0 = t0_ps(cfg)
    max_cycles = int(env.get("TPU_MAX_CYCLES", DEFAULT_MAX_CYCLES))
    quiet = int(env.get("TPU_QUIET_CYCLES", DEFAULT_QUIET_CYCLES))
    res: dict = {"status": "crash", "message": "the test stopped before the end", "config": cfg.name,
                 "t0_ps": T0, "outputs": []}
    try:
        await _run(dut, env, out, cfg, tb, T0, max_cycles, quiet, res)
    except Exception as e:  # keep the JSON truthful about how far we got
        res["status"], res["message"] = "crash", f"{type(e).__name__}: {e}"
        raise
    finally:
        (out / RESULT_JSON).write_text(json.dumps(res, indent=1))
    assert res["status"] in ("ok", "error"), res["message"]


async def _run(dut, env, out, cfg, tb, T0, max_cycles, quiet, res) -> None:
    stall_cycles = int(env.get("TPU_STALL_CYCLES", DEFAULT_STALL_CYCLES))
    log = dut._log
    binary = TpuBinary.read(env["TPU_BIN"], cfg.hash_bytes())
    in_paths = json.loads(env.get("TPU_INPUTS") or "{}")
    blocked = input_blobs(binary, {name: np.load(p) for name, p in in_paths.items()})

    # ---- DDR preload (ctypes into the DPI-C memory)
    mem = DdrMem()
    mem.clear()
    t = time.monotonic()
    nbytes = 0
    for addr, data in binary.ddr_segments(blocked):
        mem.write(addr, data)
        nbytes += len(data)
    log.info("preloaded %d bytes into DDR in %.3f s", nbytes, time.monotonic() - t)

    # ---- clocks, reset
    dut.rst_ni.value = 0
    dut.code_addr_i.value = binary.code_addr
    dut.perf_sel_i.value = 0
    if env.get("TPU_INTERNAL_CLOCKS", "0") != "1":
        for sig, d in ((dut.clk_core_i, tb.core), (dut.clk_ddr_i, tb.ddr), (dut.clk_dma_i, tb.dma)):
            sig.value = 0
            cocotb.start_soon(_start_clock(sig, d.period_ps, d.phase_ps + d.period_ps))
    await Timer(T0 - 500, "ps")
    dut.rst_ni.value = 1
    wall0 = time.monotonic()

    # ---- run until halted_o. Event driven: Python wakes only at halt or every POLL core cycles to
    # check for progress (retire counts kept by tb_top): no retire for stall_cycles -> stalled.
    period = tb.core.period_ps
    poll = max(1, min(stall_cycles, 100_000)) if stall_cycles else 100_000
    halted_evt = RisingEdge(dut.halted_o)
    seen, last_progress = None, 0
    status = None
    while True:
        now_cyc = (int(get_sim_time("ps")) - T0) // period
        step = min(poll, max_cycles - now_cyc)
        if step <= 0:
            status = "timeout"
            break
        trig = await First(halted_evt, Timer(step * period, "ps"))
        if trig is halted_evt or int(dut.halted_o.value):
            break
        now_cyc = (int(get_sim_time("ps")) - T0) // period
        book = (int(dut.tb_retired_o.value), int(dut.tb_last_pc_o.value))
        if book != seen:
            seen, last_progress = book, now_cyc
        elif stall_cycles and now_cyc - last_progress >= stall_cycles:
            status = "stalled"
            break
    sim_wall = time.monotonic() - wall0
    t_now = int(get_sim_time("ps"))
    res["sim_wall_s"] = sim_wall
    if status is not None:
        last_pc, retired = _retire_book(dut, res)
        why = (f"no halt within {max_cycles} core cycles" if status == "timeout" else
               f"no instruction retired for {stall_cycles} core cycles (at core cycle "
               f"{(t_now - T0) // period})")
        res["status"] = "timeout"
        res["message"] = (why + "; last retired pc per engine: "
                          + ", ".join(f"{n}={pc:#x} ({r} retired)" if r else f"{n}=none"
                                      for n, pc, r in zip(RETIRE_NAMES, last_pc, retired)))
        log.error(res["message"])
        return
    halt_edge = (t_now - T0 - tb.core.phase_ps) // tb.core.period_ps
    res["halted_o_edge"] = halt_edge
    res["halted_o_time_ps"] = t_now - T0

    # ---- quiet period, then counters (perf_sel_i -> perf_val_o is combinational)
    await Timer(quiet * tb.core.period_ps, "ps")
    counters = {}
    for i, name in enumerate(counter_names()):
        dut.perf_sel_i.value = i
        await Timer(1, "ps")
        counters[name] = int(dut.perf_val_o.value)
    res["counters"] = counters
    _retire_book(dut, res)
    res["cycles"] = counters.get("cycles", halt_edge)
    res["ddr_protocol_errors"] = int(dut.tb_ddr_errors_o.value)
    res["ddr_mem"] = mem.stats()
    res["error_code"] = int(dut.error_code_o.value)
    res["error_pc"] = int(dut.error_pc_o.value)
    res["sim_cycles_per_s"] = halt_edge / sim_wall if sim_wall > 0 else None

    # ---- outputs
    for desc in binary.outputs:
        raw = mem.read(desc.ddr_addr, desc.size_bytes)
        np.save(out / f"{desc.name.replace('/', '_')}.npy", desc.from_blocked(raw))
        res["outputs"].append(desc.name)

    if int(dut.error_o.value):
        res["status"] = "error"
        res["message"] = f"device error code {res['error_code']} at pc {res['error_pc']:#x}"
    elif res["ddr_protocol_errors"]:
        res["status"] = "crash"
        res["message"] = f"{res['ddr_protocol_errors']} DDR protocol violation(s), see sim.log"
    else:
        res["status"] = "ok"
        res["message"] = f"halted after {res['cycles']} core cycles"
    log.info("%s (%.0f core cycles/s)", res["message"], res["sim_cycles_per_s"] or 0)
