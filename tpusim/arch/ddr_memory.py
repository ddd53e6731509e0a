"""Sparse DDR memory: 40-bit byte addresses (``DDR_ADDR_LIMIT`` = 2^40 bytes), 4 KiB pages
allocated on first write (reads of never-written bytes return 0). The DDR contents of the SimPy
model (its timing lives in tpusim/models/ddr_arbiter.py) and of the ISA executor
(``tpusim.arch.executor``)."""
from __future__ import annotations

from tpusim.arch.errors import SimulationError
from tpusim.arch.limits import DDR_ADDR_LIMIT

PAGE_BYTES = 4096


class DdrMemory:
    """Byte-addressed sparse memory; ``pages`` maps page number -> bytearray(PAGE_BYTES)."""

    def __init__(self) -> None:
        self.pages: dict[int, bytearray] = {}

    @staticmethod
    def _check(addr: int, n: int) -> None:
        if addr < 0 or n < 0 or addr + n > DDR_ADDR_LIMIT:
            raise SimulationError(f"DDR access at {addr:#x} of {n} bytes is outside the 40-bit "
                                  f"address space [0, {DDR_ADDR_LIMIT:#x})")

    def write(self, addr: int, data) -> None:
        """Write bytes-like ``data`` at byte address ``addr``; SimulationError if any byte lies
        outside [0, 2^40)."""
        data = memoryview(bytes(data)) if not isinstance(data, (bytes, bytearray)) else memoryview(data)
        n = len(data)
        self._check(addr, n)
        pos = 0
        while pos < n:
            page, off = divmod(addr + pos, PAGE_BYTES)
            take = min(PAGE_BYTES - off, n - pos)
            buf = self.pages.get(page)
            if buf is None:
                buf = self.pages[page] = bytearray(PAGE_BYTES)
            buf[off:off + take] = data[pos:pos + take]
            pos += take

    def read(self, addr: int, n: int) -> bytes:
        """``n`` bytes from byte address ``addr`` (zeros where never written); SimulationError if
        any byte lies outside [0, 2^40)."""
        self._check(addr, n)
        page, off = divmod(addr, PAGE_BYTES)
        if off + n <= PAGE_BYTES:            # fast path: one page (every DMA burst)
            buf = self.pages.get(page)
            return bytes(n) if buf is None else bytes(buf[off:off + n])
        out = bytearray()
        pos = 0
        while pos < n:
            page, off = divmod(addr + pos, PAGE_BYTES)
            take = min(PAGE_BYTES - off, n - pos)
            buf = self.pages.get(page)
            out += bytes(take) if buf is None else buf[off:off + take]
            pos += take
        return bytes(out)


__all__ = ["DdrMemory", "PAGE_BYTES"]
