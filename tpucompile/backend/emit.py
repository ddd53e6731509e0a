"""Instruction emission with dependency tokens derived from declared resource accesses.

Every emitted instruction declares the SRAM word ranges, accumulator row ranges and DDR buffers
it reads and writes. ``Program.add`` tracks, per SRAM word and accumulator row (and per DDR
buffer), the last writer and the last reader of each engine since that write, and turns every
cross-engine RAW / WAR / WAW hazard into a token: the producer gets ``signal |= consumer``, the
consumer ``wait |= producer``. Same-engine hazards need nothing (each engine runs its queue in
order, one instruction at a time). Per (producer engine X, consumer engine Y) the pairs are
created in program order with strictly increasing producers, so the k-th wait of Y on X is
matched by the k-th signal of X to Y; a consumer whose producer is already covered by an earlier
wait of the same engine gets no token. Every dependency points backwards in program order, so no
token wait can deadlock with the in-order dispatcher. ``check_tokens`` bounds the tokens that
can be outstanding per pair (crossing pairs + queue depth) below the 8-bit counter.

Layer emitters (conv, pool, add) follow the tiling of tiling.py: LOAD (inputs, weights, tables)
-> MXU (LOAD_WEIGHTS, MATMUL accumulating over taps and cin blocks) -> VPU (REQUANT with relu,
POOL, ADD, LOAD_QREG) -> STORE, with buffer-free tokens flowing back through the same tracking.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from tpusim.arch.config import HwConfig
from tpusim.arch.errors import CompileError
from tpusim.arch.isa import OPCODES, Engine, Instruction, check_ranges
from tpusim.arch.limits import TOKEN_MAX
from tpucompile.backend.layout import ActLayout, align_px, ceil_div
from tpucompile.backend.tiling import ConvTiling, EltTiling

NENG = 4


class Program:
    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.ops: list = []       # [op, args]
        self.eng: list = []
        self.wait: list = []
        self.signal: list = []
        self.nbytes_in: list = []
        self.nbytes_out: list = []
        self._mem = {k: (np.full(n, -1, np.int64), np.full(n, -1, np.int8), np.full((NENG, n), -1, np.int64))
                     for k, n in (("s", cfg.sram_words), ("a", cfg.acc_depth_rows))}
        self._ddr: dict = {}
        self.covered = [[-1] * NENG for _ in range(NENG)]
        self.pairs: list = []
        self.qregs = QregAlloc(self)

    def __len__(self):
        return len(self.ops)

    # ------------------------------------------------------------------ hazards
    def _deps_range(self, kind, lo, hi, write, dep):
        if hi <= lo:
            return
        w, we, rd = self._mem[kind]
        n = w.shape[0]
        if lo < 0 or hi > n:
            raise CompileError(f"internal: {kind} range [{lo}, {hi}) outside [0, {n})")
        ws, es = w[lo:hi], we[lo:hi]
        for x in range(NENG):
            m = ws[es == x]
            if m.size:
                dep[x] = max(dep[x], int(m.max()))
            if write:
                r = int(rd[x, lo:hi].max())
                if r >= 0:
                    dep[x] = max(dep[x], r)

    def _update_range(self, kind, lo, hi, write, idx, e):
        if hi <= lo:
            return
        w, we, rd = self._mem[kind]
        if write:
            w[lo:hi] = idx
            we[lo:hi] = e
            rd[:, lo:hi] = -1
        else:
            rd[e, lo:hi] = idx

    def add(self, op: str, rs=(), ws=(), ra=(), wa=(), rd=(), wd=(), nin=0, nout=0, **args) -> int:
        spec = OPCODES[op]
        e = int(spec.engine)
        full = {f.name: int(args.get(f.name, 0)) for f in spec.fields}
        if set(args) - set(full):
            raise CompileError(f"internal: {op} unknown fields {set(args) - set(full)}")
        ins = Instruction(op, full)
        try:
            check_ranges(ins)
        except Exception as ex:
            raise CompileError(f"internal: {ex}") from None
        idx = len(self.ops)
        dep = [-1] * NENG
        for lo, hi in rs:
            self._deps_range("s", lo, hi, False, dep)
        for lo, hi in ws:
            self._deps_range("s", lo, hi, True, dep)
        for lo, hi in ra:
            self._deps_range("a", lo, hi, False, dep)
        for lo, hi in wa:
            self._deps_range("a", lo, hi, True, dep)
        for b in rd:
            st = self._ddr.get(b)
            if st and st[0] >= 0:
                dep[st[1]] = max(dep[st[1]], st[0])
        for b in wd:
            st = self._ddr.get(b)
            if st:
                if st[0] >= 0:
                    dep[st[1]] = max(dep[st[1]], st[0])
                for x, r in st[2].items():
                    dep[x] = max(dep[x], r)
        wait = 0
        for x in range(NENG):
            a = dep[x]
            if x == e or a < 0 or a <= self.covered[x][e]:
                continue
            self.signal[a] |= 1 << e
            wait |= 1 << x
            self.covered[x][e] = a
            self.pairs.append((x, e, a, idx))
        self.ops.append((op, full))
        self.eng.append(e)
        self.wait.append(wait)
        self.signal.append(0)
        self.nbytes_in.append(nin)
        self.nbytes_out.append(nout)
        for lo, hi in rs:
            self._update_range("s", lo, hi, False, idx, e)
        for lo, hi in ws:
            self._update_range("s", lo, hi, True, idx, e)
        for lo, hi in ra:
            self._update_range("a", lo, hi, False, idx, e)
        for lo, hi in wa:
            self._update_range("a", lo, hi, True, idx, e)
        for b in rd:
            st = self._ddr.setdefault(b, [-1, -1, {}])
            st[2][e] = idx
        for b in wd:
            self._ddr[b] = [idx, e, {}]
        return idx

    def halt(self):
        self.ops.append(("HALT", {}))
        self.eng.append(-1)
        self.wait.append(0)
        self.signal.append(0)
        self.nbytes_in.append(0)
        self.nbytes_out.append(0)

    def instructions(self) -> list:
        return [Instruction(op, args, w, s) for (op, args), w, s in zip(self.ops, self.wait, self.signal)]

    def check_tokens(self) -> None:
        """Outstanding tokens per (sender, receiver) <= crossing pairs + queue depth < 256."""
        limit = TOKEN_MAX - self.cfg.queue_depth - 1
        n = len(self.ops) + 2
        for x in range(NENG):
            for y in range(NENG):
                ps = [(a, b) for (xx, yy, a, b) in self.pairs if xx == x and yy == y]
                if not ps:
                    continue
                d = np.zeros(n, np.int64)
                for a, b in ps:
                    d[a + 1] += 1
                    d[b + 1] -= 1
                m = int(np.cumsum(d).max())
                if m > limit:
                    raise CompileError(f"internal: {m} tokens {Engine(x).name}->{Engine(y).name} could be "
                                       f"outstanding (limit {limit})")

    # ------------------------------------------------------------------ DMA helpers
    def dma(self, op, ddr_addr, sram_word, inner_bytes, count1=1, ddr_stride1=0, sram_stride1=0,
            count2=1, ddr_stride2=0, sram_stride2=0, buf=None):
        W = self.cfg.word_bytes
        nbytes = inner_bytes * count1 * count2
        lo = sram_word
        hi = sram_word + ((count2 - 1) * sram_stride2 + (count1 - 1) * sram_stride1 + inner_bytes) // W
        kw = dict(ddr_addr=ddr_addr, sram_addr=sram_word * W, inner_bytes=inner_bytes, count1=count1,
                  ddr_stride1=ddr_stride1, sram_stride1=sram_stride1, count2=count2,
                  ddr_stride2=ddr_stride2, sram_stride2=sram_stride2)
        if op == "DMA_LOAD":
            return self.add(op, ws=[(lo, hi)], rd=[buf] if buf is not None else [], nin=nbytes, **kw)
        return self.add(op, rs=[(lo, hi)], wd=[buf] if buf is not None else [], nout=nbytes, **kw)


class QregAlloc:
    """Quant-register cache over the 64 entries: (mult, shift, zp) -> entry, LRU replacement.
    The VPU runs in order, so an entry can be reloaded as soon as a later instruction needs the
    slot: every earlier reader has been issued before the LOAD_QREG to the same engine."""

    def __init__(self, prog: Program):
        self.p = prog
        self.n = prog.cfg.qreg_count
        self.by_key: dict = {}
        self.lru: OrderedDict = OrderedDict()   # entry -> key
        self.loads = 0

    def get(self, mult: int, shift: int, zp: int, pinned=()) -> int:
        key = (int(mult), int(shift), int(zp))
        if key in self.by_key:
            e = self.by_key[key]
            self.lru.move_to_end(e)
            return e
        if len(self.lru) < self.n:
            e = len(self.lru)
        else:
            e = next(k for k in self.lru if k not in pinned)
            del self.by_key[self.lru[e]]
            del self.lru[e]
        self.p.add("LOAD_QREG", qreg=e, multiplier=key[0], shift=key[1], zero_point=key[2])
        self.loads += 1
        self.by_key[key] = e
        self.lru[e] = key
        return e


# ====================================================================== layer emitters
def emit_conv(P: Program, op, X: ActLayout, Y: ActLayout, tl: ConvTiling, wt_addr: int,
              par_addr: int, par_stride: int) -> None:
    cfg = P.cfg
    R, C, W = cfg.array_rows, cfg.array_cols, cfg.word_bytes
    ap = align_px(cfg)
    kh, kw = op.kernel
    sh, sw = op.strides
    cout, cin = op.weight.shape[:2]
    KB, NB = ceil_div(cin, R), ceil_div(cout, C)
    _, _, Ho, Wo = Y.shape
    off_t, off_l = X.pads[0] - op.pads[0], X.pads[1] - op.pads[1]
    tile_bytes = C * W
    pw = cfg.param_words
    reg = tl.regions
    nkg = ceil_div(KB, tl.kbg)
    qreg = P.qregs.get(0, 0, op.y_zp)
    wslot = islot = pslot = oslot = half = 0
    mstride = tl.th * tl.tw
    for oy0 in range(0, Ho, tl.th):
        th = min(tl.th, Ho - oy0)
        for ox0 in range(0, Wo, tl.tw):
            tw = min(tl.tw, Wo - ox0)
            M = th * tw
            r0 = off_t + oy0 * sh
            nrows = (th - 1) * sh + kh
            c0 = off_l + ox0 * sw
            c0a = c0 - c0 % ap
            ncols = c0 + (tw - 1) * sw + kw - c0a
            acc0 = half * (cfg.acc_depth_rows // 2) if tl.acc_halves else 0
            if tl.acc_halves:
                half ^= 1
            resident = None
            for g0 in range(0, NB, tl.nbg):
                gnb = range(g0, min(NB, g0 + tl.nbg))
                started = set()
                for k0 in range(0, KB, tl.kbg):
                    kbs = range(k0, min(KB, k0 + tl.kbg))
                    if nkg == 1 and resident is not None:
                        base = resident
                    else:
                        base = reg["i"][islot]
                        islot = (islot + 1) % tl.ni
                        P.dma("DMA_LOAD", X.addr(k0, r0, c0a), base, ncols * W, nrows, X.row_bytes,
                              ncols * W, len(kbs), X.block_bytes, nrows * ncols * W, buf=X.buf_id)
                        resident = base
                    for kb in kbs:
                        for nb in gnb:
                            acc = acc0 + (nb - g0) * mstride
                            for ky in range(kh):
                                for kx in range(kw):
                                    ws = reg["w"][wslot]
                                    wslot = (wslot + 1) % tl.nw
                                    t = ((nb * KB + kb) * kh + ky) * kw + kx
                                    P.dma("DMA_LOAD", wt_addr + t * tile_bytes, ws, tile_bytes)
                                    P.add("LOAD_WEIGHTS", rs=[(ws, ws + C)], sram_addr=ws)
                                    act = base + (kb - k0) * nrows * ncols + ky * ncols + kx + (c0 - c0a)
                                    last = act + (th - 1) * sh * ncols + (tw - 1) * sw + 1
                                    P.add("MATMUL", rs=[(act, last)], wa=[(acc, acc + M)], act_addr=act,
                                          count_x=tw, stride_x=sw, count_y=th, stride_y=sh * ncols,
                                          acc_addr=acc, accumulate=1 if nb in started else 0)
                                    started.add(nb)
                # requantize and store this group
                if tw <= tl.s_out:
                    k = max(1, tl.s_out // tw)
                    chunks = [(y, 0, min(k, th - y), tw) for y in range(0, th, k)]
                else:
                    seg = max(ap, tl.s_out - tl.s_out % ap)
                    chunks = [(y, x, 1, min(seg, tw - x)) for y in range(th) for x in range(0, tw, seg)]
                for nb in gnb:
                    ps = reg["p"][pslot]
                    pslot ^= 1
                    P.dma("DMA_LOAD", par_addr + nb * par_stride, ps, pw * W)
                    accb = acc0 + (nb - g0) * mstride
                    for (y, x, k, n) in chunks:
                        os_ = reg["o"][oslot]
                        oslot ^= 1
                        a = accb + y * tw + x
                        P.add("REQUANT", rs=[(ps, ps + pw)], ra=[(a, a + k * n)], ws=[(os_, os_ + k * n)],
                              acc_addr=a, count=k * n, param_addr=ps, dst_addr=os_, qreg=qreg,
                              relu=int(op.relu))
                        P.dma("DMA_STORE", Y.iaddr(nb, oy0 + y, ox0 + x), os_, n * W, k, Y.row_bytes,
                              n * W, buf=Y.buf_id)


def emit_pool(P: Program, op, X: ActLayout, Y: ActLayout, tl: EltTiling, avg: bool) -> None:
    cfg = P.cfg
    W = cfg.word_bytes
    ap = align_px(cfg)
    kh, kw = op.kernel
    sh, sw = op.strides
    pads = op.pads
    _, _, Ho, Wo = Y.shape
    off_t, off_l = X.pads[0] - pads[0], X.pads[1] - pads[1]
    if avg:
        qin = P.qregs.get(0, 0, op.x_zp)
        qout = P.qregs.get(op.mult, op.shift, op.y_zp, pinned=(qin,))
    else:
        qin = qout = 0
    reg = tl.regions
    islot = oslot = 0
    for k0 in range(0, X.nblocks, tl.kbg):
        kbs = range(k0, min(X.nblocks, k0 + tl.kbg))
        for oy0 in range(0, Ho, tl.th):
            th = min(tl.th, Ho - oy0)
            for ox0 in range(0, Wo, tl.tw):
                tw = min(tl.tw, Wo - ox0)
                r0 = off_t + oy0 * sh
                nrows = (th - 1) * sh + kh
                c0 = off_l + ox0 * sw
                c0a = c0 - c0 % ap
                ncols = c0 + (tw - 1) * sw + kw - c0a
                base = reg["i"][islot]
                islot ^= 1
                P.dma("DMA_LOAD", X.addr(k0, r0, c0a), base, ncols * W, nrows, X.row_bytes, ncols * W,
                      len(kbs), X.block_bytes, nrows * ncols * W, buf=X.buf_id)
                ob = reg["o"][oslot]
                oslot ^= 1
                for j, kb in enumerate(kbs):
                    src = base + j * nrows * ncols + (c0 - c0a)
                    last = src + (th - 1) * sh * ncols + (tw - 1) * sw + (kh - 1) * ncols + kw
                    dst = ob + j * th * tw
                    P.add("POOL", rs=[(src, last)], ws=[(dst, dst + th * tw)], mode=int(avg), src_addr=src,
                          win_w=kw, win_h=kh, win_stride_x=1, win_stride_y=ncols, out_w=tw, out_stride_x=sw,
                          out_h=th, out_stride_y=sh * ncols, dst_addr=dst, qreg_in=qin, qreg_out=qout)
                P.dma("DMA_STORE", Y.iaddr(k0, oy0, ox0), ob, tw * W, th, Y.row_bytes, tw * W,
                      len(kbs), Y.block_bytes, th * tw * W, buf=Y.buf_id)


def emit_add(P: Program, op, A: ActLayout, B: ActLayout, Y: ActLayout, tl: EltTiling) -> None:
    cfg = P.cfg
    W = cfg.word_bytes
    _, _, Ho, Wo = Y.shape
    qa = P.qregs.get(op.mult_a, op.shift_a, op.zp_a)
    qb = P.qregs.get(op.mult_b, op.shift_b, op.zp_b, pinned=(qa,))
    qo = P.qregs.get(op.mult_out, op.shift_out, op.zp_out, pinned=(qa, qb))
    reg = tl.regions
    slot = 0
    for k0 in range(0, Y.nblocks, tl.kbg):
        nk = min(Y.nblocks, k0 + tl.kbg) - k0
        for oy0 in range(0, Ho, tl.th):
            th = min(tl.th, Ho - oy0)
            for ox0 in range(0, Wo, tl.tw):
                tw = min(tl.tw, Wo - ox0)
                n = nk * th * tw
                sa, sb, so = reg["a"][slot], reg["b"][slot], reg["o"][slot]
                slot ^= 1
                for T, s in ((A, sa), (B, sb)):
                    P.dma("DMA_LOAD", T.iaddr(k0, oy0, ox0), s, tw * W, th, T.row_bytes, tw * W,
                          nk, T.block_bytes, th * tw * W, buf=T.buf_id)
                P.add("ADD", rs=[(sa, sa + n), (sb, sb + n)], ws=[(so, so + n)], src_a=sa, src_b=sb,
                      dst_addr=so, count=n, qreg_a=qa, qreg_b=qb, qreg_out=qo, relu=int(op.relu))
                P.dma("DMA_STORE", Y.iaddr(k0, oy0, ox0), so, tw * W, th, Y.row_bytes, tw * W,
                      nk, Y.block_bytes, th * tw * W, buf=Y.buf_id)
