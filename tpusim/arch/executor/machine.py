"""The architectural state and what every engine instruction does to it (docs/isa.md,
"Semantics"; docs/architecture.md), one instruction at a time, atomically.

State (``cfg`` = the HwConfig; W = word_bytes = array_rows = R, C = array_cols; R != C:
docs/architecture.md, "Non-square arrays": a REQUANT row fills C/R words or one C-byte lane group):
  ``sram``     int8 [sram_words, W]: SRAM word k = bytes k*W .. k*W + W - 1
  ``acc``      int64 [acc_depth_rows, C] holding int32 values (wrap-around on accumulate)
  ``weights``  int8 [R, C], the loaded tile: ``weights[k][n]`` = byte k of tile word n
  ``qregs``    dict quant register index -> (multiplier, shift, zero_point); a key is a valid bit
  ``ddr``      the sparse DDR (``tpusim.arch.ddr_memory.DdrMemory``, 2^40 bytes)
Arithmetic: ``tpusim.arch.arith`` only. Operand addresses: ``tpusim.arch.operands``. Before
anything else, ``execute`` runs the instruction's device checks (``tpusim.arch.device_checks``)
and raises their ``DeviceError``. Zero-size operations follow docs/architecture.md,
clarification 6: MATMUL with M = 0, POOL, DWCONV, ADD and MUL with no output do nothing (REQUANT and LUT
with count 0 still read their table); a POOL window of 0 taps gives -128 (max) and
``pool_avg(0, 0, ...)`` (average), as the SimPy model and the RTL.

``observe``: optional callable(event: str, index: int, **info), told what the data looked like
(stressgen's coverage bins): ``weights`` (wts), ``matmul`` (args), ``qreg_load`` (qreg, value),
``qreg_read`` (qreg, value, field; each quant register read, in field order), ``requant`` /
``add`` (x: the int32 values requantised last, mult, shift, zp, relu; REQUANT_ADD: both), ``pool_avg`` (x, mult,
shift, zp), ``mul`` (x: the int32 products requantised, mult, shift, zp, relu), ``lut`` (x: the
int8 inputs, table: int8[256]), ``dwconv`` (x: the int32 sums with bias requantised, mult,
shift, zp, relu), ``softmax`` / ``layernorm`` (the row statistics: ``tpusim.arch.rowops.run_rowop``).
"""
from __future__ import annotations

import numpy as np

from tpusim.arch import arith
from tpusim.arch.ddr_memory import DdrMemory
from tpusim.arch.device_checks import start_fault, where
from tpusim.arch.isa import INSTR_BYTES, Instruction
from tpusim.arch.operands import (
    LUT_TABLE_BYTES,
    REQUANT_TABLE_BYTES_PER_CHANNEL,
    dma_runs,
    last_writes,
    lut_table,
    matmul_words,
    pool_taps,
    requant_add_store,
    requant_table,
    requant_writes,
)
from tpusim.arch.rowops import run_rowop

#: The max-pool result of a window without taps (every lane).
POOL_MAX_EMPTY = -128


def _no_observer(event: str, index: int, **info) -> None:
    pass


