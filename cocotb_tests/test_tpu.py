"""cocotb test: run one .tpubin on tb_top (tpu_top + DDR model) and write the results.

The job comes from environment variables (see cocotb_tests/harness.py, which sets them):
TPU_BIN, TPU_CONFIG, TPU_INPUTS, TPU_OUT, TPU_MAX_CYCLES, TPU_STALL_CYCLES, TPU_QUIET_CYCLES,
TPU_INTERNAL_CLOCKS, TPU_DEADLOCK_CYCLES (the same value as tb_top's +tpu_deadlock_cycles).

Sequence: preload DDR through ctypes (TpuBinary.ddr_segments, inputs blocked with their zero
point as fill) → start the three clocks with their configured phases (first rising edge of each
domain at phase + period, so every edge is at T0 + phase + k*period for a T0 that is a multiple
of all periods) → hold rst_ni low until T0 − 500 ps → wait for halted_o under a watchdog
(total cycle limit, and a stall limit: no retire for TPU_STALL_CYCLES core cycles) or for
tb_stuck_o (nothing happened for TPU_DEADLOCK_CYCLES core cycles: status "error" if error_o is
set, else "deadlock" naming the engines that wait for tokens, their head PCs and the missing
senders, docs/architecture.md "Device errors") →
wait TPU_QUIET_CYCLES core cycles → read the performance counters through perf_sel_i → read the
outputs from DDR → write <name>.npy and rtl_result.json into TPU_OUT. The retire trace is written
by tb_top itself (+tpu_retire_trace).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import First, RisingEdge, Timer
from cocotb.utils import get_sim_time

from cocotb_tests.harness import (
    DEFAULT_MAX_CYCLES,
    DEFAULT_QUIET_CYCLES,
    DEFAULT_STALL_CYCLES,
    RESULT_JSON,
    RETIRE_NAMES,
    DdrMem,
    config_from_json,
    counter_names,
    t0_ps,
)
from cocotb_tests.rtl_dump import start_scoped_dump, stop_scoped_dump
from tpusim.arch.binary import TpuBinary, input_blobs
from tpusim.arch.isa import ENGINE_NAMES, ERROR_NAMES
from tpusim.arch.timebase import Timebase


def _split(value: int, n: int, bits: int) -> list[int]:
    return [(value >> (i * bits)) & ((1 << bits) - 1) for i in range(n)]


async def _start_clock(sig, period_ps: int, first_edge_ps: int) -> None:
    await Timer(first_edge_ps, "ps")
    Clock(sig, period_ps, "ps").start(start_high=True)


def _device_error(dut, res) -> bool:
    """Record error_o's code (number and name), pc and the core edge it rose at; True if set."""
    err = bool(int(dut.error_o.value))
    code = int(dut.error_code_o.value)
    res["error_code"] = code
    res["error_name"] = ERROR_NAMES.get(code) if err else None
    res["error_pc"] = int(dut.error_pc_o.value)
    res["error_cycle"] = int(dut.tb_err_cycle_o.value) if err else None
    return err


def _waiting(dut) -> list:
    """[(engine, head pc, [senders whose token is missing])] for every engine whose queue head
    is visible, that is idle and misses a token (tb_top's head / token view)."""
    valid, busy = int(dut.tb_head_valid_o.value), int(dut.tb_busy_o.value)
    pcs = _split(int(dut.tb_head_pc_o.value), 4, 40)
    waits = _split(int(dut.tb_head_wait_o.value), 4, 4)
    avail = _split(int(dut.tb_tok_avail_o.value), 4, 4)
    out = []
    for e, name in enumerate(ENGINE_NAMES):
        miss = waits[e] & ~avail[e]
        if valid >> e & 1 and not busy >> e & 1 and miss:
            out.append([name, pcs[e], [ENGINE_NAMES[x] for x in range(4) if miss >> x & 1]])
    return out


def _describe(waiting: list) -> str:
    return "; ".join(f"{e} at pc {pc:#x} waits for a token from {', '.join(m)}"
                     for e, pc, m in waiting)


