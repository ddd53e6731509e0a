"""Task builders. A task allocates its SRAM/accumulator space and data up front and returns its
phases (load, compute, store) as callables plus an estimate of its instruction count; the
generator interleaves the phases of several tasks (software pipelining) and the Emitter adds the
tokens, so any interleaving is race-free."""
from __future__ import annotations

import math
import random

import numpy as np

from stressgen.ctx import Task
from stressgen.data import rand_i8, rand_qreg, requant_table
from tpusim.arch.arith import add_multipliers, quantize_multiplier
from tpusim.arch.rowops import ln_param_words, row_words

PRIME_K = (101, 103, 107, 127, 131)


def _factor(r, m: int) -> tuple[int, int]:
    divs = [d for d in range(1, m + 1) if m % d == 0]
    cx = r.choice(divs)
    return cx, m // cx


def pick_m(r) -> int:
    return r.choice([1, 1, 2, 3, 5, 7, 9, 11, 13, 15, 17, 21, 23, 25, 27, 31, 35, 37, r.randint(1, 40)])


#: vectors of a matmul task's lead MATMUL (``matmul_task``)
LEAD_M = 40


def matmul_task(ctx, K: int, M: int, N: int, dmode: str):
    """C[M, N] = X[M, K] @ W[K, N] over K tiles of R rows and N tiles of C columns, then
    REQUANT per N tile (random per-channel table), optional POOL, DMA_STORE. Output region: M
    words per output channel block. ``fused`` (30 %): REQUANT_ADDs instead of the REQUANTs, adding
    a skip region of the output region's layout (random data), half of them in place (the skip
    loaded into the output region itself). Wide array (C = mp*R): tile n writes its mp planes at
    obase + n*mp*ps + j*ps (plane stride ps = M + a random gap); tall (R = mg*C): tile n fills
    lane group n % mg of block n // mg (a short last block: the last tile again in the missing
    groups, so no lane of the stored region is left unwritten)."""
    cfg, r, nrng = ctx.cfg, ctx.r, ctx.nrng
    R, C, W, pw = cfg.array_rows, cfg.array_cols, ctx.W, cfg.param_words
    tk, tn = math.ceil(K / R), math.ceil(N / C)
    w = rand_i8(nrng, (K, N), dmode)
    w[K - 1][w[K - 1] == 0] = 1                       # the last real row / column is non-zero
    w[:, N - 1][w[:, N - 1] == 0] = -1
    wp = np.zeros((tk * R, tn * C), np.int8)
    wp[:K, :N] = w
    wblob = wp.reshape(tk, R, tn, C).transpose(2, 0, 3, 1)          # [tn][tk][col n][k]
    x = rand_i8(nrng, (M, tk * R), dmode)
    if r.random() < 0.5:
        x[:, K:] = 0
    layout = r.choice(["tile", "tile", "mmajor", "mmajor", "gap2d", "gap2d", "repeat"] if M > 1
                      else ["tile", "mmajor"])
    xt = x.reshape(M, tk, R)
    if layout == "repeat":
        xt[:] = xt[0]
    if layout in ("tile", "repeat"):
        words = tk if layout == "repeat" else tk * M
        blob = xt[0] if layout == "repeat" else xt.transpose(1, 0, 2)
        cx, cy = _factor(r, M) if r.random() < 0.5 else (M, 1)
        geo = dict(count_x=cx, stride_x=0 if layout == "repeat" else 1, count_y=cy,
                   stride_y=0 if layout == "repeat" else cx)
        if cy == 1:
            geo["stride_y"] = r.randint(0, 9)                        # unused: any value
        base_of = lambda b, t: b + (t if layout == "repeat" else t * M)  # noqa: E731
    if layout == "gap2d" and tk * (6 * M + 2) > cfg.sram_words // 4:
        layout = "mmajor"
    if layout == "mmajor":
        words, blob = tk * M, xt
        cx, cy = _factor(r, M) if r.random() < 0.7 else (M, 1)
        geo = dict(count_x=cx, stride_x=tk, count_y=cy, stride_y=cx * tk)
        base_of = lambda b, t: b + t                                  # noqa: E731
    if layout == "gap2d":
        cx, cy = _factor(r, M)
        sx = r.randint(1, 3)
        sy = cx * sx + r.randint(0, 3)
        g = cy * sy + r.randint(0, 2)
        words = tk * g
        blob = rand_i8(nrng, (words, R))
        for t in range(tk):
            for i in range(M):
                blob[t * g + (i // cx) * sy + (i % cx) * sx] = xt[i, t]
        geo = dict(count_x=cx, stride_x=sx, count_y=cy, stride_y=sy)
        base_of = lambda b, t: b + t * g                              # noqa: E731
    tables, classes = zip(*[requant_table(cfg, r, nrng, dmode) for _ in range(tn)])
    mp, mg = cfg.requant_planes, cfg.lane_groups
    pstride = M + (r.choice([0, 0, 1, r.randint(2, 40)]) if mp > 1 else 0)   # words between planes
    nrq = -(-tn // mg) * mg                     # REQUANTs: whole blocks of lane groups
    out_words = tn * mp * pstride if mp > 1 else nrq // mg * M
    shared_acc = r.random() < 0.5
    zp_val = rand_qreg(r)
    relu = int(r.random() < 0.3)
    post = r.choice([None, None, "pool", "add"]) if M >= 2 else None
    # twice: each MATMUL is issued again at once, accumulating into its own rows (the MXU starts
    # the second during the first's drain: coverage bin mm_drain_acc); the result doubles. A
    # half of the shapes with at most 4 weight tiles, chosen from the shape so that no random
    # draw moves the later ones
    twice = (7 * K + 3 * M + N) % 2 == 1 and tn * tk <= 4
    # lead: a long MATMUL (LEAD_M vectors, all the first word: stride 0) into scratch accumulator
    # rows before the pairs, so that the fetch fills the MXU queue behind it and the pairs run
    # back to back on the two weight planes (coverage bins mm_plane_switch, mm_lw_plane_busy,
    # mm_inflight_max); from the shape, like ``twice``
    lead = (3 * K + 5 * M + 7 * N) % 3 == 0 and tn * tk >= 2 and M <= 16
    # fused: REQUANT_ADDs; drawn from a generator of the shape's own (as ``twice``), so that the
    # program's other draws are those of a program without them
    fr = random.Random(1_000_003 * K + 1009 * M + N)
    fused = fr.random() < 0.3
    in_place = fused and fr.random() < 0.5
    if fused:
        skip_data = rand_i8(np.random.default_rng(fr.getrandbits(32)), (out_words, W), dmode)
        q_skip, q_sum, add_relu = rand_qreg(fr), rand_qreg(fr), int(fr.random() < 0.3)
    task = Task(ctx, 3 + tn * (2 * tk + 1) + nrq - tn + 2 + (3 if post else 0) + (tn * tk if twice else 0)
                + (2 if lead else 0) + (3 if fused else 0))

    def loads():
        nonlocal wbase, abase, pbase, obase, accs, dst, sbase
        wbase = ctx.alloc(task, "sram", tn * tk * C)
        abase = ctx.alloc(task, "sram", words)
        pbase = ctx.alloc(task, "sram", tn * pw)
        obase = ctx.alloc(task, "sram", out_words)
        dst = ctx.alloc(task, "sram", M) if post else 0
        accs = [ctx.alloc(task, "acc", M)] * tn if shared_acc else [ctx.alloc(task, "acc", M) for _ in range(tn)]
        if lead:
            accs.append(ctx.alloc(task, "acc", LEAD_M))
        ctx.load(wbase, wblob)
        ctx.load(abase, blob)
        ctx.load(pbase, np.frombuffer(b"".join(t.ljust(pw * W, b"\0") for t in tables), np.int8))
        if fused:
            sbase = obase if in_place else ctx.alloc(task, "sram", out_words)
            ctx.load(sbase, skip_data)

    def requant(**a):
        """REQUANT, or with ``fused`` REQUANT_ADD of the skip at the destination's offset."""
        if fused:
            ctx.em.emit("REQUANT_ADD", **a, skip_addr=sbase + a["dst_addr"] - obase, qreg_b=qs, qreg_out=qo,
                        add_relu=add_relu)
        else:
            ctx.em.emit("REQUANT", **a)

    def compute():
        nonlocal qs, qo
        q = ctx.ensure_qreg(zp_val)
        if fused:
            qs, qo = ctx.ensure_qreg(q_skip), ctx.ensure_qreg(q_sum)
        if lead:
            ctx.em.emit("LOAD_WEIGHTS", sram_addr=wbase)
            ctx.em.emit("MATMUL", act_addr=abase, count_x=LEAD_M, stride_x=0, count_y=1, stride_y=0,
                        acc_addr=accs[-1], accumulate=0)
        for n in range(tn):
            for t in range(tk):
                ctx.em.emit("LOAD_WEIGHTS", sram_addr=wbase + (n * tk + t) * C)
                ctx.em.emit("MATMUL", act_addr=base_of(abase, t), acc_addr=accs[n],
                            accumulate=int(t > 0), **geo)
                if twice:
                    ctx.em.emit("MATMUL", act_addr=base_of(abase, t), acc_addr=accs[n],
                                accumulate=1, **geo)
            if mp == mg == 1:
                requant(acc_addr=accs[n], count=M, param_addr=pbase + n * pw,
                        dst_addr=obase + n * M, qreg=q, relu=relu)
            elif mp > 1:
                requant(acc_addr=accs[n], count=M, param_addr=pbase + n * pw,
                        dst_addr=obase + n * mp * pstride, dst_plane_stride=pstride, qreg=q, relu=relu)
            else:
                requant(acc_addr=accs[n], count=M, param_addr=pbase + n * pw,
                        dst_addr=obase + n // mg * M, lane_group=n % mg, qreg=q, relu=relu)
        for g in range(tn, nrq):                        # tall: the last tile in a short block's groups
            requant(acc_addr=accs[tn - 1], count=M, param_addr=pbase + (tn - 1) * pw,
                    dst_addr=obase + g // mg * M, lane_group=g % mg, qreg=q, relu=relu)

    def stores():
        ctx.store(obase, out_words * W)
        if post == "pool":
            ctx.em.emit("POOL", mode=0, src_addr=obase, win_w=2, win_h=1, win_stride_x=1,
                        win_stride_y=r.randint(0, 5), out_w=M - 1, out_stride_x=1, out_h=1,
                        out_stride_y=r.randint(0, 5), dst_addr=dst)
            ctx.store(dst, (M - 1) * W)
        elif post == "add":
            qa, qb, qo = (ctx.ensure_qreg(rand_qreg(r)) for _ in range(3))
            ctx.em.emit("ADD", src_a=obase, src_b=obase + out_words - M, dst_addr=dst, count=M,
                        qreg_a=qa, qreg_b=qb, qreg_out=qo, relu=int(r.random() < 0.3))
            ctx.store(dst, M * W)

    wbase = abase = pbase = obase = dst = sbase = qs = qo = 0
    accs = []
    task.phases = [loads, compute, stores]
    return task


def pool_task(ctx):
    """POOL max or average over an H x Wd image of words (average: power-of-two 1/n scales half
    of the time, so rounding ties are frequent)."""
    r, W = ctx.r, ctx.W
    h, wd = r.randint(1, 6), r.randint(1, 7)
    ww, wh = r.randint(1, min(3, wd)), r.randint(1, min(3, h))
    sx, sy = r.randint(1, 2), r.randint(1, 2)
    ow, oh = (wd - ww) // sx + 1, (h - wh) // sy + 1
    mode = int(r.random() < 0.6)
    img = rand_i8(ctx.nrng, (h * wd, W))
    n = ww * wh
    task = Task(ctx, 6)
    src = dst = 0
    tie = mode and n & (n - 1) == 0 and r.random() < 0.7
    vin, vout = rand_qreg(r), rand_qreg(r, n if tie else None)

    def loads():
        nonlocal src, dst
        src, dst = ctx.alloc(task, "sram", h * wd), ctx.alloc(task, "sram", ow * oh)
        ctx.load(src, img)

    def compute():
        qi = ctx.ensure_qreg(vin) if mode else r.randrange(ctx.cfg.qreg_count)
        qo = ctx.ensure_qreg(vout) if mode else r.randrange(ctx.cfg.qreg_count)
        ctx.em.emit("POOL", mode=mode, src_addr=src, win_w=ww, win_h=wh, win_stride_x=1,
                    win_stride_y=wd, out_w=ow, out_stride_x=sx, out_h=oh, out_stride_y=sy * wd,
                    dst_addr=dst, qreg_in=qi, qreg_out=qo)

    def stores():
        ctx.store(dst, ow * oh * W)
    task.phases = [loads, compute, stores]
    return task


def add_params(r):
    """Quant register values (a, b, out) for ADD: TFLite multipliers from random scales, or the
    tie-prone set a/b = (2^30, 0), out = (2^30, -19), where the output is ((a-za)+(b-zb))/2."""
    zs = [r.choice([0, r.randint(-128, 127), r.randint(-5, 5)]) for _ in range(3)]
    if r.random() < 0.5:
        ms = [(1 << 30, 0), (1 << 30, 0), (1 << 30, -19)]
    else:
        sa, sb, so = (10 ** r.uniform(-3, 0) for _ in range(3))
        ms = list(add_multipliers(sa, sb, so))
    return [(m, s, z) for (m, s), z in zip(ms, zs)]


def add_task(ctx, chain: bool = False):
    """ADD of two loaded inputs, then store. ``chain``: operand a is instead the latest output
    region reloaded from DDR (a read-after-write through DDR; skipped if there is none yet)."""
    r, W = ctx.r, ctx.W
    n = r.randint(1, 24)
    vals = add_params(r)
    task = Task(ctx, 7)
    sa = sb = dst = 0

    def loads():
        nonlocal n, sa, sb, dst
        src = ctx.outputs[-1] if chain and ctx.outputs else None
        if src is not None and src.size_bytes <= ctx.cfg.sram_size_bytes // 4:
            n = src.size_bytes // W
        else:
            src = None
        sa, sb, dst = (ctx.alloc(task, "sram", n) for _ in range(3))
        if src is not None:
            ctx.load_raw(sa, src.ddr_addr, src.size_bytes)
        else:
            ctx.load(sa, rand_i8(ctx.nrng, (n, W)))
        ctx.load(sb, rand_i8(ctx.nrng, (n, W)))

    def compute():
        qs = []
        for v in vals:
            qs.append(ctx.ensure_qreg(v))
        ctx.em.emit("ADD", src_a=sa, src_b=sb, dst_addr=dst, count=n, qreg_a=qs[0], qreg_b=qs[1],
                    qreg_out=qs[2], relu=int(r.random() < 0.3))

    def stores():
        ctx.store(dst, n * W)
    task.phases = [loads, compute, stores]
    return task


def qreg_alias_task(ctx):
    """Registers i, i+16, i+32, i+48 loaded with pairwise different values, all read by ADDs;
    then i is reloaded and read again (catches index aliasing and stale reloads)."""
    r, W = ctx.r, ctx.W
    nq = ctx.cfg.qreg_count
    i = r.randrange(16)
    idx = [q for q in (i, i + 16, i + 32, i + 48) if q < nq]
    n = r.randint(1, 8)
    a_data, b_data = rand_i8(ctx.nrng, (n, W)), rand_i8(ctx.nrng, (n, W))
    task = Task(ctx, 12)
    sa = sb = dst = 0
    zps = r.sample(range(-100, 100), len(idx) + 1)
    vals = [(m, s, z) for (m, s, _), z in zip(add_params(r) * 2, zps)]
    vals = [(m - k, s, z) if m else (m, s, z) for k, (m, s, z) in enumerate(vals)]
    reload = (vals[0][0] ^ 0x155, vals[0][1], zps[-1])

    def loads():
        nonlocal sa, sb, dst
        sa, sb, dst = ctx.alloc(task, "sram", n), ctx.alloc(task, "sram", n), ctx.alloc(task, "sram", 3 * n)
        ctx.load(sa, a_data)
        ctx.load(sb, b_data)

    def compute():
        for q, v in zip(idx, vals):
            ctx.load_qreg(q, v)
        k = len(idx)
        trip = [(idx[0], idx[2 % k], idx[1 % k]), (idx[3 % k], idx[0], idx[2 % k])]
        for j, (qa, qb, qo) in enumerate(trip):
            ctx.em.emit("ADD", src_a=sa, src_b=sb, dst_addr=dst + j * n, count=n, qreg_a=qa,
                        qreg_b=qb, qreg_out=qo, relu=0)
        ctx.load_qreg(idx[0], reload)
        ctx.em.emit("ADD", src_a=sb, src_b=sa, dst_addr=dst + 2 * n, count=n, qreg_a=idx[0],
                    qreg_b=idx[-1], qreg_out=idx[1 % k], relu=0)

    def stores():
        ctx.store(dst, 3 * n * W)
    task.phases = [loads, compute, stores]
    return task


def upsample_task(ctx, r, nrng):
    """Nearest upsampling as the compiler lowers Resize: LOAD h x w pixels, one POOL (max, 1x1
    window, ``out_stride_x = 0``) writing each pixel sw times, one DMA_STORE repeating every
    widened row sh times (``sram_stride1 = 0``). Drawn from ``r`` / ``nrng`` (side streams)."""
    W = ctx.W
    h, w, sh, sw = r.randint(1, 4), r.randint(1, 5), r.randint(1, 3), r.randint(1, 3)
    img = rand_i8(nrng, (h * w, W))
    task = Task(ctx, 3)
    src = dst = 0

    def loads():
        nonlocal src, dst
        src, dst = ctx.alloc(task, "sram", h * w), ctx.alloc(task, "sram", h * w * sw)
        ctx.load(src, img)

    def compute():
        ctx.em.emit("POOL", mode=0, src_addr=src, win_w=1, win_h=1, win_stride_x=1, win_stride_y=1,
                    out_w=sw, out_stride_x=0, out_h=h * w, out_stride_y=1, dst_addr=dst,
                    qreg_in=r.randrange(ctx.cfg.qreg_count), qreg_out=r.randrange(ctx.cfg.qreg_count))

    def stores():
        ctx.store_repeat(dst, w * sw * W, h, sh)
    task.phases = [loads, compute, stores]
    return task


def neighbour_words(ctx, r) -> int:
    """Length of a bank_edge_neighbour block: 8 .. 64 words, at most a bank less two."""
    bw = ctx.cfg.bank_words
    return r.randint(min(8, bw - 2), min(64, bw - 2)) if bw >= 3 else 0


def bank_edge_neighbour(ctx, task, r, n: int, nb_words: int, avoid=()) -> tuple[int, int]:
    """Space for an ``n``-word operand whose last word is the first word of a bank (half the
    time) or the last one, and for ``nb_words`` words right after it: (operand, neighbour) word
    addresses, the neighbour -1 if it does not fit. The neighbour is loaded by
    ``load_neighbour`` right before the vector instruction, so that its DMA bursts land while the
    instruction runs, in the operand's last bank or the next one: an operand's bank mask one
    word short or one word too wide (tpu_vpu sram_mask_o) changes the arbitration, so the cycles
    or the data differ - unless another operand of the instruction uses those two banks anyway:
    the bank edge is chosen away from the word ranges ``avoid`` ([lo, hi) of the instruction's
    other operands, allocated first)."""
    bw, words = ctx.cfg.bank_words, ctx.cfg.sram_words
    back = n - 1 if r.random() < 0.5 else n      # the last word first of bank k, or last of k - 1

    def fits(k: int) -> bool:
        at = bw * k - back
        return (at >= 0 and at + n + nb_words <= words
                and not any(lo < bw * (k + 1) and hi > bw * (k - 1) for lo, hi in avoid))
    ks = [k for k in range(1, words // bw) if fits(k)]
    if nb_words == 0 or not ks:
        return ctx.alloc(task, "sram", n), -1
    addr = ctx.alloc(task, "sram", n, at=bw * r.choice(ks) - back)
    return addr, ctx.alloc(task, "sram", nb_words, at=addr + n)


def load_neighbour(ctx, nb: int, data) -> None:
    """The DMA_LOAD of a bank_edge_neighbour block, emitted just before the vector instruction
    it races: a VPU NOP first waits on the latest DMA_LOAD (so the vector instruction's own
    loads are ordered already and it takes no token from this one, which the Emitter would put
    on the latest DMA_LOAD), then the DMA_LOAD waits on that NOP: it starts when the vector
    instruction does."""
    if nb >= 0:
        ctx.em.emit("NOP", wait_on=(0,), engine=3)
        ctx.load(nb, data, wait_on=(3,))


def mul_task(ctx, r, nrng):
    """MUL of two loaded inputs (b one word for all, stride_b = 0, a third of the time; count 0,
    no output, 30 % of the time), then store; zero points often at the int8 ends with data at the other end (the largest product
    255 * 255). Drawn from ``r`` / ``nrng`` (side streams) apart from space, layouts and
    quant-register reuse."""
    W = ctx.W
    n = 0 if r.random() < 0.3 else r.randint(1, 24)       # count 0: no SRAM request, c = s + 1
    # one operand's (a, b or the destination's) last word on a bank edge with a DMA_LOAD into the
    # words after it that runs at the same time (bank_edge_neighbour), 80 % of the MULs that read
    # SRAM; such MULs are longer (8 .. 48 words), so that the DMA's bursts land inside them
    edge = r.choice("abd") if n and r.random() < 0.8 else ""
    if edge:
        n = r.randint(8, 48)
    stride_b = int(r.random() >= 1 / 3)
    extreme = r.random() < 0.45
    a = rand_i8(nrng, (max(n, 1), W))
    b = rand_i8(nrng, (max(n, 1) if stride_b else 1, W))
    if extreme:
        a[: max(1, n // 2)] = -128
        b[0] = 127
        za, zb = 127, -128
    else:
        za, zb = r.randint(-128, 127), r.choice([0, r.randint(-128, 127)])
    mo, so = quantize_multiplier(10 ** r.uniform(-5, -1.5))
    vals = [(r.randint(0, 1 << 30), r.randint(-5, 5), za), (0, 0, zb), (mo, so, r.randint(-128, 127))]
    relu = int(r.random() < 0.3)
    nb_words = neighbour_words(ctx, r) if edge else 0
    nb_data = rand_i8(nrng, (max(nb_words, 1), W))
    task = Task(ctx, 9 if edge else 7)
    sa = sb = dst = 0
    nb = -1

    def loads():
        nonlocal sa, sb, dst, nb
        sizes = {"a": len(a), "b": len(b), "d": len(a)}
        at = {k: ctx.alloc(task, "sram", m) for k, m in sizes.items() if k != edge}
        if edge:
            at[edge], nb = bank_edge_neighbour(ctx, task, r, sizes[edge], nb_words,
                                               [(w, w + sizes[k]) for k, w in at.items()])
        sa, sb, dst = at["a"], at["b"], at["d"]
        ctx.load(sa, a)
        ctx.load(sb, b)

    def compute():
        qs = [ctx.ensure_qreg(v) for v in vals]
        load_neighbour(ctx, nb, nb_data)
        ctx.em.emit("MUL", src_a=sa, src_b=sb, dst_addr=dst, count=n, stride_b=stride_b, qreg_a=qs[0],
                    qreg_b=qs[1], qreg_out=qs[2], relu=relu)

    def stores():
        if n:
            ctx.store(dst, n * W)
        if nb >= 0:
            ctx.store(nb, nb_words * W)
    task.phases = [loads, compute, stores]
    return task


def lut_table_values(r, nrng) -> np.ndarray:
    """A LUT table (int8[256], entry k for input byte k): random, identity, constant, or a
    tabulated sigmoid-like step (what the compiler writes for Sigmoid / Tanh)."""
    kind = r.choice(["random", "random", "identity", "constant", "sigmoid"])
    x = (np.arange(256) + 128) % 256 - 128                         # input value of entry k
    if kind == "identity":
        return x.astype(np.int8)
    if kind == "constant":
        return np.full(256, r.randint(-128, 127), np.int8)
    if kind == "sigmoid":
        s = r.uniform(0.02, 0.3)
        return np.clip(np.round(255 / (1 + np.exp(-s * x)) - 128), -128, 127).astype(np.int8)
    return rand_i8(nrng, 256)


def lut_task(ctx, r, nrng):
    """LUT of ``count`` loaded words through a loaded table (1 or 2 LUTs, the second through
    the first's output, sometimes in place; count 0 reads the table only), then store. Drawn
    from ``r`` / ``nrng`` (side streams) apart from the space and DMA layouts."""
    W, tw = ctx.W, ctx.cfg.lut_words
    n = 0 if r.random() < 0.2 else r.randint(1, 24)
    twice, in_place = r.random() < 0.3, r.random() < 0.3
    # the first table's, the source's or the destination's last word on a bank edge with a
    # DMA_LOAD into the words after it that runs at the same time (bank_edge_neighbour), 60 % of
    # the time
    edge = r.choice(["table", "table", "src", "dst"] if n else ["table"]) if r.random() < 0.6 else ""
    if edge in ("src", "dst"):
        n = r.randint(8, 48)
    tables = [lut_table_values(r, nrng) for _ in range(1 + twice)]
    data = rand_i8(nrng, (max(n, 1), W))
    if n and r.random() < 0.4:                # the table's ends and the sign wrap: -128, -1, 0, 127
        data.reshape(-1)[:4] = (-128, -1, 0, 127)
    nb_words = neighbour_words(ctx, r) if edge else 0
    nb_data = rand_i8(nrng, (max(nb_words, 1), W))
    task = Task(ctx, 4 + 2 * twice + 2 * bool(edge))
    src = dst = 0
    nb = -1
    taddr: list[int] = []

    def loads():
        nonlocal src, dst, nb
        sizes = {"table": tw, "table2": tw if twice else 0, "src": max(n, 1),
                 "dst": 0 if in_place else max(n, 1)}
        at = {k: ctx.alloc(task, "sram", m) for k, m in sizes.items() if m and k != edge}
        if edge and sizes[edge]:
            at[edge], nb = bank_edge_neighbour(ctx, task, r, sizes[edge], nb_words,
                                               [(w, w + sizes[k]) for k, w in at.items()])
        taddr[:] = [at["table"]] + ([at["table2"]] if twice else [])
        src = at["src"]
        dst = src if in_place else at["dst"]
        for a, t in zip(taddr, tables):
            ctx.load(a, np.resize(t, tw * W))
        if n:
            ctx.load(src, data)

    def compute():
        load_neighbour(ctx, nb, nb_data)
        ctx.em.emit("LUT", src_addr=src, dst_addr=dst, count=n, table_addr=taddr[0])
        if twice:
            ctx.em.emit("LUT", src_addr=dst, dst_addr=dst, count=n, table_addr=taddr[1])

    def stores():
        if n:
            ctx.store(dst, n * W)
        if nb >= 0:
            ctx.store(nb, nb_words * W)
    task.phases = [loads, compute, stores]
    return task


def dwconv_task(ctx, r, nrng):
    """DWCONV over an H x Wd image of words (window 1x1 .. 3x3, a quarter without taps; strided
    outputs), a weight word per tap, a random per-channel requant table (a quarter of the time
    small data with multipliers 2^30 and shifts -1 .. -3: rounding ties), then store; the input
    zero point at an int8 end with the data and weights at the other a quarter of the time (the
    largest products, 255 * 128), relu 30 %. One operand (source, weights, table or destination)
    on a bank edge with a racing neighbour DMA 40 % of the time (bank_edge_neighbour). Drawn from
    ``r`` / ``nrng`` (side streams) apart from space, layouts and quant-register reuse."""
    cfg, W, pw = ctx.cfg, ctx.W, ctx.cfg.dw_param_words     # DWCONV's table: W channels
    h, wd = r.randint(1, 6), r.randint(1, 7)
    ww, wh = (0, 1) if r.random() < 0.25 else (r.randint(1, min(3, wd)), r.randint(1, min(3, h)))
    sx, sy = r.randint(1, 2), r.randint(1, 2)
    ow, oh = (wd - max(ww, 1)) // sx + 1, (h - wh) // sy + 1
    taps = ww * wh
    ties = r.random() < 0.25
    img = rand_i8(nrng, (h * wd, W), "small" if ties else "any")
    wts = rand_i8(nrng, (max(taps, 1), W), "small" if ties else "any")
    zin = r.choice([0, r.randint(-128, 127), -128, 127]) if not ties else r.randint(-2, 2)
    if not ties and r.random() < 0.33:
        img[:], wts[:], zin = -128, -128, 127
    if ties:
        c = W
        table = (nrng.integers(-8, 9, c).astype("<i4").tobytes() + np.full(c, 1 << 30, "<i4").tobytes()
                 + np.array([-r.randint(1, 3) for _ in range(c)], np.int8).tobytes())
    else:
        table, _ = requant_table(cfg, r, nrng, "any", channels=W)
    vin, vout = (0, 0, zin), (0, 0, r.choice([0, -128, r.randint(-128, 127)]))
    relu = int(r.random() < 0.3)
    sizes = {"src": h * wd, "wt": max(taps, 1), "param": pw, "dst": ow * oh}
    edge = r.choice(sorted(sizes)) if r.random() < 0.4 else ""
    nb_words = neighbour_words(ctx, r) if edge else 0
    nb_data = rand_i8(nrng, (max(nb_words, 1), W))
    task = Task(ctx, 9 + 2 * bool(edge))
    at: dict = {}
    nb = -1

    def loads():
        nonlocal nb
        at.update({k: ctx.alloc(task, "sram", n) for k, n in sizes.items() if k != edge})
        if edge:
            at[edge], nb = bank_edge_neighbour(ctx, task, r, sizes[edge], nb_words,
                                               [(w, w + sizes[k]) for k, w in at.items()])
        ctx.load(at["src"], img)
        ctx.load(at["wt"], wts)
        ctx.load(at["param"], np.frombuffer(table, np.int8))

    def compute():
        qi, qo = ctx.ensure_qreg(vin), ctx.ensure_qreg(vout)
        load_neighbour(ctx, nb, nb_data)
        ctx.em.emit("DWCONV", relu=relu, src_addr=at["src"], win_w=ww, win_h=wh, win_stride_x=1,
                    win_stride_y=wd, out_w=ow, out_stride_x=sx, out_h=oh, out_stride_y=sy * wd,
                    dst_addr=at["dst"], qreg_in=qi, qreg_out=qo, wt_addr=at["wt"], param_addr=at["param"])

    def stores():
        ctx.store(at["dst"], ow * oh * W)
        if nb >= 0:
            ctx.store(nb, nb_words * W)
    task.phases = [loads, compute, stores]
    return task


#: row-op data kinds, one per row (rowop_task), and the edge bins they aim at (stressgen.coverage)
ROWOP_KINDS = ("random", "equal", "huge", "masked", "masked_full", "saturate")


def _rowop_params(r, nrng, op: str, row_len: int, saturate: bool, W: int):
    """A SOFTMAX's (exp_mult, mask) or a LAYERNORM's (eps, table) fields and its output quant
    register value (rowop_task)."""
    if op == "SOFTMAX":
        s_in = 2.0 ** r.uniform(-9, 2)
        em = r.choice([round(s_in * math.log2(math.e) * 2 ** 20)] * 4 + [0, (1 << 24) - 1])
        s_out = r.choice([1 / 256, 1 / 255, 2.0 ** r.uniform(-9, -5)])
        m, sh = quantize_multiplier(2.0 ** -30 / s_out)
        zp = r.choice([-128, r.randint(-128, 127)])
        return dict(exp_mult=min(em, (1 << 24) - 1), mask=int(r.random() < 0.7)), None, (m, sh, zp)
    gamma = nrng.integers(-32768, 32768, row_len)
    beta = nrng.integers(-(1 << 27), 1 << 27, row_len)
    if saturate:
        gamma[: max(1, row_len // 2)] = r.choice([32767, -32768])
        beta[: max(1, row_len // 3)] = r.choice([(1 << 31) - 1, -(1 << 31)])
    m, sh = quantize_multiplier(2.0 ** r.uniform(-27, -18))
    eps = r.choice([0, r.randint(1, 1 << 20), r.randint(1, (1 << 48) - 1)])
    return dict(eps=eps), ln_param_words(gamma, beta, W), (m, sh, r.randint(-128, 127))


def rowop_task(ctx, r, nrng):
    """SOFTMAX and / or LAYERNORM (either, or both in either order on the same rows) over 1-4
    rows of 2 .. 4W elements (a third ending mid-word), row strides with gaps; the last one a
    quarter of the time in place (dst = src) and a quarter shifted by one word (each row re-reads
    words its own earlier writes replaced); each row's data one of ROWOP_KINDS: random, all equal
    (zero variance), a single huge logit, partly masked (-128), fully masked (SOFTMAX mask 1 70 %
    of the time); LAYERNORM saturates its accumulator through gamma and beta at the int16 / int32
    ends when a row is "saturate"; SOFTMAX exponent multipliers over S_in = 2^-9 .. 4 and the
    24-bit ends, LAYERNORM eps 0, small or 48-bit large; then store. Drawn from ``r`` / ``nrng``
    (side streams) apart from space and quant-register reuse."""
    W = ctx.W
    ops = r.choice([["SOFTMAX"], ["LAYERNORM"], ["SOFTMAX", "LAYERNORM"], ["LAYERNORM", "SOFTMAX"]])
    row_len = r.choice([r.randint(2, 4 * W), W * r.randint(1, 4), r.randint(2, W)])
    n, rows = row_words(row_len, W), r.randint(1, 4)
    layout = r.choice(["plain", "plain", "in_place", "shifted"])
    src_stride = n + r.choice([0, 0, r.randint(1, 3)])
    kinds = [r.choice(ROWOP_KINDS) for _ in range(rows)]
    span_src = (rows - 1) * src_stride + n
    x = rand_i8(nrng, (span_src, W))
    for r0, kind in enumerate(kinds):
        row = x[r0 * src_stride:r0 * src_stride + n]            # a view
        if kind == "equal":
            row[:] = r.randint(-128, 127)
        elif kind == "huge":
            row[:] = r.randint(-128, -90)
            row.reshape(-1)[r.randrange(row_len)] = 127
        elif kind == "masked":
            row[:] = np.where(nrng.random((n, W)) < 0.7, -128, row)
            row.reshape(-1)[r.randrange(row_len)] = r.randint(-127, 127)
        elif kind == "masked_full":
            row[:] = -128
    steps = []
    for k, op in enumerate(ops):
        lay = layout if k == len(ops) - 1 else "plain"
        dst_stride = src_stride if lay != "plain" else n + r.choice([0, r.randint(1, 2)])
        steps.append((op, lay, dst_stride) + _rowop_params(r, nrng, op, row_len, "saturate" in kinds, W))
    task = Task(ctx, 5 + 3 * len(ops))
    at: dict = {}

    def loads():
        at["src"] = ctx.alloc(task, "sram", span_src + (1 if layout == "shifted" else 0))
        ctx.load(at["src"], x)
        for k, (_, lay, dst_stride, _, table, _) in enumerate(steps):
            if lay == "plain":
                at[k, "dst"] = ctx.alloc(task, "sram", (rows - 1) * dst_stride + n)
            else:
                at[k, "dst"] = at["src"] + (1 if lay == "shifted" else 0)
            if table is not None:
                at[k, "param"] = ctx.alloc(task, "sram", len(table))
                ctx.load(at[k, "param"], table)

    def compute():
        for k, (op, _, dst_stride, fields, table, vout) in enumerate(steps):
            q = ctx.ensure_qreg(vout)
            args = dict(fields, param_addr=at[k, "param"]) if table is not None else fields
            ctx.em.emit(op, src_addr=at["src"], dst_addr=at[k, "dst"], row_len=row_len, rows=rows,
                        src_stride=src_stride, dst_stride=dst_stride, qreg_out=q, **args)

    def stores():
        for k, (_, lay, dst_stride, _, _, _) in enumerate(steps):
            if lay == "plain":
                ctx.store(at[k, "dst"], ((rows - 1) * dst_stride + n) * W)
        if layout != "plain":          # the source region, rewritten (and one word more if shifted)
            ctx.store(at["src"], (span_src + (layout == "shifted")) * W)
    task.phases = [loads, compute, stores]
    return task


def fill_task(ctx):
    """One DMA_LOAD that writes every SRAM byte, then stores of 1-3 random chunks of it."""
    cfg, r, W = ctx.cfg, ctx.r, ctx.W
    data = rand_i8(ctx.nrng, cfg.sram_size_bytes)
    chunks = []
    for _ in range(r.randint(1, 3)):
        n = r.randint(1, 64)
        chunks.append((r.randrange(cfg.sram_words - n), n))

    task = Task(ctx, 2 + len(chunks))

    def loads():
        base = ctx.alloc(task, "sram", cfg.sram_words)
        ctx.load(base, data, min_inner=cfg.dma_burst_bytes)

    def stores():
        for w0, n in chunks:
            ctx.store(w0, n * W)
    task.phases = [loads, lambda: None, stores]
    return task


__all__ = ["matmul_task", "pool_task", "add_task", "mul_task", "lut_task", "upsample_task", "dwconv_task", "rowop_task", "bank_edge_neighbour", "qreg_alias_task", "fill_task", "pick_m",
           "PRIME_K"]
