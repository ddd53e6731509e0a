"""A tiny functional executor of a TpuBinary for back-end self-checks (not the SimPy model).

Engines run their queues in order; at each step one engine whose head has all its wait tokens
is picked (at random with ``seed``, or round robin), and its instruction executes atomically.
Missing tokens therefore show up as wrong results under some interleavings, and a wait that is
never matched as a deadlock (RuntimeError). Arithmetic: tpusim.arch.arith.
"""
from __future__ import annotations

import random

import numpy as np

from tpusim.arch import arith
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import HwConfig
from tpusim.arch.isa import decode_program


def run_ref(b: TpuBinary, cfg: HwConfig, inputs: dict, seed: int | None = 0, max_ahead: int | None = None) -> dict:
    R, C, W = cfg.array_rows, cfg.array_cols, cfg.word_bytes
    size = b.code_addr + len(b.code)
    ddr = bytearray(size)
    for a, d in b.ddr_segments({k: v for k, v in inputs.items()}):
        ddr[a:a + len(d)] = d
    sram = np.zeros(cfg.sram_size_bytes, np.int8)
    acc = np.zeros((cfg.acc_depth_rows, C), np.int64)
    qr = {}
    wts = np.zeros((R, C), np.int64)
    prog = decode_program(b.code)
    queues = [[] for _ in range(4)]
    for pc, ins in enumerate(prog):
        if ins.op == "HALT":
            break
        queues[int(ins.engine)].append(ins)
    heads = [0] * 4
    tok = np.zeros((4, 4), np.int64)
    rng = random.Random(seed)

    def words(addr, n):
        return sram[addr * W:(addr + n) * W].reshape(n, W)

    def exe(ins):
        nonlocal wts
        a = ins.args
        if ins.op in ("DMA_LOAD", "DMA_STORE"):
            for o2 in range(a["count2"]):
                for o1 in range(a["count1"]):
                    d = a["ddr_addr"] + o2 * a["ddr_stride2"] + o1 * a["ddr_stride1"]
                    s = a["sram_addr"] + o2 * a["sram_stride2"] + o1 * a["sram_stride1"]
                    n = a["inner_bytes"]
                    if ins.op == "DMA_LOAD":
                        sram[s:s + n] = np.frombuffer(bytes(ddr[d:d + n]), np.int8)
                    else:
                        ddr[d:d + n] = sram[s:s + n].tobytes()
        elif ins.op == "LOAD_WEIGHTS":
            wts = words(a["sram_addr"], C).astype(np.int64).T   # [k][n]
        elif ins.op == "MATMUL":
            idx = [a["act_addr"] + x * a["stride_x"] + y * a["stride_y"]
                   for y in range(a["count_y"]) for x in range(a["count_x"])]
            xs = np.stack([words(i, 1)[0] for i in idx]).astype(np.int64)
            r = arith.wrap32(xs @ wts)
            rows = slice(a["acc_addr"], a["acc_addr"] + len(idx))
            acc[rows] = arith.wrap32(acc[rows] + r) if a["accumulate"] else r
        elif ins.op == "LOAD_QREG":
            qr[a["qreg"]] = (a["multiplier"], a["shift"], a["zero_point"])
        elif ins.op == "REQUANT":
            pb = sram[a["param_addr"] * W:a["param_addr"] * W + 9 * C].tobytes()
            bias = np.frombuffer(pb[:4 * C], "<i4"); mult = np.frombuffer(pb[4 * C:8 * C], "<i4")
            shift = np.frombuffer(pb[8 * C:9 * C], np.int8)
            y = arith.requant_conv(acc[a["acc_addr"]:a["acc_addr"] + a["count"]], bias, mult, shift,
                                   qr[a["qreg"]][2], bool(a["relu"]))
            words(a["dst_addr"], a["count"])[:] = y
        elif ins.op == "POOL":
            outs = []
            for y in range(a["out_h"]):
                for x in range(a["out_w"]):
                    taps = [words(a["src_addr"] + y * a["out_stride_y"] + x * a["out_stride_x"]
                                  + ty * a["win_stride_y"] + tx * a["win_stride_x"], 1)[0].astype(np.int64)
                            for ty in range(a["win_h"]) for tx in range(a["win_w"])]
                    if a["mode"] == 0:
                        outs.append(np.max(taps, axis=0).astype(np.int8))
                    else:
                        m, s, zo = qr[a["qreg_out"]]
                        outs.append(arith.pool_avg(np.sum(taps, axis=0), len(taps), qr[a["qreg_in"]][2], m, s, zo))
            words(a["dst_addr"], len(outs))[:] = np.stack(outs)
        elif ins.op == "ADD":
            n = a["count"]
            ma, sa, za = qr[a["qreg_a"]]; mb, sb, zb = qr[a["qreg_b"]]; mo, so, zo = qr[a["qreg_out"]]
            y = arith.add_int8(words(a["src_a"], n), words(a["src_b"], n), za, ma, sa, zb, mb, sb, zo, mo, so,
                               bool(a["relu"]))
            words(a["dst_addr"], n)[:] = y
        else:
            raise RuntimeError(f"refexec: unexpected {ins.op}")

    while any(heads[e] < len(queues[e]) for e in range(4)):
        ready = []
        for e in range(4):
            if heads[e] < len(queues[e]):
                ins = queues[e][heads[e]]
                if all(tok[x][e] > 0 for x in range(4) if ins.wait >> x & 1):
                    ready.append(e)
        if not ready:
            raise RuntimeError(f"refexec: deadlock; heads {heads}, tokens {tok.tolist()}")
        e = rng.choice(ready) if seed is not None else ready[0]
        ins = queues[e][heads[e]]
        heads[e] += 1
        for x in range(4):
            if ins.wait >> x & 1:
                tok[x][e] -= 1
        exe(ins)
        for y in range(4):
            if ins.signal >> y & 1:
                tok[e][y] += 1
                if tok[e][y] > 255:
                    raise RuntimeError("refexec: token counter overflow")
    out = {}
    for d in b.outputs:
        out[d.name] = d.from_blocked(bytes(ddr[d.ddr_addr:d.ddr_addr + d.size_bytes]))
    return out