def _stuck(dut, res, now_cyc: int, quiet_cycles: int) -> None:
    """tb_stuck_o rose: nothing happened for ``quiet_cycles`` core cycles and no halt."""
    err = _device_error(dut, res)
    res["waiting"] = _waiting(dut)
    why = (f"no engine busy, no dispatch and no retire for {quiet_cycles} core cycles (at core "
           f"cycle {now_cyc}), decoder at pc {int(dut.tb_dec_pc_o.value):#x}")
    if err:
        res["status"] = "error"
        res["message"] = (f"device error {res['error_name']} at pc {res['error_pc']:#x} (core cycle "
                          f"{res['error_cycle']}); the device did not halt: {why}")
    elif res["waiting"]:
        res["status"] = "deadlock"
        res["message"] = f"deadlock: {why}; {_describe(res['waiting'])}"
    else:
        res["status"] = "timeout"
        res["message"] = f"{why}, but no engine waits for a token"


def _retire_book(dut, res) -> tuple[list[int], list[int]]:
    """Last retired PC and retire count per retire_o bit, as kept by tb_top."""
    last_pc = _split(int(dut.tb_last_pc_o.value), 5, 40)
    retired = _split(int(dut.tb_retired_o.value), 5, 32)
    res["last_pc"] = dict(zip(RETIRE_NAMES, last_pc))
    res["retired"] = dict(zip(RETIRE_NAMES, retired))
    return last_pc, retired


@cocotb.test()
async def run_tpubin(dut):
    await run_job(dut)


async def run_job(dut) -> None:
    """The whole run of the job in the environment (module docstring); fails (AssertionError)
    on a status other than ok / error / deadlock, after writing rtl_result.json. Also the body
    of each forked run of the RTL server (cocotb_tests/test_tpu_server.py)."""
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
    dumper = start_scoped_dump(dut, T0)   # cocotb_tests/rtl_dump.py: only with $TPU_DUMP_VCD
    try:
        await _run(dut, env, out, cfg, tb, T0, max_cycles, quiet, res)
    except Exception as e:  # keep the JSON truthful about how far we got
        res["status"], res["message"] = "crash", f"{type(e).__name__}: {e}"
        raise
    finally:
        stop_scoped_dump(dumper)
        (out / RESULT_JSON).write_text(json.dumps(res, indent=1))
    assert res["status"] in ("ok", "error", "deadlock"), res["message"]


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
    halted_evt, stuck_evt = RisingEdge(dut.halted_o), RisingEdge(dut.tb_stuck_o)
    seen, last_progress = None, 0
    status = None
    while True:
        now_cyc = (int(get_sim_time("ps")) - T0) // period
        step = min(poll, max_cycles - now_cyc)
        if step <= 0:
            status = "timeout"
            break
        trig = await First(halted_evt, stuck_evt, Timer(step * period, "ps"))
        if trig is halted_evt or int(dut.halted_o.value):
            break
        if trig is stuck_evt:
            status = "stuck"
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
    if status == "stuck":
        _retire_book(dut, res)
        _stuck(dut, res, (t_now - T0) // period, int(env.get("TPU_DEADLOCK_CYCLES", 0)))
        log.error(res["message"])
        return
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
    _device_error(dut, res)
    res["sim_cycles_per_s"] = halt_edge / sim_wall if sim_wall > 0 else None

    # ---- outputs
    for desc in binary.outputs:
        raw = mem.read(desc.ddr_addr, desc.size_bytes)
        np.save(out / f"{desc.name.replace('/', '_')}.npy", desc.from_blocked(raw))
        res["outputs"].append(desc.name)

    if int(dut.error_o.value):
        res["status"] = "error"
        res["message"] = (f"device error {res['error_code']} ({res['error_name']}) at pc "
                          f"{res['error_pc']:#x} (core cycle {res['error_cycle']}); halted after "
                          f"{res['cycles']} core cycles")
    elif res["ddr_protocol_errors"]:
        res["status"] = "crash"
        res["message"] = f"{res['ddr_protocol_errors']} DDR protocol violation(s), see sim.log"
    else:
        res["status"] = "ok"
        res["message"] = f"halted after {res['cycles']} core cycles"
    log.info("%s (%.0f core cycles/s)", res["message"], res["sim_cycles_per_s"] or 0)
