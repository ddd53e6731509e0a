"""tpusim.arch.executor: every opcode's semantics on hand programs ('small' config: W = R = C = 8),
the zero-size rules shared with the SimPy model, device errors at start, the token-respecting
scheduler (round robin, seeded interleavings, deadlock, token overflow), decoding code bytes,
and agreement with the SimPy model."""
from __future__ import annotations

import numpy as np
import pytest

from tpusim.arch import arith
from tpusim.arch.config import load_config
from tpusim.arch.ddr_memory import DdrMemory
from tpusim.arch.errors import DeadlockError, DeviceError, SimulationError
from tpusim.arch.executor import Machine, dispatch, program_from_code, run_program, run_tokens
from tpusim.arch.isa import encode_program, make
from tpusim.arch.limits import DDR_ADDR_LIMIT, TOKEN_MAX
from tpusim.sim import run_program as simpy_run_program

CFG = load_config("small")
LOAD, STORE, MXU, VPU = 1, 2, 4, 8
HALT = make("HALT")
DMA = dict(count1=1, count2=1)


def machine(**sram_words) -> Machine:
    """A Machine whose SRAM words are preset: word address -> 8 int8 values."""
    m = Machine(CFG)
    for k, v in sram_words.items():
        m.sram[int(k[1:])] = v
    return m


def test_dma_strided_load_and_store_on_sparse_ddr_at_the_top():
    """2 rows x 2 runs of 8 bytes from the last 4 KiB page below 2^40, stored back at 2^36."""
    ddr = DdrMemory()
    top = DDR_ADDR_LIMIT - 4096
    ddr.write(top, bytes(range(256)))
    load = make("DMA_LOAD", ddr_addr=top, sram_addr=64, inner_bytes=8, count1=2, ddr_stride1=32,
                sram_stride1=16, count2=2, ddr_stride2=128, sram_stride2=64, signal=STORE)
    store = make("DMA_STORE", ddr_addr=1 << 36, sram_addr=64, inner_bytes=128, wait=LOAD, **DMA)
    m = run_program([load, store, HALT], CFG, ddr)
    sram = m.sram.reshape(-1).view(np.uint8)
    for o2 in range(2):
        for o1 in range(2):
            s, d = 64 + 64 * o2 + 16 * o1, 128 * o2 + 32 * o1
            assert sram[s:s + 8].tolist() == list(range(d, d + 8))
    assert ddr.read(1 << 36, 128) == sram[64:192].tobytes()
    assert m.ddr is ddr


def test_matmul_weights_layout_accumulate_and_int32_wrap():
    w = np.arange(64, dtype=np.int8).reshape(8, 8) - 32          # W[k][n]
    m = machine()
    m.sram[0:8] = w.T                                            # word n = column n
    m.sram[20] = np.full(8, 127, np.int8)
    m.sram[22] = np.arange(8, dtype=np.int8)
    m.acc[5] = arith.INT32_MAX                                   # overwritten by the first MATMUL
    prog = [make("LOAD_WEIGHTS", sram_addr=0),
            make("MATMUL", act_addr=20, count_x=2, stride_x=2, count_y=1, acc_addr=4),
            make("MATMUL", act_addr=20, count_x=1, count_y=1, acc_addr=5, accumulate=1), HALT]
    run_tokens(prog, dispatch(prog), m.execute)
    x = np.stack([m.sram[20], m.sram[22]]).astype(np.int64)
    assert (m.weights == w).all()
    assert m.acc[4].tolist() == (x[0] @ w).tolist()                       # overwrite (preset lost)
    assert m.acc[5].tolist() == arith.wrap32(x[1] @ w + x[0] @ w).tolist()
    m.acc[6] = arith.INT32_MAX
    m.execute(9, make("MATMUL", act_addr=20, count_x=1, count_y=1, acc_addr=6, accumulate=1))
    assert m.acc[6].tolist() == arith.wrap32(arith.INT32_MAX + x[0] @ w).tolist()


def test_requant_reads_the_table_and_zero_point():
    bias = np.arange(8, dtype="<i4") * 10
    mult = np.full(8, 1 << 30, "<i4")
    shift = np.array([0, -1, 1, 0, 0, 0, 0, 0], np.int8)
    m = machine()
    m.sram.reshape(-1)[80:80 + 72] = np.frombuffer(bias.tobytes() + mult.tobytes() + shift.tobytes(), np.int8)
    m.acc[3] = np.arange(8) * 7 - 20
    m.execute(0, make("LOAD_QREG", qreg=9, zero_point=-5))
    m.execute(1, make("REQUANT", acc_addr=3, count=1, param_addr=10, dst_addr=200, qreg=9, relu=1))
    want = arith.requant_conv(m.acc[3:4], bias, mult, shift, -5, True)
    assert m.sram[200].tolist() == want[0].tolist()
    m.execute(2, make("REQUANT", acc_addr=3, count=0, param_addr=10, dst_addr=300, qreg=9))
    assert not m.sram[300].any()


