"""Dependency tokens: a consumer starts only once the producer's token is visible; deadlock.

Config 'small': core edge k at 1000k ps, DMA edge k at 50 + 2500k ps; cdc = 3rd edge after.
"""
import pytest

from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError
from tpusim.arch.isa import assemble
from tpusim.sim import run_program

CFG = load_config("small")


def test_consumer_waits_for_producer_token():
    """DMA_LOAD (one burst) signals MXU; the MXU NOP waits for it.

    The LOAD completes at DMA 26 = 65050 ps (same edges as tests/test_model_dma.py's single
    burst); its token is visible to the MXU at cdc(65050 -> core) = core 68. The NOP was
    dispatched at core 20, visible at 21 (r = 21), so it starts at s = 68 (token wait 47) and
    completes at 69. HALT (line 1, valid at core 39) waits for MXU retire visible at 70.
    """
    prog = assemble("""
        DMA_LOAD ddr_addr=0x1000 sram_addr=0 inner_bytes=64 count1=1 count2=1 signal=MXU
        NOP engine=2 wait=LOAD
        HALT
    """)
    run, _ = run_program(prog, CFG)
    assert run.retire == [(0, "LOAD", 65050), (32, "MXU", 69000), (64, "HALT", 70000)]
    assert run.counters["mxu_token_wait_cycles"] == 68 - 21
    assert run.counters["mxu_busy_cycles"] == 1


def test_token_from_core_to_dma_domain():
    """MXU NOP (dispatched 19, visible 20, c = 21) signals LOAD; the LOAD NOP (dispatched 20,
    visible at cdc(20000 -> dma) = DMA 10 = 25050) sees the token at cdc(21000 -> dma) =
    22550, 25050, 27550 -> DMA 11: starts there (1 DMA cycle of token wait), completes DMA 12."""
    prog = assemble("NOP engine=2 signal=LOAD\nNOP engine=0 wait=MXU\nHALT")
    run, _ = run_program(prog, CFG)
    assert (32, "LOAD", 30050) in run.retire
    assert run.counters["load_token_wait_cycles"] == 1


def test_token_deadlock_names_engines_and_pcs():
    prog = assemble("NOP engine=0 wait=MXU\nNOP engine=2 wait=LOAD\nHALT")
    with pytest.raises(SimulationError) as ei:
        run_program(prog, CFG)
    msg = str(ei.value)
    assert msg.startswith("deadlock")
    assert "LOAD at instruction #0 at pc 0x0 (NOP) waits for a token from MXU" in msg
    assert "MXU at instruction #1 at pc 0x20 (NOP) waits for a token from LOAD" in msg
    assert "decoder at instruction #2 (pc 0x40) waits for HALT: LOAD (1 not retired), " \
           "MXU (1 not retired) to retire" in msg


def test_token_counter_overflow_is_an_error():
    prog = assemble("NOP engine=3 signal=MXU\n" * 256 + "HALT")
    with pytest.raises(SimulationError, match=r"pc 0x1fe0 \(NOP\): signal=0x4 \(4\) overflows token counter VPU->MXU \(255 tokens"):
        run_program(prog, CFG)