class Machine:
    """Architectural state of one device and the semantics of its instructions (module
    docstring). ``ddr``: the DDR to run on (a new, empty one if None)."""

    def __init__(self, cfg, ddr: DdrMemory | None = None, observe=None) -> None:
        self.cfg = cfg
        self.W, self.C, self.R = cfg.word_bytes, cfg.array_cols, cfg.array_rows
        self.sram = np.zeros((cfg.sram_words, self.W), np.int8)
        self.acc = np.zeros((cfg.acc_depth_rows, self.C), np.int64)
        self.weights = np.zeros((self.R, self.C), np.int8)
        self.qregs: dict[int, tuple[int, int, int]] = {}
        self.ddr = DdrMemory() if ddr is None else ddr
        self.observe = observe or _no_observer

    def execute(self, index: int, ins: Instruction) -> None:
        """Run instruction ``index`` of the program (pc = index * 32) atomically. Raises the
        DeviceError of its first failing device check, doing nothing; SimulationError for a
        DDR access outside 2^40 bytes."""
        fault = start_fault(ins, self.cfg, self.qregs)
        if fault is not None:
            raise fault.error(where(index, ins.op), index * INSTR_BYTES)
        getattr(self, "_" + ins.op.lower())(index, ins.args)

    def _flat_sram(self) -> np.ndarray:
        return self.sram.reshape(-1)

    def _nop(self, i, a):
        pass

    def _dma_load(self, i, a):
        flat = self._flat_sram()
        for d, s, n in dma_runs(a):
            flat[s:s + n] = np.frombuffer(self.ddr.read(d, n), np.int8)

    def _dma_store(self, i, a):
        flat = self._flat_sram()
        for d, s, n in dma_runs(a):
            self.ddr.write(d, flat[s:s + n].tobytes())

    def _load_weights(self, i, a):
        self.weights = self.sram[a["sram_addr"]:a["sram_addr"] + self.C].T.copy()     # [k][n]
        self.observe("weights", i, wts=self.weights)

    def _matmul(self, i, a):
        idx = matmul_words(a)
        if not idx:
            return
        y = arith.matmul_acc(self.sram[idx], self.weights).astype(np.int64)
        rows = slice(a["acc_addr"], a["acc_addr"] + len(idx))
        self.acc[rows] = arith.wrap32(self.acc[rows] + y) if a["accumulate"] else y
        self.observe("matmul", i, args=a)

    def _load_qreg(self, i, a):
        self.qregs[a["qreg"]] = (a["multiplier"], a["shift"], a["zero_point"])
        self.observe("qreg_load", i, qreg=a["qreg"], value=self.qregs[a["qreg"]])

    def _qreg(self, i, field, idx):
        self.observe("qreg_read", i, qreg=idx, value=self.qregs[idx], field=field)
        return self.qregs[idx]

    def _table(self, a, c: int):
        """(bias, mult, shift) int64 [c] of the per-channel table at word ``param_addr``."""
        start = a["param_addr"] * self.W
        raw = self._flat_sram()[start:start + REQUANT_TABLE_BYTES_PER_CHANNEL * c].tobytes()
        return tuple(v.astype(np.int64) for v in requant_table(raw, c))

    def _requant(self, i, a):
        c, n = self.C, a["count"]
        bias, mult, shift = self._table(a, c)
        zp = self._qreg(i, "qreg", a["qreg"])[2]
        if n == 0:
            return
        out, words, lo, hi = self._requant_rows(i, a, (bias, mult, shift), zp)
        keep = last_writes(words)
        self.sram[words[keep], lo:hi] = out[keep]

    def _requant_rows(self, i, a, table, zp):
        """REQUANT's values in write order (``requant_writes``): (int8 [writes, lanes], words, lo, hi)."""
        bias, mult, shift = table
        acc = self.acc[a["acc_addr"]:a["acc_addr"] + a["count"]]
        self.observe("requant", i, x=arith.sat32(acc + bias), mult=mult, shift=shift, zp=zp, relu=a["relu"])
        out = arith.requant_conv(acc, bias, mult, shift, zp, bool(a["relu"]))
        words, lo, hi = requant_writes(a, self.cfg.requant_planes, self.cfg.lane_groups, self.C)
        return out.reshape(len(words), hi - lo), words, lo, hi

    def _requant_add(self, i, a):
        c, n = self.C, a["count"]
        bias, mult, shift = self._table(a, c)
        ma, sa, za = self._qreg(i, "qreg", a["qreg"])
        mb, sb, zb = self._qreg(i, "qreg_b", a["qreg_b"])
        mo, so, zo = self._qreg(i, "qreg_out", a["qreg_out"])
        if n == 0:
            return
        out, words, lo, hi = self._requant_rows(i, a, (bias, mult, shift), za)
        sums = []

        def add(x_a, x_b):
            sums.append(arith.add_sum_int32(x_a, x_b, za, ma, sa, zb, mb, sb))
            return arith.add_output_int8(sums[-1], zo, mo, so, bool(a["add_relu"]))
        requant_add_store(self.sram, a, out, words, lo, hi, add)
        self.observe("add", i, x=np.concatenate([np.reshape(x, (-1,)) for x in sums]), mult=mo, shift=so, zp=zo,
                     relu=a["add_relu"])

    def _pool(self, i, a):
        outs = a["out_w"] * a["out_h"]
        if outs == 0:
            return
        taps = a["win_w"] * a["win_h"]
        vals = self.sram[pool_taps(a)].reshape(outs, taps, self.W).astype(np.int64)
        if a["mode"]:
            zi = self._qreg(i, "qreg_in", a["qreg_in"])[2]
            m, s, zo = self._qreg(i, "qreg_out", a["qreg_out"])
            sums = vals.sum(axis=1)
            self.observe("pool_avg", i, x=arith.sat32(sums - taps * zi), mult=m, shift=s, zp=zo)
            out = arith.pool_avg(sums, taps, zi, m, s, zo)
        else:
            out = vals.max(axis=1, initial=POOL_MAX_EMPTY).astype(np.int8)
        self.sram[a["dst_addr"]:a["dst_addr"] + outs] = out

    def _add(self, i, a):
        n = a["count"]
        if n == 0:
            return
        ma, sa, za = self._qreg(i, "qreg_a", a["qreg_a"])
        mb, sb, zb = self._qreg(i, "qreg_b", a["qreg_b"])
        mo, so, zo = self._qreg(i, "qreg_out", a["qreg_out"])
        s = arith.add_sum_int32(self.sram[a["src_a"]:a["src_a"] + n], self.sram[a["src_b"]:a["src_b"] + n],
                                za, ma, sa, zb, mb, sb)
        self.observe("add", i, x=s, mult=mo, shift=so, zp=zo, relu=a["relu"])
        self.sram[a["dst_addr"]:a["dst_addr"] + n] = arith.add_output_int8(s, zo, mo, so, bool(a["relu"]))

    def _mul(self, i, a):
        n = a["count"]
        if n == 0:
            return
        za = self._qreg(i, "qreg_a", a["qreg_a"])[2]
        zb = self._qreg(i, "qreg_b", a["qreg_b"])[2]
        mo, so, zo = self._qreg(i, "qreg_out", a["qreg_out"])
        x_a = self.sram[a["src_a"]:a["src_a"] + n].astype(np.int64)
        x_b = self.sram[a["src_b"]:a["src_b"] + (n if a["stride_b"] else 1)].astype(np.int64)
        self.observe("mul", i, x=(x_a - za) * (x_b - zb), mult=mo, shift=so, zp=zo, relu=a["relu"])
        self.sram[a["dst_addr"]:a["dst_addr"] + n] = arith.mul_int8(x_a, x_b, za, zb, zo, mo, so, bool(a["relu"]))

    def _dwconv(self, i, a):
        outs, taps = a["out_w"] * a["out_h"], a["win_w"] * a["win_h"]
        if outs == 0:
            return
        bias, mult, shift = self._table(a, self.W)        # one channel per lane
        zi = self._qreg(i, "qreg_in", a["qreg_in"])[2]
        zo = self._qreg(i, "qreg_out", a["qreg_out"])[2]
        vals = self.sram[pool_taps(a)].reshape(outs, taps, self.W)
        wts = self.sram[a["wt_addr"]:a["wt_addr"] + taps]
        acc = arith.depthwise_acc(vals, wts, zi)
        self.observe("dwconv", i, x=arith.sat32(acc + bias), mult=mult, shift=shift, zp=zo, relu=a["relu"])
        self.sram[a["dst_addr"]:a["dst_addr"] + outs] = arith.requant_conv(acc, bias, mult, shift, zo,
                                                                           bool(a["relu"]))

    def _lut(self, i, a):
        n, start = a["count"], a["table_addr"] * self.W
        table = lut_table(self._flat_sram()[start:start + LUT_TABLE_BYTES].tobytes())
        if n == 0:
            return
        x = self.sram[a["src_addr"]:a["src_addr"] + n]
        self.observe("lut", i, x=x, table=table)
        self.sram[a["dst_addr"]:a["dst_addr"] + n] = arith.lut_int8(x, table)

    def _rowop(self, i, a, op):
        if a["rows"] * a["row_len"] == 0:
            return
        q = self._qreg(i, "qreg_out", a["qreg_out"])
        run_rowop(op, self.sram, a, q, observe=lambda event, **info: self.observe(event, i, **info))

    def _softmax(self, i, a):
        self._rowop(i, a, "SOFTMAX")

    def _layernorm(self, i, a):
        self._rowop(i, a, "LAYERNORM")


__all__ = ["Machine", "POOL_MAX_EMPTY"]
