"""cocotb-side helpers for dp_tb_top (datapath unit benches): SRAM bursts, engine runs."""
from __future__ import annotations

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tpusim.arch import isa


class DpTb:
    def __init__(self, dut):
        self.dut = dut
        self.W = len(dut.tb_wdata_i) // 16                 # bytes per word (2 ports)
        self.NB = len(dut.tb_mask_i) // 2
        self.C = len(dut.acc_data_o) // 32
        self.port = [dict(req=0, len=0, mask=0, addr=0, we=0, wdata=0) for _ in range(2)]

    async def start(self, sram_words: int):
        self.sram_words = sram_words
        self.bank_words = sram_words // self.NB
        cocotb.start_soon(Clock(self.dut.clk_i, 1000, unit="ps").start())
        d = self.dut
        d.rst_ni.value = 0
        for s in ("mxu_start_i", "vpu_start_i", "tb_acc_sel_i", "tb_acc_addr_i", "tb_accsrc_i",
                  "tb_accmem_we_i", "tb_accmem_addr_i", "tb_accmem_data_i"):
            getattr(d, s).value = 0
        d.mxu_instr_i.value = 0
        d.vpu_instr_i.value = 0
        self._apply()
        await RisingEdge(d.clk_i)
        await RisingEdge(d.clk_i)
        d.rst_ni.value = 1
        await RisingEdge(d.clk_i)

    def _apply(self):
        d, WB = self.dut, self.W * 8
        pk = lambda key, w: sum(self.port[p][key] << (w * p) for p in range(2))
        d.tb_req_i.value = pk("req", 1)
        d.tb_len_i.value = pk("len", 17)
        d.tb_mask_i.value = pk("mask", self.NB)
        d.tb_addr_i.value = pk("addr", 16)
        d.tb_we_i.value = pk("we", 1)
        d.tb_wdata_i.value = pk("wdata", WB)

    def span(self, first: int, last: int) -> int:
        return sum(1 << b for b in range(self.NB)
                   if first // self.bank_words <= b <= last // self.bank_words)

    def word_int(self, lanes) -> int:
        return int.from_bytes(np.asarray(lanes, dtype=np.int8).tobytes(), "little")

    def int_word(self, v: int) -> np.ndarray:
        return np.frombuffer(int(v).to_bytes(self.W, "little"), dtype=np.int8).copy()

    async def burst(self, p: int, base: int, words=None, n: int | None = None):
        """Port p burst at consecutive words: write `words` (list of int) or read n words.
        Returns (list of read ints, grant cycle)."""
        d = self.dut
        n = len(words) if words is not None else n
        st = self.port[p]
        st.update(req=1, len=n, mask=self.span(base, base + n - 1), addr=base,
                  we=int(words is not None), wdata=words[0] if words is not None else 0)
        self._apply()
        g = None
        k = 0
        out = []
        while True:
            await ReadOnly()
            if g is None and (int(d.tb_gnt_o.value) >> p) & 1:
                g = int(d.cyc_o.value)
            if g is not None and words is None and k >= 1:
                out.append((int(d.tb_rdata_o.value) >> (p * self.W * 8)) & ((1 << self.W * 8) - 1))
            await RisingEdge(d.clk_i)
            if g is not None:
                k += 1
                st["req"] = 0
                if k >= n:
                    if words is None and len(out) < n:
                        # last read data shows in cycle g+n
                        await ReadOnly()
                        out.append((int(d.tb_rdata_o.value) >> (p * self.W * 8)) & ((1 << self.W * 8) - 1))
                        await RisingEdge(d.clk_i)
                    st.update(req=0, we=0, addr=0, wdata=0)
                    self._apply()
                    return out, g
                st["addr"] = base + k
                if words is not None:
                    st["wdata"] = words[k]
            self._apply()

    async def write_words(self, base, words):
        return (await self.burst(0, base, words=[int(w) for w in words]))[1]

    async def read_words(self, base, n):
        return (await self.burst(1, base, n=n))[0]

    async def run(self, engine: str, ins: isa.Instruction, wait_done: bool = True):
        """Start `ins` on 'mxu' or 'vpu' at the next edge; returns (s, g, c) from the bench."""
        d = self.dut
        start, instr = getattr(d, f"{engine}_start_i"), getattr(d, f"{engine}_instr_i")
        cnt0 = int(getattr(d, f"{engine}_done_cnt_o").value)
        await RisingEdge(d.clk_i)
        instr.value = int.from_bytes(isa.encode(ins), "little")
        start.value = 1
        await ReadOnly()
        self.last_err = (int(d.qreg_err_o.value), int(d.qreg_err_idx_o.value))
        await RisingEdge(d.clk_i)
        start.value = 0
        if not wait_done:
            return None
        done_cnt = getattr(d, f"{engine}_done_cnt_o")
        while int(done_cnt.value) == cnt0:
            await done_cnt.value_change
        await ReadOnly()
        s = int(getattr(d, f"{engine}_s_o").value)
        g = int(getattr(d, f"{engine}_g_o").value)
        c = int(getattr(d, f"{engine}_c_o").value)
        await RisingEdge(d.clk_i)
        return s, g, c

    async def read_acc(self, row: int) -> np.ndarray:
        d = self.dut
        await RisingEdge(d.clk_i)
        d.tb_acc_sel_i.value = 1
        d.tb_acc_addr_i.value = row
        await RisingEdge(d.clk_i)
        await ReadOnly()
        v = int(d.acc_data_o.value)
        await RisingEdge(d.clk_i)
        d.tb_acc_sel_i.value = 0
        return np.frombuffer(v.to_bytes(self.C * 4, "little"), dtype=np.int32).copy()

    async def run_from_accmem(self, ins):
        """``run("vpu", ins)`` with the VPU reading the bench-side accumulator rows
        (``write_accmem``) instead of the MXU's: (start, grant, completion) cycles."""
        self.dut.tb_accsrc_i.value = 1
        out = await self.run("vpu", ins)
        self.dut.tb_accsrc_i.value = 0
        return out

    async def write_accmem(self, rows) -> None:
        """Fill the bench-side accumulator rows 0.. with int32 rows (C lanes each)."""
        d = self.dut
        for r, row in enumerate(rows):
            await RisingEdge(d.clk_i)
            d.tb_accmem_we_i.value = 1
            d.tb_accmem_addr_i.value = r
            d.tb_accmem_data_i.value = int.from_bytes(np.asarray(row, dtype=np.int64)
                                                      .astype(np.int32).tobytes(), "little")
        await RisingEdge(d.clk_i)
        d.tb_accmem_we_i.value = 0