def test_pool_max_average_and_zero_tap_window():
    m = machine(w10=[1, -2, 3, -4, 5, -6, 7, -8], w11=[8, 7, 6, 5, 4, 3, 2, 1],
                w12=[-1, -1, -1, -1, -1, -1, -1, -1], w13=[0, 0, 0, 0, 0, 0, 0, 100])
    m.execute(0, make("LOAD_QREG", qreg=1, zero_point=2))
    m.execute(1, make("LOAD_QREG", qreg=2, multiplier=1 << 30, shift=-1, zero_point=3))
    win = dict(src_addr=10, win_w=2, win_h=2, win_stride_x=1, win_stride_y=2, out_w=1, out_h=1)
    m.execute(2, make("POOL", mode=0, dst_addr=50, **win))
    assert m.sram[50].tolist() == [8, 7, 6, 5, 5, 3, 7, 100]
    m.execute(3, make("POOL", mode=1, dst_addr=51, qreg_in=1, qreg_out=2, **win))
    taps = m.sram[10:14].astype(np.int64)
    assert m.sram[51].tolist() == arith.pool_avg(taps.sum(0), 4, 2, 1 << 30, -1, 3).tolist()
    # a window of 0 taps (clarification 6): max -128, average pool_avg(0, 0, ...)
    m.execute(4, make("POOL", mode=0, dst_addr=52, **{**win, "win_w": 0}))
    assert m.sram[52].tolist() == [-128] * 8
    m.execute(5, make("POOL", mode=1, dst_addr=53, qreg_in=1, qreg_out=2, **{**win, "win_h": 0}))
    assert m.sram[53].tolist() == arith.pool_avg(np.zeros(8), 0, 2, 1 << 30, -1, 3).tolist()


def test_add_and_zero_count():
    a, b = np.arange(-4, 4, dtype=np.int8), np.arange(8, dtype=np.int8) * 3
    m = machine(w0=a, w1=b)
    (ma, sa), (mb, sb), (mo, so) = arith.add_multipliers(0.05, 0.1, 0.2)
    for q, (mult, shift, zp) in enumerate(((ma, sa, 1), (mb, sb, -2), (mo, so, 4))):
        m.execute(q, make("LOAD_QREG", qreg=q, multiplier=mult, shift=shift, zero_point=zp))
    m.execute(3, make("ADD", src_a=0, src_b=1, dst_addr=2, count=1, qreg_a=0, qreg_b=1, qreg_out=2))
    want = arith.add_int8(a, b, 1, ma, sa, -2, mb, sb, 4, mo, so, False)
    assert m.sram[2].tolist() == want.tolist()
    m.execute(4, make("ADD", src_a=0, src_b=1, dst_addr=3, count=0, qreg_a=50, qreg_b=51, qreg_out=52))
    assert not m.sram[3].any()


def test_device_error_at_start_does_no_work():
    m = machine(w0=[1] * 8)
    bad = make("DMA_STORE", ddr_addr=0x1000, sram_addr=4, inner_bytes=8, **DMA)
    with pytest.raises(DeviceError) as ei:
        m.execute(2, bad)
    e = ei.value
    assert (e.code, e.pc, e.field, e.value) == ("dma_misaligned", 0x40, "sram_addr", 4)
    assert str(e) == "instruction #2 at pc 0x40 (DMA_STORE): sram_addr=0x4 (4) is not a multiple of the 8-byte SRAM word"
    assert m.ddr.pages == {}
    with pytest.raises(DeviceError, match=r"\(ADD\): qreg_a=0x7 \(7\) \(bank 0, entry 7\)") as ei:
        run_program([make("ADD", count=1, qreg_a=7), HALT], CFG)
    assert ei.value.code == "qreg_unloaded"


# ------------------------------------------------------------------ scheduler
def _order(prog, seed):
    seen = []
    m = Machine(CFG)
    run_tokens(prog, dispatch(prog), lambda i, ins: (seen.append(i), m.execute(i, ins)), seed)
    return seen


def test_dispatch_queues_by_engine_up_to_halt():
    prog = [make("NOP", engine=3), make("LOAD_WEIGHTS"), make("NOP", engine=0), HALT, make("NOP", engine=1)]
    assert dispatch(prog) == [[2], [], [1], [0]]
    with pytest.raises(SimulationError, match="program has no HALT"):
        dispatch(prog[:3])


def test_round_robin_and_seeded_interleavings_respect_tokens():
    """Four independent engines: round robin starts at LOAD and rotates; seeds give other orders;
    the VPU NOP waits for LOAD and MXU tokens in every order."""
    prog = [make("NOP", engine=e) for e in (0, 1, 2, 3, 0, 1, 2)] + [
        make("NOP", engine=0, signal=VPU), make("NOP", engine=2, signal=VPU), make("NOP", engine=3, wait=LOAD | MXU),
        HALT]
    assert _order(prog, None) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    orders = {tuple(_order(prog, s)) for s in range(12)}
    assert len(orders) > 3
    for o in orders:
        assert sorted(o) == list(range(10))
        assert o.index(9) > max(o.index(7), o.index(8))
        for e_first, e_next in ((0, 4), (4, 7), (2, 6), (6, 8), (3, 9), (1, 5)):
            assert o.index(e_first) < o.index(e_next)        # each queue in program order
    assert _order(prog, 5) == _order(prog, 5)


