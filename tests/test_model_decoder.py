"""Decoder: HALT timing, reserved opcode, queue back-pressure, falling off the program.

Config 'small': 2 instructions per 64-byte fetch line; line 0 is valid at core 19 (fetch at 0,
DDR grant at edge 2, done at 2 + 8 + 4 - 1 = 13 = 16350 ps, cdc -> core 19).
"""
import pytest

from tpusim.arch.config import load_config
from tpusim.arch.errors import DeviceError, SimulationError
from tpusim.arch.isa import Engine, assemble, encode_program, make
from tpusim.sim import run_program

CFG = load_config("small")


def test_halt_alone():
    """HALT dispatched at h0 = 19 (nothing outstanding): halts at h0 + 1 = 20. Fetch also
    launched line 1 at core 19 (h0 itself: the stop is registered), which is counted."""
    run, _ = run_program([make("HALT")], CFG)
    assert run.cycles == 20
    assert run.retire == [(0, "HALT", 20000)]
    assert run.counters["fetch_bytes"] == 128
    assert sum(v for k, v in run.counters.items() if k.endswith("_retired")) == 0


def test_halt_waits_for_retire_visibility():
    """VPU LOAD_QREG dispatched 19, starts 20, completes 21; MXU NOP dispatched 20, starts 21,
    c = 22; HALT (line 1, valid 39) at 39 -> h = max(40, 22 + 1) = 40."""
    prog = assemble("LOAD_QREG qreg=3 multiplier=5 shift=0 zero_point=1\nNOP engine=2\nHALT")
    run, tpu = run_program(prog, CFG)
    assert run.retire == [(0, "VPU", 21000), (32, "MXU", 22000), (64, "HALT", 40000)]
    assert tpu.qregs.regs[3].multiplier == 5


def test_reserved_opcode_names_pc():
    code = encode_program([make("NOP", engine=2)]) + bytes([0xEE]) + bytes(31)
    with pytest.raises(SimulationError) as ei:
        run_program([], CFG, [(0, code)])
    msg = str(ei.value)
    assert "reserved opcode 0xee at instruction #1 (pc 0x20)" in msg
    assert "error_code 1" in msg
    # the device halted as for HALT: "dispatched" at 20, the MXU NOP (dispatched 19, runs
    # 20 -> 21) retires visibly at 22 -> h = max(20 + 1, 22) = 22
    run = ei.value.run
    assert run.error_pc == 0x20 and run.cycles == 22


def test_program_without_halt_stops_at_zero_word():
    with pytest.raises(SimulationError, match=r"reserved opcode 0x00 at instruction #2 \(pc 0x40\)"):
        run_program([make("NOP", engine=3), make("NOP", engine=3)], CFG)


def test_unused_bits_are_a_decoder_error():
    """A bit above HALT's (empty) field list: device error unused_bits at HALT's dispatch edge,
    the device halts as after HALT (same cycle count)."""
    raw = bytearray(encode_program([make("HALT")]))
    raw[20] = 0x81                          # bits 160 and 167
    with pytest.raises(DeviceError) as ei:
        run_program([], CFG, [(0, bytes(raw))])
    e = ei.value
    assert (e.code, e.code_num, e.pc, e.cycle, e.field, e.value) == ("unused_bits", 12, 0, 19, "bit", 160)
    assert e.run.cycles == 20 and e.run.error_code == 12 and e.run.error_pc == 0
    assert str(e) == ("HALT at instruction #0 (pc 0x0): bit=0xa0 (160) is set: HALT uses bits 0-15, bits 16 "
                      "and up must be zero: device halted with error_code 12 after 20 cycles")


def test_queue_backpressure():
    """MXU queue depth Q = 4. NOP1 waits for the LOAD token (visible at core 68, as in
    test_model_tokens), so NOP1..NOP4 fill the queue; NOP5 is dispatched only when NOP1's pop
    (MXU start at 68) becomes visible to the decoder at 69, hence visible to the MXU at 70.

    Fetch: line 1 valid 39 (NOP2 at 39, NOP3 at 40); line 2 launched at 39, visible at DDR 34;
    the DMA burst (granted 22, B = 4) left the bus at 26 -> granted 34, done 45 = 56350 ps,
    valid at core 59: NOP4 at 59, NOP5 at 69 (queue full until then). Line 3 launched at 59 ->
    visible DDR 50 (60100, 61350, 62600), done 61 = 76350, valid at 79: NOP6 at 79, HALT at 80.
    MXU: NOP1 68-69, NOP2 70-71, NOP3 72-73, NOP4 74-75, NOP5 76-77, NOP6 80-81; h = 82.
    mxu_queue_full_cycles: NOP5 ready at 60 (line 2 valid 59, NOP4 dispatched there), held until
    69: edges 60..68 = 9; NOP6 needs NOP2's pop (seen at 71), line 3 is valid only at 79: none.
    """
    prog = assemble("""
        DMA_LOAD ddr_addr=0x1000 sram_addr=0 inner_bytes=64 count1=1 count2=1 signal=MXU
        NOP engine=2 wait=LOAD
    """ + "NOP engine=2\n" * 5 + "HALT")
    run, tpu = run_program(prog, CFG)
    mxu = tpu.queues[Engine.MXU].entries.items
    assert [e.visible_ps // 1000 for e in mxu] == [21, 40, 41, 60, 70, 80]
    assert [t // 1000 for pc, eng, t in run.retire if eng == "MXU"] == [69, 71, 73, 75, 77, 81]
    assert run.cycles == 82
    assert {k: v for k, v in run.counters.items() if k.endswith("_queue_full_cycles")} == {
        "load_queue_full_cycles": 0, "store_queue_full_cycles": 0, "mxu_queue_full_cycles": 9,
        "vpu_queue_full_cycles": 0}
