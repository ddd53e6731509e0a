"""tpucompile.selfcheck.run_on_executor: a compiled-style binary run on the ISA executor in
several interleavings: outputs as int8 NCHW, a race between interleavings is a CompileError
naming the output and the seeds, a missing token a DeadlockError."""
from __future__ import annotations

import numpy as np
import pytest

from tpucompile.selfcheck import run_on_executor
from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError, DeadlockError
from tpusim.arch.isa import encode_program, make

CFG = load_config("small")
LOAD, STORE = 1, 2
X = TensorDesc("x", (1, 8, 2, 2), 1.0, 0, 0x20000, 8)
Y = TensorDesc("y", (1, 8, 2, 2), 1.0, 0, 0x30000, 8)


def _binary(load_signal: int, store_wait: int) -> TpuBinary:
    dma = dict(inner_bytes=32, count1=1, count2=1)
    code = encode_program([make("DMA_LOAD", ddr_addr=X.ddr_addr, sram_addr=0, signal=load_signal, **dma),
                           make("DMA_STORE", ddr_addr=Y.ddr_addr, sram_addr=0, wait=store_wait, **dma),
                           make("HALT")])
    return TpuBinary(CFG.hash_bytes(), 0x1000, code, inputs=[X], outputs=[Y])


def _inputs():
    x = np.arange(32, dtype=np.int8).reshape(X.shape)
    return x, {"x": X.to_blocked(x, 0)}


def test_copy_with_token_gives_the_input_in_every_interleaving():
    x, blocked = _inputs()
    out = run_on_executor(_binary(STORE, LOAD), CFG, blocked, sched_seeds=(None, 0, 1, 2, 3))
    assert out.keys() == {"y"} and out["y"].dtype == np.int8 and (out["y"] == x).all()


def test_missing_token_is_a_race_between_interleavings():
    """Round robin runs the LOAD first; some seed runs the STORE first and stores zeros."""
    _, blocked = _inputs()
    racy = _binary(0, 0)
    seeds = (None,) + tuple(range(8))
    with pytest.raises(CompileError, match=r"output 'y' differs between scheduler seeds None and \d: "
                                           r"the program races \(a token is missing\)"):
        run_on_executor(racy, CFG, blocked, sched_seeds=seeds)
    with pytest.raises(CompileError, match="at least one scheduler seed"):
        run_on_executor(racy, CFG, blocked, sched_seeds=())


def test_unsent_token_is_a_deadlock():
    _, blocked = _inputs()
    with pytest.raises(DeadlockError, match="STORE waits forever for a token from LOAD"):
        run_on_executor(_binary(0, LOAD), CFG, blocked)
