"""Run a .tpubin on the cycle-accurate SimPy model: ``run_binary``.

DDR image: ``binary.ddr_segments(inputs)`` (fills, constants, code, then each input tensor in
its padded blocked layout, ``TensorDesc.to_blocked(x, fill=zero_point)``); outputs are read back
with ``TensorDesc.from_blocked`` after the device halts.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from tpusim.arch.binary import TpuBinary, input_blobs
from tpusim.arch.ddr_memory import DdrMemory
from tpusim.arch.errors import SimulationError
from tpusim.arch.isa import encode_program
from tpusim.models.tpu import Tpu
from tpusim.models.trace import Trace


@dataclass
class SimResult:
    """``outputs``: name -> int8 NCHW array; ``cycles``: core cycles to HALT retire;
    ``retire``: [(pc_byte_offset, engine name, retire time ps)] in retire order;
    ``counters``: perf counters in tpusim.arch.perf.COUNTERS order; ``wall_s``: host seconds;
    ``cycles_per_s``: simulated core cycles per host second; ``events``: SimPy events;
    ``timeline``: per instruction (engine index, pc byte offset, ready ps (idle with the queue
    head visible), start ps (its tokens arrived), completion ps), in retire order per engine
    (tpusim.flow.profile reads it)."""
    outputs: dict
    cycles: int
    retire: list
    counters: dict
    wall_s: float
    cycles_per_s: float
    events: int = 0
    halt_ps: int = 0
    meta: dict = field(default_factory=dict)
    ddr: DdrMemory | None = None      # final DDR image (run_binary(..., keep_ddr=True))
    timeline: list = field(default_factory=list)   # [(engine, pc, ready_ps, start_ps, complete_ps)]
    sram_grants: list = field(default_factory=list)  # [(requester = engine, grant ps, SRAM word accesses)]

    def read_ddr(self, addr: int, n: int) -> bytes:
        """``n`` bytes of the final DDR image at ``addr`` (needs keep_ddr=True)."""
        if self.ddr is None:
            raise SimulationError("the DDR image was not kept: call run_binary(..., keep_ddr=True)")
        return self.ddr.read(addr, n)

    def summary(self) -> dict:
        """JSON-able summary (no arrays)."""
        return {"cycles": self.cycles, "halt_ps": self.halt_ps, "counters": self.counters,
                "wall_s": self.wall_s, "cycles_per_s": self.cycles_per_s, "events": self.events,
                "retired": len(self.retire),
                "outputs": {k: list(v.shape) for k, v in self.outputs.items()}}


def load_ddr(binary: TpuBinary, inputs: dict) -> DdrMemory:
    """A DdrMemory holding the binary's segments and the given inputs."""
    ddr = DdrMemory()
    for addr, data in binary.ddr_segments(input_blobs(binary, inputs)):
        ddr.write(addr, data)
    return ddr


def run_binary(binary: TpuBinary, cfg, inputs: dict, vcd: str | Path | None = None,
               keep_ddr: bool = False, progress=None, dma_trains: bool = True) -> SimResult:
    """Simulate ``binary`` on config ``cfg`` with ``inputs`` (name -> int8 NCHW ndarray).

    ``vcd``: write the architectural signals there; ``keep_ddr``: keep the final DDR image in
    the result (``SimResult.read_ddr``); ``progress``: callable(retired instructions, now_ps)
    called twice a second (wall time) during the run; ``dma_trains=False``: every DMA grant on the
    arbiters' own decisions (no burst trains, tpusim/models/dma_train.py; the same results, slower).

    Raises SimulationError on a device error (naming the instruction, field and value), on a
    deadlock (naming the waiting engines and their PCs) and on a reserved opcode.
    """
    ddr = load_ddr(binary, inputs)
    trace = Trace() if vcd is not None else None
    tpu = Tpu(cfg, ddr, binary.code_addr, trace, dma_trains=dma_trains)
    t0 = time.perf_counter()
    try:
        run = tpu.run(progress)
    finally:
        if trace is not None:
            trace.write(vcd)
    wall = time.perf_counter() - t0
    outputs = {d.name: d.from_blocked(ddr.read(d.ddr_addr, d.size_bytes)) for d in binary.outputs}
    return SimResult(outputs, run.cycles, run.retire, run.counters, wall,
                     run.cycles / wall if wall > 0 else float("inf"), run.events, run.halt_ps,
                     ddr=ddr if keep_ddr else None, timeline=run.timeline,
                     sram_grants=run.sram_grants)


def run_program(prog, cfg, ddr_segments=(), code_addr: int = 0, vcd=None, sram_segments=(),
                dma_trains: bool = True):
    """Run hand-assembled instructions (tests, benchmarks): returns (TpuRun, Tpu).

    ``ddr_segments``/``sram_segments``: [(byte_addr, bytes)] preloaded before the run (SRAM
    preloading is a test convenience; real programs fill the SRAM by DMA); ``dma_trains`` as in
    run_binary."""
    ddr = DdrMemory()
    for addr, data in ddr_segments:
        ddr.write(addr, data)
    ddr.write(code_addr, encode_program(prog))
    trace = Trace() if vcd is not None else None
    tpu = Tpu(cfg, ddr, code_addr, trace, dma_trains=dma_trains)
    for addr, data in sram_segments:
        tpu.sram.write_bytes(addr, bytes(data))
    try:
        run = tpu.run()
    finally:
        if trace is not None:
            trace.write(vcd)
    return run, tpu


__all__ = ["SimResult", "run_binary", "run_program", "load_ddr"]
