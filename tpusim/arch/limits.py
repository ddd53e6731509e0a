"""Architectural limits: the numbers that bound every address, field and counter of the chip.

The one source of these constants: the ISA (``tpusim.arch.isa`` re-exports them), the config
check, the compiler's memory plan, the SimPy model, stressgen and the generated SystemVerilog
package (``tpu_isa_pkg``: ``DDR_ADDR_BITS``, ``TOKEN_MAX``, ``MXU_MAX_INFLIGHT``,
``DMA_MAX_INFLIGHT``) all read them from here.
"""
from __future__ import annotations

#: Width of a DDR byte address (instruction fields, DMA address generators, the DDR model).
DDR_ADDR_BITS = 40
#: First byte address past the DDR address space (2^40).
DDR_ADDR_LIMIT = 1 << DDR_ADDR_BITS
#: Bits of one token counter (per sender -> receiver pair).
TOKEN_COUNTER_BITS = 8
#: Most tokens a sender may have sent to one receiver and not yet seen consumed (2^8 - 1);
#: one more is a ``token_overflow`` device error.
TOKEN_MAX = (1 << TOKEN_COUNTER_BITS) - 1
#: Most MXU instructions in flight (started, not completed) with double-buffered weights
#: (docs/architecture.md, "MXU"): the SimPy MXU, tpu_engine_ctrl (MaxInflight) and tpu_mxu's
#: in-flight FIFO are sized by it.
MXU_MAX_INFLIGHT = 4
#: Most DMA instructions in flight per channel (docs/architecture.md, "DMA"): a channel starts its
#: next instruction once the previous one has launched all its bursts' first requests, the two
#: sharing the K burst buffers as one ring. The SimPy channels, tpu_engine_ctrl (MaxInflight of
#: LOAD and STORE) and tpu_dma_channel's record of in-flight instructions are sized by it.
DMA_MAX_INFLIGHT = 2

__all__ = ["DDR_ADDR_BITS", "DDR_ADDR_LIMIT", "TOKEN_COUNTER_BITS", "TOKEN_MAX", "MXU_MAX_INFLIGHT",
           "DMA_MAX_INFLIGHT"]
