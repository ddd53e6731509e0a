"""SRAM banks + arbiter: fixed priority, no head-of-line blocking, banks free at g+D, conflict
counters, data integrity. 5 random requesters vs a Python reference of docs/architecture.md.
Bench top: tpu_sram itself (8x8 'small' config: 4 banks of 512 words). DP_SEED=<n> replays.
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import ReadOnly, RisingEdge
except ImportError:  # pragma: no cover
    cocotb = None

NREQ = 5         # tpu_sram's default NumReq: DMA LOAD, DMA STORE, MXU, VPU, MXU weights

if cocotb is not None and os.environ.get("COCOTB_TEST_MODULES"):

    class Port:
        def __init__(self):
            self.state = "idle"
            self.wake = 0
            self.base = self.n = self.k = self.mask = self.we = 0
            self.g = self.v = None
            self.data = []

    async def _run(dut, cycles: int, gap_max: int, len_max: int, extra_mask_p: float):
        s = int(os.environ.get("DP_SEED", random.randrange(1 << 30)))
        dut._log.info(f"DP_SEED={s}")
        rng = np.random.default_rng(s)
        W = len(dut.wdata_i) // NREQ // 8
        NB = len(dut.mask_i) // NREQ
        words = int(os.environ["DP_SRAM_WORDS"])
        bw = words // NB
        cocotb.start_soon(Clock(dut.clk_i, 1000, unit="ps").start())
        dut.rst_ni.value = 0
        for sig in ("req_i", "len_i", "mask_i", "addr_i", "we_i", "wdata_i"):
            getattr(dut, sig).value = 0
        dut.wgrp_i.value = (1 << len(dut.wgrp_i)) - 1     # whole-word writes (every lane group)
        await RisingEdge(dut.clk_i)
        dut.rst_ni.value = 1
        ports = [Port() for _ in range(NREQ)]
        mem = {}                      # word -> int (reference memory)
        free_at = [0] * NB            # first edge at which the bank can be granted
        conflicts = conflict_cycles = 0
        pred = set()                  # ports the model grants at the coming edge
        grants = 0
        pend_reads = []               # (port, addr) read in the previous cycle
        n_checked = 0
        drain = 300                   # last cycles: no new requests, everything completes
        for t in range(cycles + drain):
            await RisingEdge(dut.clk_i)
            # ---- drive cycle t
            for r, p in enumerate(ports):
                if p.state == "xfer":
                    p.k += 1
                    if p.k == p.n:
                        p.state, p.wake = "idle", t + int(rng.integers(0, gap_max + 1))
                if p.state == "idle" and t >= p.wake and t < cycles:
                    p.n = int(rng.integers(1, len_max + 1))
                    p.base = int(rng.integers(0, words - p.n + 1))
                    p.we = int(rng.integers(0, 2))
                    p.mask = sum(1 << b for b in range(NB) if p.base // bw <= b <= (p.base + p.n - 1) // bw)
                    if rng.random() < extra_mask_p:
                        p.mask |= 1 << int(rng.integers(0, NB))
                    p.data = [int(x) for x in rng.integers(0, 1 << 62, size=p.n)]
                    p.state, p.k, p.v = "req", 0, t + 1
            pk = lambda f, w: sum(f(p) << (w * r) for r, p in enumerate(ports))
            dut.req_i.value = pk(lambda p: int(p.state == "req"), 1)
            dut.len_i.value = pk(lambda p: p.n, 17)
            dut.mask_i.value = pk(lambda p: p.mask, NB)
            dut.addr_i.value = pk(lambda p: p.base + min(p.k, p.n - 1), 16)
            dut.we_i.value = pk(lambda p: int(p.we and p.state in ("req", "xfer")), 1)
            dut.wdata_i.value = pk(lambda p: p.data[min(p.k, p.n - 1)] & ((1 << W * 8) - 1), W * 8)
            await ReadOnly()
            # ---- check cycle t
            gnt = int(dut.gnt_o.value)
            got = {r for r in range(NREQ) if gnt >> r & 1}
            assert got == pred, f"cycle {t}: DUT granted {sorted(got)}, model {sorted(pred)}"
            rdata = int(dut.rdata_o.value)
            for r, a in pend_reads:
                val = rdata >> (r * W * 8) & ((1 << W * 8) - 1)
                if a in mem:
                    assert val == mem[a], f"cycle {t}: port {r} read word {a}: {val:#x} want {mem[a]:#x}"
                    n_checked += 1
            pend_reads = []
            for r in got:
                p = ports[r]
                p.state, p.g = "xfer", t
                grants += 1
                if t > p.v:
                    conflicts += 1
                    conflict_cycles += t - p.v
            # accesses of cycle t take effect at edge t+1
            for r, p in enumerate(ports):
                if p.state == "xfer":
                    a = p.base + p.k
                    if p.we:
                        mem[a] = p.data[p.k] & ((1 << W * 8) - 1)
                    else:
                        pend_reads.append((r, a))
            # ---- model: grants at edge t+1
            pred, taken = set(), {b for b in range(NB) if free_at[b] > t + 1}
            for r, p in enumerate(ports):
                if p.state == "req":
                    banks = {b for b in range(NB) if p.mask >> b & 1}
                    if not banks & taken:
                        pred.add(r)
                        taken |= banks
                        for b in banks:
                            free_at[b] = t + 1 + p.n
        await RisingEdge(dut.clk_i)
        await ReadOnly()
        hw_c, hw_cc = int(dut.sram_conflicts_o.value), int(dut.sram_conflict_cycles_o.value)
        assert all(p.state == "idle" for p in ports), "traffic did not drain"
        dut._log.info(f"{grants} grants, {n_checked} read words checked, conflicts {conflicts} / "
                      f"{conflict_cycles} cycles; hw {hw_c} / {hw_cc}")
        assert (hw_c, hw_cc) == (conflicts, conflict_cycles)
        return grants, conflicts, conflict_cycles

    @cocotb.test()
    async def arbiter_random_heavy(dut):
        """Dense traffic: many conflicts, lower-priority grants while a higher one waits."""
        g, c, cc = await _run(dut, 4000, gap_max=2, len_max=12, extra_mask_p=0.3)
        assert g > 300 and c > 50

    @cocotb.test()
    async def arbiter_random_light(dut):
        g, c, cc = await _run(dut, 3000, gap_max=20, len_max=40, extra_mask_p=0.1)
        assert g > 50


@pytest.mark.rtl
def test_dp_sram():
    from dp_harness import build_and_test, cfg_params
    p = cfg_params()
    build_and_test("sram", "tpu_sram", "test_dp_sram", p)
