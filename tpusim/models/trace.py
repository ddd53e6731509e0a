"""Architectural signal trace of the SimPy model, written as a VCD (pyvcd) after the run.

Every signal changes at a clock edge that docs/architecture.md defines, and has the same meaning,
width and reset value as an RTL register (``waves/arch_map.yaml`` maps each name to it; the
testbench probe ``cocotb_tests/tb/tb_arch_probe.sv`` dumps those registers), so for a valid
program the model dump and the RTL ``waves="arch"`` dump are identical at every ps. Times are ps
from core edge 0; "at e" = the register takes the value at edge e.

Signals (``ENGINES`` = load, store, mxu, vpu; requester ids = engine ids = SRAM priority):
  tpu.<eng>.busy           1  1 while an instruction is in flight: from a start edge s to the
                             completion edge c of the last one started (NOP too)
  tpu.<eng>.issue_pc      40  PC (byte offset) of the instruction started at s
  tpu.<eng>.retire_pc     40  PC of the instruction retired at c
  tpu.<eng>.retired       64  retire count, +1 at c
  tpu.<eng>.retire_digest 32  at c: digest of every word the instruction wrote (``digest_*``):
                              LOAD SRAM bytes, STORE DDR bytes, MXU accumulator words, VPU SRAM
                              bytes; order-independent (a sum of per-write hashes)
  tpu.dec.pc              40  next PC to dispatch: +32 at every dispatch edge (HALT included)
  tpu.dec.stopped / halt_pc   set at h0 (HALT or reserved opcode dispatched)
  tpu.dec.halted           1  set at h;  tpu.dec.halt_retire  1 during core cycle h
  tpu.fetch.req_addr/req_tgl  DDR address of the line launched at e / toggles at each launch
  tpu.ddr.cmd_valid/cmd_we/cmd_addr   beat command register: beat i of a burst granted at g is
                              registered at g+i (i < B, address BEAT-aligned), idle from g+B
  tpu.ddr.grant            2  requester holding the command bus over [g, g+B); 3 idle
  tpu.ddr.grant_addr/grant_bytes      byte address and size of the burst granted at g
  tpu.ddr.{fetch,rd,wr}_served        grants per requester (fetch: toggle; DMA: mod 256), at g
  tpu.ddr.{fetch,rd,wr}_done          completions per requester at done = g + L + B - 1
  tpu.{load,store}.a_cnt / a_done / b_cnt / b_done   per-channel burst counters (mod 256):
                              LOAD a = DDR read (launch r_j, seen d_j), b = SRAM write (launch
                              e_j, seen f_j); STORE a = SRAM read (r_j, d_j), b = DDR write (d_j, f_j)
  tpu.sram.gnt             5  bit r during core cycle g of requester r's grant
  tpu.sram.wait            5  bit r over [v, g) of a conflicting request (granted at g > v)
  tpu.sram.conflicts      64  +1 at v of every conflicting request
  tpu.sram.hold_<req>  banks  bank mask of the requester's transaction over [g, g+D)
                              (``SRAM_REQUESTERS``: the engines, then mxuw = the MXU's weight port)
  tpu.qreg.wr_idx/wr_val/writes   LOAD_QREG write at s+1: index, {mult, shift, zp}, count
  tpu.qreg.rd / reads      read ports used by the VPU instruction started at s, recorded at
                              s+1: {enable[2:0], idx2, idx1, idx0} (6 bits each), count
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from vcd import VCDWriter

from tpusim.arch.fileio import write_text_atomic
from tpusim.arch.isa import ENGINE_KEYS, ENGINE_NAMES, SRAM_REQUESTERS

RETIRERS = ENGINE_NAMES + ("HALT",)
ENGINES = ENGINE_KEYS                                      # load, store, mxu, vpu
DDR_IDLE = 3
DDR_REQ = ("fetch", "rd", "wr")
SRAM_KIND, DDR_KIND, ACC_KIND = 1, 2, 3
_M64 = (1 << 64) - 1
_K_ADDR, _K_VAL, _K_MIX = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0xBF58476D1CE4E5B9
_SET, _ADD, _BIT = 0, 1, 2


def signal_table(cfg) -> dict[str, tuple[int, int]]:
    """Model signal name -> (width_bits, reset value), in dump order."""
    t: dict[str, tuple[int, int]] = {}
    for e in ENGINES:
        t.update({f"tpu.{e}.busy": (1, 0), f"tpu.{e}.issue_pc": (40, 0),
                  f"tpu.{e}.retire_pc": (40, 0), f"tpu.{e}.retired": (64, 0),
                  f"tpu.{e}.retire_digest": (32, 0)})
    t.update({"tpu.dec.pc": (40, 0), "tpu.dec.stopped": (1, 0), "tpu.dec.halt_pc": (40, 0),
              "tpu.dec.halted": (1, 0),
              "tpu.dec.halt_retire": (1, 0), "tpu.fetch.req_addr": (40, 0),
              "tpu.fetch.req_tgl": (1, 0), "tpu.ddr.cmd_valid": (1, 0), "tpu.ddr.cmd_we": (1, 0),
              "tpu.ddr.cmd_addr": (40, 0), "tpu.ddr.grant": (2, DDR_IDLE),
              "tpu.ddr.grant_addr": (40, 0), "tpu.ddr.grant_bytes": (16, 0)})
    for r in DDR_REQ:
        w = 1 if r == "fetch" else 8
        t.update({f"tpu.ddr.{r}_served": (w, 0), f"tpu.ddr.{r}_done": (w, 0)})
    for ch in ENGINES[:2]:
        t.update({f"tpu.{ch}.{c}": (8, 0) for c in ("a_cnt", "a_done", "b_cnt", "b_done")})
    n = len(SRAM_REQUESTERS)
    t.update({"tpu.sram.gnt": (n, 0), "tpu.sram.wait": (n, 0), "tpu.sram.conflicts": (64, 0)})
    t.update({f"tpu.sram.hold_{e}": (cfg.sram_banks, 0) for e in SRAM_REQUESTERS})
    t.update({"tpu.qreg.wr_idx": (6, 0), "tpu.qreg.wr_val": (48, 0), "tpu.qreg.writes": (32, 0),
              "tpu.qreg.rd": (21, 0), "tpu.qreg.reads": (32, 0)})
    return t


# ------------------------------------------------------------------------------------ digests
def _mix(kind: int, addr: np.ndarray, val: np.ndarray) -> int:
    """Sum (mod 2^64) of the per-write hashes; addr and val uint64 arrays of equal length."""
    with np.errstate(over="ignore"):
        x = (np.uint64(kind << 56) ^ (addr * np.uint64(_K_ADDR))) ^ (val * np.uint64(_K_VAL))
        x ^= x >> np.uint64(31)
        x *= np.uint64(_K_MIX)
        x ^= x >> np.uint64(29)
    return int(x.sum(dtype=np.uint64)) if x.size else 0


def digest_bytes(kind: int, base_addr: int, data) -> int:
    """Hash sum of writing ``data`` (bytes) at byte addresses ``base_addr + j`` (kind SRAM_KIND or
    DDR_KIND). The RTL probe computes the same function per written byte."""
    buf = np.frombuffer(bytes(data), dtype=np.uint8).astype(np.uint64)
    addr = np.arange(base_addr, base_addr + len(buf), dtype=np.uint64)
    return _mix(kind, addr, buf)


def digest_acc(first_row: int, rows: np.ndarray) -> int:
    """Hash sum of writing int32 accumulator ``rows`` [n, C] at rows ``first_row..``: one write
    per (row, col) at word address ``row * C + col``, value as uint32."""
    rows = np.asarray(rows)
    n, cols = rows.shape
    addr = np.arange(first_row * cols, (first_row + n) * cols, dtype=np.uint64)
    val = rows.reshape(-1).astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)
    return _mix(ACC_KIND, addr, val)


def fold32(total: int) -> int:
    """The 32-bit digest dumped at retire from a 64-bit hash sum."""
    total &= _M64
    return (total ^ (total >> 32)) & 0xFFFFFFFF


def vpu_dst_words(instr) -> tuple[int, int]:
    """(first SRAM word, word count) a REQUANT / REQUANT_ADD / POOL / ADD / MUL / LUT / DWCONV writes; (0, 0) for
    other opcodes. REQUANT: its first plane (R = C: all it writes; planes and lane groups of a
    non-square array: ``tpusim.arch.operands.requant_writes``)."""
    a = instr.args
    if instr.op in ("REQUANT", "REQUANT_ADD", "ADD", "MUL", "LUT"):
        return a["dst_addr"], a["count"]
    if instr.op in ("POOL", "DWCONV"):
        return a["dst_addr"], a["out_w"] * a["out_h"]
    return 0, 0


def qreg_read_ports(instr) -> list[int | None]:
    """Quant register index on each of the VPU's 3 read ports (None = unused), as the RTL wires
    them: REQUANT, SOFTMAX, LAYERNORM qreg / qreg_out; REQUANT_ADD qreg, qreg_b, qreg_out; POOL average and DWCONV qreg_in, qreg_out (max: none); ADD and MUL qreg_a, qreg_b,
    qreg_out."""
    a = instr.args
    if instr.op == "REQUANT":
        return [a["qreg"], None, None]
    if instr.op == "REQUANT_ADD":
        return [a["qreg"], a["qreg_b"], a["qreg_out"]]
    if instr.op == "POOL":
        return [a["qreg_in"], a["qreg_out"], None] if a["mode"] else [None, None, None]
    if instr.op == "DWCONV":
        return [a["qreg_in"], a["qreg_out"], None]
    if instr.op in ("SOFTMAX", "LAYERNORM"):
        return [a["qreg_out"], None, None]
    if instr.op in ("ADD", "MUL"):
        return [a["qreg_a"], a["qreg_b"], a["qreg_out"]]
    return [None, None, None]


# ------------------------------------------------------------------------------------ trace
@dataclass(frozen=True)
class _Periods:
    core: int
    ddr: int


class Trace:
    """Collects (time_ps, op, signal, value) events while the model runs (events may lie in the
    future of the simulation clock); ``write(path)`` applies them in time order and dumps a VCD.
    ``bind(cfg, clocks)`` (done by ``Tpu``) must come first."""

    def __init__(self) -> None:
        self.events: list[tuple[int, int, str, int, object]] = []   # (t, seq, sig, op, value)
        self.table: dict[str, tuple[int, int]] = {}
        self._writes: list[list] = [[] for _ in ENGINES]   # writes of the running instructions
        # DMA writes with their edges (time ps, kind, byte address, bytes): an instruction's digest
        # takes those before its completion (the next instruction of the channel may be writing)
        self._timed: list[list] = [[] for _ in ENGINES]
        self._inflight = [0] * len(ENGINES)                 # started, not yet retired
        self.end_ps = 0

    def bind(self, cfg, clocks) -> None:
        self.cfg = cfg
        self.table = signal_table(cfg)
        self.p = _Periods(clocks.core.period_ps, clocks.ddr.period_ps)

    # ---------------------------------------------------------------- primitive events
    def _ev(self, t_ps: int, sig: str, op: int, val) -> None:
        self.events.append((t_ps, len(self.events), sig, op, val))

    def _set(self, t_ps: int, sig: str, val: int) -> None:
        self._ev(t_ps, sig, _SET, val)

    def _add(self, t_ps: int, sig: str, n: int = 1) -> None:
        self._ev(t_ps, sig, _ADD, n)

    def _bit(self, t_ps: int, sig: str, bit: int, val: int) -> None:
        self._ev(t_ps, sig, _BIT, (bit, val))

    # ---------------------------------------------------------------- engines
    def start(self, engine: int, s_ps: int, pc: int) -> None:
        e = ENGINES[engine]
        self._inflight[engine] += 1
        self._set(s_ps, f"tpu.{e}.busy", 1)
        self._set(s_ps, f"tpu.{e}.issue_pc", pc)

    def retire(self, engine: int, c_ps: int, pc: int) -> None:
        e = ENGINES[engine]
        self._inflight[engine] -= 1
        self._set(c_ps, f"tpu.{e}.busy", int(self._inflight[engine] > 0))
        self._set(c_ps, f"tpu.{e}.retire_pc", pc)
        self._add(c_ps, f"tpu.{e}.retired")
        self._set(c_ps, f"tpu.{e}.retire_digest", fold32(self._digest(engine, c_ps)))

    def _digest(self, engine: int, c_ps: int) -> int:
        """Hash sum of the writes recorded since the engine's previous retire (then cleared), and
        of the timed ones before ``c_ps``."""
        writes, self._writes[engine] = self._writes[engine], []
        timed = self._timed[engine]
        if timed:
            writes += [(k, a, d) for t, k, a, d in timed if t < c_ps]
            self._timed[engine] = [w for w in timed if w[0] >= c_ps]
        if not writes:
            return 0
        if writes[0][0] == ACC_KIND:
            return sum(_mix(ACC_KIND, addr, val) for _, addr, val in writes)
        kind = writes[0][0]
        data = np.frombuffer(b"".join(d for _, _, d in writes), dtype=np.uint8).astype(np.uint64)
        addr = np.concatenate([np.arange(a, a + len(d), dtype=np.uint64) for _, a, d in writes])
        return _mix(kind, addr, data)

    def wrote_sram(self, engine: int, byte_addr: int, data) -> None:
        self._writes[engine].append((SRAM_KIND, byte_addr, bytes(data)))

    def wrote_timed(self, engine: int, kind: int, byte_addr: int, data, t0_ps: int, step_ps: int,
                    unit_bytes: int) -> None:
        """A DMA burst's writes: the bytes of its ``i``-th ``unit_bytes``-aligned unit (an SRAM
        word, a DDR beat) counted at ``t0_ps + i * step_ps``."""
        data = bytes(data)
        base = byte_addr - byte_addr % unit_bytes
        ends = list(range(base + unit_bytes, byte_addr + len(data), unit_bytes)) + [byte_addr + len(data)]
        a = byte_addr
        for i, e in enumerate(ends):
            self._timed[engine].append((t0_ps + i * step_ps, kind, a, data[a - byte_addr:e - byte_addr]))
            a = e

    def wrote_ddr(self, engine: int, byte_addr: int, data) -> None:
        self._writes[engine].append((DDR_KIND, byte_addr, bytes(data)))

    def wrote_acc(self, engine: int, first_row: int, rows, keep=None) -> None:
        """int32 ``rows`` [n, C] written at accumulator rows ``first_row..``; ``keep`` (bool
        [n, C], None: all) selects the elements to digest now (the MXU's drain overlap digests
        the rest at the previous instruction's completion)."""
        rows = np.asarray(rows)
        n, cols = rows.shape
        addr = np.arange(first_row * cols, (first_row + n) * cols, dtype=np.uint64)
        val = rows.reshape(-1).astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)
        if keep is not None:
            addr, val = addr[np.asarray(keep).reshape(-1)], val[np.asarray(keep).reshape(-1)]
        self._writes[engine].append((ACC_KIND, addr, val))

    def wrote_requant(self, engine: int, words, lo: int, vals, word_bytes: int) -> None:
        """REQUANT's writes in access order (``tpusim.arch.operands.requant_writes``): write t
        puts int8 ``vals[t]`` into lanes ``lo ..`` of SRAM word ``words[t]`` (every write is
        digested, as the RTL probe digests every enabled byte on the write port)."""
        for w, v in zip(words.tolist(), vals):
            self.wrote_sram(engine, w * word_bytes + lo, v.tobytes())

    def wrote_words(self, engine: int, words, vals, word_bytes: int) -> None:
        """Whole-word writes in access order: int8 ``vals[t]`` (W bytes) into SRAM word
        ``words[t]`` (SOFTMAX / LAYERNORM: ``tpusim.arch.rowops.run_rowop``'s ``on_write``)."""
        for w, v in zip(np.asarray(words).ravel().tolist(), np.asarray(vals).reshape(-1, word_bytes)):
            self.wrote_sram(engine, w * word_bytes, v.tobytes())

    def wrote_vpu(self, engine: int, instr, sram) -> None:
        """The VPU instruction's output words, read back from ``sram`` right after its effect."""
        first, n = vpu_dst_words(instr)
        w = sram.word_bytes
        self.wrote_sram(engine, first * w, sram.read_bytes(first * w, n * w))

    # ---------------------------------------------------------------- decoder and fetch
    def dispatch(self, e_ps: int, pc: int) -> None:
        self._set(e_ps, "tpu.dec.pc", pc + 32)

    def halt_dispatch(self, h0_ps: int, pc: int, error_code: int = 0) -> None:
        """HALT or a reserved opcode (``error_code`` 1, not dumped: device errors are compared
        by their own report) dispatched at h0."""
        self.dispatch(h0_ps, pc)
        self._set(h0_ps, "tpu.dec.stopped", 1)
        self._set(h0_ps, "tpu.dec.halt_pc", pc)

    def error_stop(self, e_ps: int, pc: int) -> None:
        """A device error stops dispatch at e (nothing dispatched; halt_pc = the PC not
        dispatched), as the RTL decoder does."""
        self._set(e_ps, "tpu.dec.stopped", 1)
        self._set(e_ps, "tpu.dec.halt_pc", pc)

    def halt_retire(self, h_ps: int) -> None:
        self._set(h_ps, "tpu.dec.halted", 1)
        self._set(h_ps, "tpu.dec.halt_retire", 1)
        self._set(h_ps + self.p.core, "tpu.dec.halt_retire", 0)

    # ---------------------------------------------------------------- DDR arbiter
    def ddr_request(self, requester: int, launch_ps: int, addr: int) -> None:
        """A DDR request launched at ``launch_ps`` (fetch line, DMA read j, DMA write j)."""
        if requester == 0:
            self._set(launch_ps, "tpu.fetch.req_addr", addr)
            self._add(launch_ps, "tpu.fetch.req_tgl")
        elif requester == 1:
            self._add(launch_ps, "tpu.load.a_cnt")
        else:
            self._add(launch_ps, "tpu.store.b_cnt")

    def ddr_grant(self, g_ps: int, done_ps: int, beats: int, requester: int, addr: int,
                  nbytes: int) -> None:
        """A burst granted at g: command bus over [g, g+B), beat commands at g..g+B-1."""
        p, beat = self.p.ddr, self.cfg.ddr_beat_bytes
        free_ps = g_ps + beats * p
        self._set(g_ps, "tpu.ddr.grant", requester)
        self._set(free_ps, "tpu.ddr.grant", DDR_IDLE)
        self._set(g_ps, "tpu.ddr.grant_addr", addr)
        self._set(g_ps, "tpu.ddr.grant_bytes", nbytes)
        self._add(g_ps, f"tpu.ddr.{DDR_REQ[requester]}_served")
        self._add(done_ps, f"tpu.ddr.{DDR_REQ[requester]}_done")
        self._set(g_ps, "tpu.ddr.cmd_valid", 1)
        self._set(g_ps, "tpu.ddr.cmd_we", int(requester == 2))
        for i in range(beats):
            self._set(g_ps + i * p, "tpu.ddr.cmd_addr", (addr // beat + i) * beat)
        self._set(free_ps, "tpu.ddr.cmd_valid", 0)
        self._set(free_ps, "tpu.ddr.cmd_we", 0)

    # ---------------------------------------------------------------- DMA channels
    def dma_seen(self, engine: int, half: str, t_ps: int) -> None:
        """Channel ``engine`` sees the completion of half ``half`` ('a' or 'b') of a burst."""
        self._add(t_ps, f"tpu.{ENGINES[engine]}.{half}_done")

    # ---------------------------------------------------------------- SRAM arbiter
    def sram_request(self, requester: int, launch_ps: int) -> None:
        if requester == 0:
            self._add(launch_ps, "tpu.load.b_cnt")
        elif requester == 1:
            self._add(launch_ps, "tpu.store.a_cnt")

    def sram_grant(self, g_ps: int, requester: int, banks, accesses: int, visible_ps: int) -> None:
        p = self.p.core
        mask = sum(1 << b for b in banks)
        self._bit(g_ps, "tpu.sram.gnt", requester, 1)
        self._bit(g_ps + p, "tpu.sram.gnt", requester, 0)
        self._set(g_ps, f"tpu.sram.hold_{SRAM_REQUESTERS[requester]}", mask)
        self._set(g_ps + accesses * p, f"tpu.sram.hold_{SRAM_REQUESTERS[requester]}", 0)
        if g_ps > visible_ps:
            self._bit(visible_ps, "tpu.sram.wait", requester, 1)
            self._bit(g_ps, "tpu.sram.wait", requester, 0)
            self._add(visible_ps, "tpu.sram.conflicts")

    # ---------------------------------------------------------------- quant registers
    def vpu_start(self, s1_ps: int, instr) -> None:
        """VPU instruction started at s: its quant register write or reads, recorded at s+1."""
        a = instr.args
        if instr.op == "LOAD_QREG":
            val = ((a["multiplier"] & 0xFFFFFFFF) << 16) | ((a["shift"] & 0xFF) << 8) \
                | (a["zero_point"] & 0xFF)
            self._set(s1_ps, "tpu.qreg.wr_idx", a["qreg"] & 0x3F)
            self._set(s1_ps, "tpu.qreg.wr_val", val)
            self._add(s1_ps, "tpu.qreg.writes")
            return
        ports = qreg_read_ports(instr)
        if any(i is not None for i in ports):
            word = 0
            for k, i in enumerate(ports):
                if i is not None:
                    word |= (1 << (18 + k)) | ((i & 0x3F) << (6 * k))
            self._set(s1_ps, "tpu.qreg.rd", word)
            self._add(s1_ps, "tpu.qreg.reads")

    # ---------------------------------------------------------------- output
    def values(self) -> list[tuple[int, str, int]]:
        """Applied changes ``[(time_ps, signal, value)]`` in time order, one per (time, signal)
        (the last event at a time wins), repeats of the current value dropped."""
        cur = {n: init for n, (_, init) in self.table.items()}
        masks = {n: (1 << w) - 1 for n, (w, _) in self.table.items()}
        final: dict[tuple[int, str], int] = {}
        for t, _, sig, op, val in sorted(self.events, key=lambda ev: (ev[0], ev[1])):
            if op == _SET:
                v = val & masks[sig]
            elif op == _ADD:
                v = (cur[sig] + val) & masks[sig]
            else:
                bit, b = val
                v = (cur[sig] & ~(1 << bit)) | (b << bit)
            cur[sig] = v
            final[(t, sig)] = v
        out, last = [], {n: init for n, (_, init) in self.table.items()}
        for (t, sig), v in final.items():          # dict keeps the sorted time order
            if v != last[sig]:
                out.append((t, sig, v))
                last[sig] = v
        return out

    def write(self, path: str | Path, scopes=None, window_ps=None) -> None:
        """Dump the trace to ``path`` atomically (temporary file, then rename).

        ``scopes``: keep only signals whose name starts with one of these prefixes (e.g.
        ``["tpu.vpu", "tpu.sram"]``); ``window_ps``: ``(t0, t1)``: the values at t0 as the
        initial values (at t0), then the changes in (t0, t1]. Timescale 1 ps."""
        names = [n for n in self.table if not scopes or any(n.startswith(s) for s in scopes)]
        t0, t1 = window_ps if window_ps is not None else (0, None)
        state = {n: self.table[n][1] for n in names}
        changes = []
        end_ps = self.end_ps
        for t, sig, v in self.values():
            end_ps = max(end_ps, t)
            if sig not in state:
                continue
            if t <= t0:
                state[sig] = v
            elif t1 is None or t <= t1:
                changes.append((t, sig, v))
        buf = io.StringIO()
        w = VCDWriter(buf, timescale="1 ps", date=None, comment="tpusim SimPy model",
                      init_timestamp=t0, check_values=False)
        var = {}
        for n in names:
            scope, leaf = n.rsplit(".", 1)
            var[n] = w.register_var(scope, leaf, "wire", size=self.table[n][0], init=state[n])
        for t, sig, v in changes:
            w.change(var[sig], t, v)
        w.close(timestamp=t1 if t1 is not None else max(end_ps, t0))
        write_text_atomic(path, buf.getvalue())


__all__ = ["Trace", "signal_table", "digest_bytes", "digest_acc", "fold32", "vpu_dst_words",
           "qreg_read_ports", "RETIRERS", "ENGINES"]
