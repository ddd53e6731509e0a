"""VPU (LOAD_QREG, REQUANT, REQUANT_ADD, POOL, ADD, MUL, LUT, DWCONV) vs tpusim.arch.arith on random data, and its completion edges.

Thousands of lanes per op, including INT32 extremes, saturating shifts, negative values and
rounding ties. pytest builds dp_tb_top (8x8 'small' config). DP_SEED=<n> replays.
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

try:
    import cocotb
except ImportError:  # pragma: no cover
    cocotb = None

from tpusim.arch import arith, isa
from tpusim.arch.arith import INT32_MAX, INT32_MIN

if cocotb is not None and os.environ.get("COCOTB_TEST_MODULES"):
    from dp_tb import DpTb

    def _rng():
        s = int(os.environ.get("DP_SEED", random.randrange(1 << 30)))
        cocotb.log.info(f"DP_SEED={s}")
        return np.random.default_rng(s)

    async def _setup(dut):
        tb = DpTb(dut)
        await tb.start(int(os.environ["DP_SRAM_WORDS"]))
        return tb

    def _i32(rng, n):
        """int32 values: uniform, small, extremes, near-extremes, tie makers."""
        kind = rng.integers(0, 6, size=n)
        v = rng.integers(INT32_MIN, INT32_MAX + 1, size=n, dtype=np.int64)
        v = np.where(kind == 1, rng.integers(-5000, 5000, size=n), v)
        v = np.where(kind == 2, rng.choice([INT32_MIN, INT32_MAX, INT32_MIN + 1, INT32_MAX - 1, 0, -1, 1], size=n), v)
        v = np.where(kind == 3, rng.integers(-64, 64, size=n) * 2 + 1, v)       # odd: ties at /2
        v = np.where(kind == 4, (rng.integers(-2 ** 20, 2 ** 20, size=n) << 10) + 512, v)  # ties at /1024
        return v

    def _mults(rng, n):
        kind = rng.integers(0, 5, size=n)
        q = np.array([arith.quantize_multiplier(r)[0] for r in rng.uniform(1e-4, 4.0, size=n)], dtype=np.int64)
        q = np.where(kind == 1, rng.choice([1 << 30, INT32_MAX, INT32_MIN, 0, 1, -(1 << 30)], size=n), q)
        q = np.where(kind == 2, rng.integers(INT32_MIN, INT32_MAX + 1, size=n, dtype=np.int64), q)
        q = np.where(kind == 3, 1 << 30, q)
        return q

    def _shifts(rng, n):
        kind = rng.integers(0, 5, size=n)
        s = rng.integers(-31, 31, size=n)
        s = np.where(kind == 1, rng.choice([-31, -1, 0, 1, 30, 20], size=n), s)
        s = np.where(kind == 2, rng.integers(-12, 2, size=n), s)
        # beyond the compiler's [-31, 30]: every int8 shift is defined (docs/isa.md)
        s = np.where(kind == 4, rng.choice([-128, -127, -64, -33, -32, 31, 32, 33, 64, 127], size=n), s)
        return s

    def _qreg(rng):
        return int(_mults(rng, 1)[0]), int(_shifts(rng, 1)[0]), int(rng.integers(-128, 128))

    async def _load_qreg(tb, idx, mult, shift, zp):
        s, g, c = await tb.run("vpu", isa.make("LOAD_QREG", qreg=idx, multiplier=mult,
                                               shift=shift, zero_point=zp))
        assert c == s + 1, (s, c)

    def _words(tb, arr):
        return [tb.word_int(r) for r in np.asarray(arr).reshape(-1, tb.W)]

    async def _write_table(tb, addr, bias, mult, shift):
        """A per-channel table (bias int32, mult int32, shift int8, packed) into SRAM words from
        ``addr`` (ceil(9 * channels / W) words)."""
        table = bias.astype("<i4").tobytes() + mult.astype("<i4").tobytes() + shift.astype("i1").tobytes()
        n = -(-len(table) // tb.W)
        await tb.write_words(addr, [int.from_bytes(table[j * tb.W:(j + 1) * tb.W], "little") for j in range(n)])

    @cocotb.test()
    async def requant_random(dut):
        tb = await _setup(dut)
        rng = _rng()
        C, W = tb.C, tb.W
        P = 9 * C // W
        lanes = 0
        for trial in range(10):
            count = int(rng.integers(1, 64))
            acc = _i32(rng, count * C).reshape(count, C)
            bias = _i32(rng, C) if trial % 2 else rng.integers(-1000, 1000, size=C)
            mult, shift = _mults(rng, C), _shifts(rng, C)
            zp = int(rng.integers(-128, 128))
            relu = int(rng.integers(0, 2))
            qidx = int(rng.integers(0, 64))
            await _load_qreg(tb, qidx, int(rng.integers(INT32_MIN, INT32_MAX)), 5, zp)
            param = int(rng.integers(0, 200))
            dst = int(rng.integers(300, 1500))
            await _write_table(tb, param, bias, mult, shift)
            await tb.write_accmem(acc)
            s, g, c = await tb.run_from_accmem(isa.make("REQUANT", acc_addr=0, count=count, param_addr=param,
                                                        dst_addr=dst, qreg=qidx, relu=relu))
            assert tb.last_err == (0, 0), tb.last_err
            assert g == s + 1 and c == g + P + count, (s, g, c, P, count)
            got = np.array([tb.int_word(v) for v in await tb.read_words(dst, count)])
            want = arith.requant_conv(acc, bias, mult, shift, zp, bool(relu))
            bad = np.argwhere(got != want)
            assert bad.size == 0, (f"trial {trial}: {len(bad)} lanes differ, first {bad[0]}: acc="
                                   f"{acc[tuple(bad[0])]} bias={bias[bad[0][1]]} mult={mult[bad[0][1]]} "
                                   f"shift={shift[bad[0][1]]} zp={zp} relu={relu} got={got[tuple(bad[0])]} "
                                   f"want={want[tuple(bad[0])]}")
            lanes += got.size
        dut._log.info(f"requant_random: {lanes} lanes bit-exact")

    @cocotb.test()
    async def requant_after_matmul(dut):
        """Integration: MATMUL results in the real accumulator, then REQUANT."""
        tb = await _setup(dut)
        rng = _rng()
        R, C = tb.W, tb.C
        w = rng.integers(-128, 128, size=(R, C))
        x = rng.integers(-128, 128, size=(20, R))
        await tb.write_words(0, [tb.word_int(w[:, n]) for n in range(C)])
        await tb.run("mxu", isa.make("LOAD_WEIGHTS", sram_addr=0))
        await tb.write_words(100, _words(tb, x))
        await tb.run("mxu", isa.make("MATMUL", act_addr=100, count_x=20, stride_x=1, count_y=1,
                                     acc_addr=5))
        bias, mult, shift = rng.integers(-3000, 3000, size=C), _mults(rng, C), rng.integers(-14, -4, size=C)
        await _write_table(tb, 200, bias, mult, shift)
        await _load_qreg(tb, 3, 0, 0, -7)
        s, g, c = await tb.run("vpu", isa.make("REQUANT", acc_addr=5, count=20, param_addr=200,
                                               dst_addr=300, qreg=3, relu=1))
        got = np.array([tb.int_word(v) for v in await tb.read_words(300, 20)])
        want = arith.requant_conv(arith.matmul_acc(x, w), bias, mult, shift, -7, True)
        assert np.array_equal(got, want), (got, want)

    @cocotb.test()
    async def requant_add_random(dut):
        """REQUANT_ADD = REQUANT then ADD of its output (a) and the skip (b), bit for bit, in
        param_words + 2*count accesses; also in place (skip_addr = dst_addr)."""
        tb = await _setup(dut)
        rng = _rng()
        C, W = tb.C, tb.W
        P = 9 * C // W
        lanes = 0
        for trial in range(8):
            count = int(rng.integers(1, 48))
            acc = _i32(rng, count * C).reshape(count, C) >> int(rng.integers(0, 24))
            bias = rng.integers(-1000, 1000, size=C)
            mult, shift = _mults(rng, C), _shifts(rng, C)
            skip = rng.integers(-128, 128, size=(count, W))
            if trial % 2:
                sa, sb, so = rng.uniform(0.001, 0.2, size=3)
                (ma, sha), (mb, shb), (mo, sho) = arith.add_multipliers(sa, sb, so)
                za, zb, zo = (int(v) for v in rng.integers(-128, 128, size=3))
            else:
                (ma, sha, za), (mb, shb, zb), (mo, sho, zo) = _qreg(rng), _qreg(rng), _qreg(rng)
            relu, add_relu = (int(v) for v in rng.integers(0, 2, size=2))
            qa, qb, qo = (int(v) for v in rng.choice(64, size=3, replace=False))
            await _load_qreg(tb, qa, ma, sha, za)
            await _load_qreg(tb, qb, mb, shb, zb)
            await _load_qreg(tb, qo, mo, sho, zo)
            param, dst = 0, 300
            sk = dst if trial % 4 == 3 else 700
            await _write_table(tb, param, bias, mult, shift)
            await tb.write_words(sk, _words(tb, skip))
            await tb.write_accmem(acc)
            s, g, c = await tb.run_from_accmem(isa.make("REQUANT_ADD", acc_addr=0, count=count, param_addr=param,
                                                        dst_addr=dst, qreg=qa, relu=relu, skip_addr=sk,
                                                        qreg_b=qb, qreg_out=qo, add_relu=add_relu))
            assert tb.last_err == (0, 0), tb.last_err
            assert g == s + 1 and c == g + P + 2 * count, (s, g, c, P, count)
            got = np.array([tb.int_word(v) for v in await tb.read_words(dst, count)])
            y = arith.requant_conv(acc, bias, mult, shift, za, bool(relu))
            want = arith.add_int8(y, skip, za, ma, sha, zb, mb, shb, zo, mo, sho, bool(add_relu))
            bad = np.argwhere(got != want)
            assert bad.size == 0, (f"trial {trial}: {len(bad)} lanes differ, first at {bad[0]}: "
                                   f"y={y[tuple(bad[0])]} skip={skip[tuple(bad[0])]} got={got[tuple(bad[0])]} "
                                   f"want={want[tuple(bad[0])]}")
            lanes += got.size
        dut._log.info(f"requant_add_random: {lanes} lanes bit-exact")

    @cocotb.test()
    async def add_random(dut):
        tb = await _setup(dut)
        rng = _rng()
        lanes = 0
        for trial in range(12):
            count = int(rng.integers(1, 80))
            a = rng.integers(-128, 128, size=(count, tb.W))
            b = rng.integers(-128, 128, size=(count, tb.W))
            if trial % 3 == 0:
                sa, sb, so = rng.uniform(0.001, 0.2, size=3)
                (ma, sha), (mb, shb), (mo, sho) = arith.add_multipliers(sa, sb, so)
                za, zb, zo = (int(v) for v in rng.integers(-128, 128, size=3))
            else:
                (ma, sha, za), (mb, shb, zb), (mo, sho, zo) = _qreg(rng), _qreg(rng), _qreg(rng)
            relu = int(rng.integers(0, 2))
            qa, qb, qo = (int(v) for v in rng.choice(64, size=3, replace=trial % 4 != 0))
            await _load_qreg(tb, qa, ma, sha, za)
            await _load_qreg(tb, qb, mb, shb, zb)
            await _load_qreg(tb, qo, mo, sho, zo)
            # qregs may alias (replace=True): the last load wins
            regs = {}
            for i, v in ((qa, (ma, sha, za)), (qb, (mb, shb, zb)), (qo, (mo, sho, zo))):
                regs[i] = v
            (ma, sha, za), (mb, shb, zb), (mo, sho, zo) = regs[qa], regs[qb], regs[qo]
            src_a, src_b, dst = 0, 400, 900
            await tb.write_words(src_a, _words(tb, a))
            await tb.write_words(src_b, _words(tb, b))
            s, g, c = await tb.run("vpu", isa.make("ADD", src_a=src_a, src_b=src_b, dst_addr=dst,
                                                   count=count, qreg_a=qa, qreg_b=qb, qreg_out=qo,
                                                   relu=relu))
            assert tb.last_err == (0, 0)
            assert g == s + 1 and c == g + 3 * count, (s, g, c, count)
            got = np.array([tb.int_word(v) for v in await tb.read_words(dst, count)])
            want = arith.add_int8(a, b, za, ma, sha, zb, mb, shb, zo, mo, sho, bool(relu))
            bad = np.argwhere(got != want)
            assert bad.size == 0, (f"trial {trial}: {len(bad)} lanes differ, first at {bad[0]}: "
                                   f"a={a[tuple(bad[0])]} b={b[tuple(bad[0])]} qa={(ma, sha, za)} "
                                   f"qb={(mb, shb, zb)} qo={(mo, sho, zo)} got={got[tuple(bad[0])]} "
                                   f"want={want[tuple(bad[0])]}")
            lanes += got.size
        dut._log.info(f"add_random: {lanes} lanes bit-exact")

    @cocotb.test()
    async def pool_random(dut):
        tb = await _setup(dut)
        rng = _rng()
        lanes = 0
        for trial in range(40):
            avg = trial % 2
            ww, wh = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            osx, ow, oh = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
            img_w = (ow - 1) * osx + ww + int(rng.integers(0, 3))
            osy_rows = int(rng.integers(1, 3))
            img_h = (oh - 1) * osy_rows + wh
            src = int(rng.integers(0, 100))
            img = rng.integers(-128, 128, size=(img_h, img_w, tb.W))
            if trial == 1:
                img[:] = 127
            await tb.write_words(src, _words(tb, img))
            zin = int(rng.integers(-128, 128))
            mo, so, zo = _qreg(rng) if trial % 4 == 3 else (
                *arith.quantize_multiplier(float(rng.uniform(0.3, 2.0)) / (ww * wh)), int(rng.integers(-128, 128)))
            await _load_qreg(tb, 10, 0, 0, zin)
            await _load_qreg(tb, 11, mo, so, zo)
            dst = 1200
            s, g, c = await tb.run("vpu", isa.make(
                "POOL", mode=avg, src_addr=src, win_w=ww, win_h=wh, win_stride_x=1,
                win_stride_y=img_w, out_w=ow, out_stride_x=osx, out_h=oh,
                out_stride_y=osy_rows * img_w, dst_addr=dst, qreg_in=10, qreg_out=11))
            D = ow * oh * (ww * wh + 1)
            assert g == s + 1 and c == g + D, (s, g, c, D)
            got = np.array([tb.int_word(v) for v in await tb.read_words(dst, ow * oh)])
            want = []
            for y in range(oh):
                for x in range(ow):
                    win = img[y * osy_rows:y * osy_rows + wh, x * osx:x * osx + ww].reshape(-1, tb.W)
                    if avg:
                        want.append(arith.pool_avg(win.sum(0), ww * wh, zin, mo, so, zo))
                    else:
                        want.append(win.max(0).astype(np.int8))
            want = np.array(want)
            assert np.array_equal(got, want), f"trial {trial} avg={avg}: got {got} want {want}"
            lanes += got.size
        dut._log.info(f"pool_random: {lanes} lanes bit-exact")

    @cocotb.test()
    async def mul_random(dut):
        """MUL: random operands and quant registers, b per word and broadcast (stride_b = 0),
        relu, extreme zero points (products up to 255 * 255)."""
        tb = await _setup(dut)
        rng = _rng()
        lanes = 0
        for trial in range(12):
            count = int(rng.integers(1, 60))
            stride_b = int(trial % 3 != 0)
            a = rng.integers(-128, 128, size=(count, tb.W))
            b = rng.integers(-128, 128, size=(count if stride_b else 1, tb.W))
            if trial % 4 == 1:
                za, zb = 127, -128
                a[:] = -128
                b[:] = 127
            else:
                za, zb = (int(v) for v in rng.integers(-128, 128, size=2))
            if trial % 2:
                mo, so = arith.quantize_multiplier(float(rng.uniform(1e-5, 0.05)))
            else:
                mo, so, _ = _qreg(rng)
            zo, relu = int(rng.integers(-128, 128)), int(rng.integers(0, 2))
            await _load_qreg(tb, 3, int(rng.integers(0, 1 << 30)), 5, za)
            await _load_qreg(tb, 40, 0, 0, zb)
            await _load_qreg(tb, 63, mo, so, zo)
            await tb.write_words(0, _words(tb, a))
            await tb.write_words(400, _words(tb, b))
            s, g, c = await tb.run("vpu", isa.make("MUL", src_a=0, src_b=400, dst_addr=900, count=count,
                                                   stride_b=stride_b, qreg_a=3, qreg_b=40, qreg_out=63, relu=relu))
            assert tb.last_err == (0, 0)
            assert g == s + 1 and c == g + 3 * count, (s, g, c, count)
            got = np.array([tb.int_word(v) for v in await tb.read_words(900, count)])
            want = arith.mul_int8(a, b, za, zb, zo, mo, so, bool(relu))
            assert np.array_equal(got, want), f"trial {trial}: got {got} want {want}"
            lanes += got.size
        dut._log.info(f"mul_random: {lanes} lanes bit-exact")

    @cocotb.test()
    async def lut_random(dut):
        """LUT: random tables (also identity and constant) at changing addresses, in place
        (dst = src), all inputs -128, and count 0 (the table is still read: D = LUT_WORDS)."""
        tb = await _setup(dut)
        rng = _rng()
        tw = -(-256 // tb.W)
        lanes = 0
        for trial in range(10):
            count = int(rng.integers(0 if trial == 3 else 1, 60))
            x = rng.integers(-128, 128, size=(count, tb.W))
            if trial == 1:
                x[:] = -128
            table = rng.integers(-128, 128, size=256)
            if trial == 0:
                table = (np.arange(256) + 128) % 256 - 128          # identity
            elif trial == 2:
                table[:] = 77
            tbl_addr, src = 1500 + (trial % 3), int(rng.integers(0, 100))
            dst = src if trial == 4 else 900
            await tb.write_words(tbl_addr, _words(tb, np.resize(table, (tw, tb.W))))
            if count:
                await tb.write_words(src, _words(tb, x))
            s, g, c = await tb.run("vpu", isa.make("LUT", src_addr=src, dst_addr=dst, count=count,
                                                   table_addr=tbl_addr))
            assert tb.last_err == (0, 0)
            assert g == s + 1 and c == g + tw + 2 * count, (s, g, c, count)
            if count:
                got = np.array([tb.int_word(v) for v in await tb.read_words(dst, count)])
                want = arith.lut_int8(x, table)
                assert np.array_equal(got, want), f"trial {trial}: got {got} want {want}"
                lanes += got.size
        dut._log.info(f"lut_random: {lanes} lanes bit-exact")

    @cocotb.test()
    async def dwconv_random(dut):
        """DWCONV: random windows (1x1 to 3x3, strided outputs), weights, per-channel tables
        (INT32 extreme biases, saturating shifts), zero points at the int8 ends with data at the
        other end (the largest products), relu, and a 0-tap window (the bias alone)."""
        tb = await _setup(dut)
        rng = _rng()
        C, W = tb.C, tb.W
        P = 9 * C // W
        lanes = 0
        for trial in range(16):
            ww, wh = (0, 1) if trial == 5 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
            osx, ow, oh = int(rng.integers(1, 3)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
            img_w = (ow - 1) * osx + max(ww, 1) + int(rng.integers(0, 3))
            osy_rows = int(rng.integers(1, 3))
            img_h = (oh - 1) * osy_rows + wh
            img = rng.integers(-128, 128, size=(img_h, img_w, W))
            wts = rng.integers(-128, 128, size=(max(ww * wh, 1), W))
            zin = int(rng.integers(-128, 128))
            if trial % 4 == 1:
                img[:], wts[:], zin = -128, -128, 127
            bias = _i32(rng, C) if trial % 3 == 2 else rng.integers(-20000, 20000, size=C)
            if trial % 2:
                mult, shift = _mults(rng, C), _shifts(rng, C)
            else:
                ms = [arith.quantize_multiplier(float(r)) for r in rng.uniform(1e-4, 0.02, size=C)]
                mult, shift = np.array([m for m, _ in ms]), np.array([s for _, s in ms])
            zo, relu = int(rng.integers(-128, 128)), int(rng.integers(0, 2))
            src, wt, param, dst = int(rng.integers(0, 100)), 700 + trial, 800 + 3 * trial, 1200
            await tb.write_words(src, _words(tb, img))
            await tb.write_words(wt, _words(tb, wts))
            await _write_table(tb, param, bias, mult, shift)
            await _load_qreg(tb, 20, int(rng.integers(0, 1 << 30)), 3, zin)
            await _load_qreg(tb, 33, 0, 0, zo)
            s, g, c = await tb.run("vpu", isa.make(
                "DWCONV", relu=relu, src_addr=src, win_w=ww, win_h=wh, win_stride_x=1,
                win_stride_y=img_w, out_w=ow, out_stride_x=osx, out_h=oh, out_stride_y=osy_rows * img_w,
                dst_addr=dst, qreg_in=20, qreg_out=33, wt_addr=wt, param_addr=param))
            assert tb.last_err == (0, 0), tb.last_err
            D = P + ow * oh * (2 * ww * wh + 1)
            assert g == s + 1 and c == g + D, (s, g, c, D)
            got = np.array([tb.int_word(v) for v in await tb.read_words(dst, ow * oh)])
            taps = np.array([img[y * osy_rows:y * osy_rows + wh, x * osx:x * osx + ww].reshape(-1, W)
                             for y in range(oh) for x in range(ow)]).reshape(ow * oh, ww * wh, W)
            acc = arith.depthwise_acc(taps, wts[:ww * wh], zin)
            want = arith.requant_conv(acc, bias, mult, shift, zo, bool(relu))
            assert np.array_equal(got, want), f"trial {trial} ({ww}x{wh}): got {got} want {want}"
            lanes += got.size
        dut._log.info(f"dwconv_random: {lanes} lanes bit-exact")

    @cocotb.test()
    async def qreg_invalid_and_zero_count(dut):
        tb = await _setup(dut)
        await _load_qreg(tb, 5, 1 << 30, 0, 0)
        s, g, c = await tb.run("vpu", isa.make("ADD", src_a=0, src_b=8, dst_addr=16, count=2,
                                               qreg_a=5, qreg_b=42, qreg_out=5))
        assert tb.last_err == (1, 42), tb.last_err
        s, g, c = await tb.run("vpu", isa.make("POOL", mode=0, src_addr=0, win_w=2, win_h=2,
                                               out_w=0, out_h=3, qreg_in=60, qreg_out=61))
        assert tb.last_err == (0, 0) and c == s + 1, (tb.last_err, s, c)
        s, g, c = await tb.run("vpu", isa.make("DWCONV", src_addr=0, win_w=3, win_h=3, out_w=4, out_h=0,
                                               qreg_in=5, qreg_out=5))
        assert tb.last_err == (0, 0) and c == s + 1, (tb.last_err, s, c)
        s, g, c = await tb.run("vpu", isa.make("NOP", engine=3))
        assert c == s + 1


@pytest.mark.rtl
def test_dp_vpu():
    from dp_harness import UNIT, build_and_test, cfg_params
    p = cfg_params()
    t = build_and_test("vpu8", "dp_tb_top", "test_dp_vpu", p, extra_sources=[UNIT / "dp_tb_top.sv"])
    print(f"build: {t:.1f} s")