def test_deadlock_names_every_stuck_engine():
    prog = [make("NOP", engine=0, wait=MXU), make("NOP", engine=3, signal=MXU),
            make("NOP", engine=2, wait=LOAD | VPU | STORE), HALT]
    with pytest.raises(DeadlockError) as ei:
        run_program(prog, CFG)
    assert ei.value.waiting == [("LOAD", 0x0, ("MXU",)), ("MXU", 0x40, ("LOAD", "STORE"))]
    assert str(ei.value) == ("deadlock: LOAD waits forever for a token from MXU; stuck heads: LOAD #0, "
                             "MXU #2")


def test_token_overflow_on_the_256th_unconsumed_token():
    ok = [make("NOP", engine=3, signal=MXU)] * TOKEN_MAX + [make("NOP", engine=2, wait=VPU), HALT]
    run_program(ok, CFG)
    with pytest.raises(DeviceError) as ei:
        run_program([make("NOP", engine=3, signal=MXU | LOAD)] * (TOKEN_MAX + 1) + [HALT], CFG)
    e = ei.value
    assert (e.code, e.pc, e.field, e.value) == ("token_overflow", 255 * 32, "signal", 5)
    assert str(e) == ("instruction #255 at pc 0x1fe0 (NOP): signal=0x5 (5) overflows token counter VPU->LOAD "
                      "(255 tokens not yet consumed)")


# ------------------------------------------------------------------ code bytes
def test_program_from_code_decodes_as_the_hardware():
    code = bytearray(encode_program([make("NOP", engine=1), HALT, make("LOAD_WEIGHTS")]))
    prog = program_from_code(bytes(code))
    assert [i.op for i in prog] == ["NOP", "HALT"] and prog[0].args == {"engine": 1}
    code[31] = 0x40                                  # an unused bit of the NOP: the decoder's error
    with pytest.raises(DeviceError) as ei:
        program_from_code(bytes(code))
    assert (ei.value.code, ei.value.pc, ei.value.field, ei.value.value) == ("unused_bits", 0, "bit", 254)
    assert str(ei.value) == ("instruction #0 at pc 0x0 (NOP): bit=0xfe (254) is set: NOP uses bits 0-17, "
                             "bits 18 and up must be zero")
    with pytest.raises(DeviceError) as ei:
        program_from_code(encode_program([make("NOP", engine=1)]) + bytes([0xEE]) + bytes(31))
    assert (ei.value.code, ei.value.pc) == ("reserved_opcode", 0x20)
    assert str(ei.value) == "instruction #1 at pc 0x20: opcode=0xee (238) is a reserved opcode"
    with pytest.raises(SimulationError, match="code of 32 bytes has no HALT"):
        program_from_code(encode_program([make("NOP", engine=1)]))


def test_same_final_state_as_the_simpy_model():
    """A load -> matmul -> requant -> store chain: SRAM and DDR equal the SimPy model's."""
    rng = np.random.default_rng(3)
    data = rng.integers(-128, 128, 64 + 64 + 8, dtype=np.int8).tobytes()
    table = (rng.integers(-99, 99, 8, dtype=np.int32).astype("<i4").tobytes()
             + np.full(8, 1 << 29, "<i4").tobytes() + bytes(8))
    prog = [make("DMA_LOAD", ddr_addr=0x20000, sram_addr=0, inner_bytes=136, **DMA),
            make("DMA_LOAD", ddr_addr=0x30000, sram_addr=136, inner_bytes=72, signal=MXU | VPU, **DMA),
            make("LOAD_QREG", qreg=5, zero_point=1),
            make("LOAD_WEIGHTS", sram_addr=0, wait=LOAD),
            make("MATMUL", act_addr=8, count_x=9, stride_x=1, count_y=1, acc_addr=0, signal=VPU),
            make("REQUANT", acc_addr=0, count=9, param_addr=17, dst_addr=100, qreg=5, wait=LOAD | MXU, signal=STORE),
            make("DMA_STORE", ddr_addr=0x40000, sram_addr=800, inner_bytes=72, wait=VPU, **DMA), HALT]
    segs = [(0x20000, data), (0x30000, table)]
    ddr = DdrMemory()
    for a, d in segs:
        ddr.write(a, d)
    m = run_program(prog, CFG, ddr, sched_seed=4)
    _, tpu = simpy_run_program(prog, CFG, segs, code_addr=0x1000)
    assert ddr.read(0x40000, 72) == tpu.ddr_mem.read(0x40000, 72) != bytes(72)
    assert m.sram.tobytes() == tpu.sram.words.tobytes()
    assert (m.acc == tpu.acc.rows).all()
