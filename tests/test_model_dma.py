"""DMA channels: functional round trip with 3-D strides, burst splitting, exact burst timing, errors.

All programs are hand-assembled and run on the 'small' config: 8x8 array (W = 8-byte words),
DDR beat 16 bytes, DDR latency L = 8, burst BB = 64 bytes, clocks core 1000 ps / phase 0,
DDR 1250 ps / phase 100, DMA 2500 ps / phase 50.
"""
import numpy as np
import pytest

from tpusim.config import load_config
from tpusim.errors import SimulationError
from tpusim.isa import assemble, make
from tpusim.models.common import QueueEntry
from tpusim.models.dma import plan_bursts
from tpusim.sim import run_program

CFG = load_config("small")


def _runs(base, inner, c1, s1, c2, s2):
    """Byte offsets (relative to base) of a count2 x count1 x inner_bytes pattern, in order."""
    return [base + o2 * s2 + o1 * s1 + i for o2 in range(c2) for o1 in range(c1) for i in range(inner)]


def test_round_trip_3d_strides_and_burst_split():
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, 1024, dtype=np.uint8).tobytes()
    # LOAD: 3 rows x 2 runs x 48 bytes; DDR strides 96 / 256 (multiples of 32), SRAM dense.
    # Run (0, 1) covers DDR 0x1060..0x108f and is split at the 64-byte boundary 0x1080.
    ld = dict(ddr_addr=0x1000, sram_addr=0x100, inner_bytes=48, count1=2, ddr_stride1=96,
              sram_stride1=48, count2=3, ddr_stride2=256, sram_stride2=96)
    # STORE: the 288 SRAM bytes back as 2 rows x 3 runs x 48 bytes, DDR strides 64 / 320
    st = dict(ddr_addr=0x8020, sram_addr=0x100, inner_bytes=48, count1=3, ddr_stride1=64,
              sram_stride1=48, count2=2, ddr_stride2=320, sram_stride2=144)
    prog = [make("DMA_LOAD", signal=0b10, **ld), make("DMA_STORE", wait=0b01, **st), make("HALT")]
    run, tpu = run_program(prog, CFG, [(0x1000, src)])

    moved = bytes(src[o - 0x1000] for o in _runs(0x1000, 48, 2, 96, 3, 256))
    assert tpu.sram.read_bytes(0x100, 288) == moved
    out = {a: tpu.ddr_mem.read(a, 1)[0] for a in _runs(0x8020, 48, 3, 64, 2, 320)}
    assert bytes(out[a] for a in sorted(out, key=_runs(0x8020, 48, 3, 64, 2, 320).index)) == moved
    assert tpu.ddr_mem.read(0x8000, 0x20) == bytes(0x20)          # untouched before the tensor
    assert run.counters["ddr_read_bytes"] == 288 and run.counters["ddr_write_bytes"] == 288

    entry = QueueEntry(0, 0, prog[0], 0)
    bursts = plan_bursts(entry, CFG)
    assert all(d // 64 == (d + n - 1) // 64 for d, _, n in bursts)   # never crosses BB
    assert sum(n for _, _, n in bursts) == 288
    # per row: run 0 at +0 (48 B, one burst); run 1 at +96 = 0x60 -> 32 B to 0x80, then 16 B
    assert bursts[:3] == [(0x1000, 0x100, 48), (0x1060, 0x130, 32), (0x1080, 0x150, 16)]
    assert len(bursts) == 9


def test_single_burst_timing_by_hand():
    """DMA_LOAD of one 64-byte burst, then HALT; every edge computed from the spec.

    Edges: core k at 1000k ps; DDR k at 100 + 1250k; DMA k at 50 + 2500k.
    cdc(t -> d) = 3rd edge of d strictly after t.
    fetch line 0 (instructions 0, 1): launched at core 0 (0 ps);
        visible to DDR at cdc(0) = DDR edges 100, 1350, 2600 -> 2600 (DDR 2); granted at DDR 2;
        B = 64/16 = 4 beats; done = 2 + L + B - 1 = 2 + 8 + 3 = DDR 13 = 16350 ps;
        valid to the decoder at cdc(16350 -> core) = 17000, 18000, 19000 -> core 19.
    fetch line 1: launched at core 19 (a buffer is free, line 0 just completed);
        visible at DDR 18 (18850 is DDR 15, then 20100, 21350, 22600); granted at DDR 18;
        done = 18 + 11 = DDR 29; the channel is free again at DDR 30 = 37600 ps.
    DMA_LOAD dispatched at core 19; visible to the DMA at cdc(19000) = DMA 8, 9, 10 -> s = DMA 10
        = 25050 ps; DDR read launched at 25050, visible at DDR 22 = 27600 (25100, 26350, 27600);
        channel busy with line 1 until DDR 30 -> granted g = DDR 30 (arbiter wait 30 - 22 = 8);
        done = 30 + 8 + 4 - 1 = DDR 41 = 51350 ps;
        d = cdc(51350 -> dma) = DMA 21, 22, 23 -> 57550 ps: SRAM write request;
        visible at core 58, 59, 60 -> v = core 60; granted w = 60 (banks free), D = 64/8 = 8;
        completion w + D = core 68; f = cdc(68000 -> dma) = DMA 28, 29, 30 -> c = DMA 30 = 75050.
    HALT dispatched at h0 = core 20; LOAD retire visible at cdc(75050 -> core) = core 78;
        h = max(h0 + 1, 78) = 78 cycles.
    """
    prog = assemble("DMA_LOAD ddr_addr=0x1000 sram_addr=0 inner_bytes=64 count1=1 count2=1\nHALT")
    run, tpu = run_program(prog, CFG, [(0x1000, bytes(range(64)))])
    assert run.retire == [(0, "LOAD", 75050), (32, "HALT", 78000)]
    assert run.cycles == 78
    c = run.counters
    assert c["load_busy_cycles"] == 30 - 10
    assert c["ddr_arb_wait_cycles"] == 8
    assert c["ddr_busy_cycles"] == 3 * (8 + 4)           # line 0, line 1, the burst
    assert c["fetch_bytes"] == 128 and c["ddr_read_bytes"] == 64
    assert tpu.sram.read_bytes(0, 64) == bytes(range(64))


@pytest.mark.parametrize("fields, bad, value", [
    (dict(inner_bytes=0), "inner_bytes", 0),
    (dict(count1=0), "count1", 0),
    (dict(sram_addr=4), "sram_addr", 4),
    (dict(ddr_addr=0x1010), "ddr_addr", 0x1010),
    (dict(ddr_stride1=40, count1=2), "ddr_stride1", 40),
    (dict(sram_addr=16384 - 32), "sram_addr", 16384 - 32),
    (dict(ddr_addr=(1 << 40) - 32), "ddr_addr", (1 << 40) - 32),
])
def test_dma_device_errors_name_pc_field_value(fields, bad, value):
    args = dict(ddr_addr=0x1000, sram_addr=0, inner_bytes=64, count1=1, count2=1)
    args.update(fields)
    prog = [make("NOP", engine=0), make("DMA_LOAD", **args), make("HALT")]
    with pytest.raises(SimulationError) as ei:
        run_program(prog, CFG)
    msg = str(ei.value)
    assert "instruction #1 at pc 0x20 (DMA_LOAD)" in msg
    assert f"{bad}={value:#x}" in msg


def test_store_timing_is_mirror_of_load():
    """STORE of one burst right after reset: SRAM read first, then the DDR write.

    Dispatched at core 19 -> s = DMA 10 (25050 ps); SRAM request visible at core 26, 27, 28
    (25050 < 26000) -> granted w = 28, D = 8 -> 36; d = cdc(36000 -> dma) = DMA 15, 16, 17
    = 42550; DDR write visible at cdc(42550 -> ddr) = DDR 34, 35, 36 (42600, 43850, 45100);
    line 1 was granted at DDR 18 and done at DDR 29, so the channel is free: g = DDR 36;
    done = 36 + 8 + 4 - 1 = DDR 47 = 58850; f = cdc(58850 -> dma) = DMA 24, 25, 26 (60050,
    62550, 65050) = 65050. Retire visible at core 66, 67, 68 -> 68 cycles.
    """
    prog = assemble("DMA_STORE ddr_addr=0x2000 sram_addr=0 inner_bytes=64 count1=1 count2=1\nHALT")
    run, tpu = run_program(prog, CFG)
    assert run.retire == [(0, "STORE", 65050), (32, "HALT", 68000)]
    assert run.counters["ddr_arb_wait_cycles"] == 0
