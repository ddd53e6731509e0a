"""Energy per event and area per block: the cost tables of a hardware config (YAML sections
``energy`` and ``area``, each key optional; absent keys take the defaults below).

Defaults are 45 nm figures from M. Horowitz, "Computing's energy problem (and what we can do about
it)", ISSCC 2014 (energy and area of 8/32-bit integer arithmetic, SRAM and DRAM access), with the
SRAM cell area of Intel's 45 nm process (0.346 um^2, K. Mistry et al., IEDM 2007):

* ``mac_pj`` 0.3: an int8 multiply (0.2 pJ) and an int32 add (0.1 pJ), one PE per cycle.
* ``sram_pj_per_byte``: a 64-bit read costs 10 / 20 / 100 pJ from an 8 KB / 32 KB / 1 MB array;
  the default interpolates log-linearly in the config's *bank* size (``sram_default_pj_per_byte``;
  below 8 KB the 8 KB figure): 16 KiB banks (seed) 1.875 pJ/B, 2 KiB banks (small) 1.25 pJ/B.
  Reads and writes cost the same.
* ``acc_pj_per_access`` 5.1: one int32 accumulator element read or written (4 bytes from an
  8 KB-class array, 1.25 pJ/B) plus its 32-bit add.
* ``ddr_pj_per_byte`` 162.5: a 64-bit DRAM access 1.3 nJ (the low end of Horowitz's 1.3-2.6 nJ).
* ``fetch_pj_per_instruction`` 40: the 32-byte instruction read from the fetch line buffer; the
  fetch energy of a run is that per instruction plus its instruction bytes read from DDR at
  ``ddr_pj_per_byte`` (kept apart from the layers' DDR energy).
* ``pe_um2`` 660: an int8 multiplier (282 um^2), a 32-bit adder (137 um^2) and the PE's 48 bits of
  registers (about 5 um^2 per flop).
* ``sram_um2_per_kib`` 5700: 8192 cells of 0.346 um^2 at 50 % array efficiency; the accumulator
  counts as SRAM of its int32 bytes.
* ``dma_channel_um2`` 20000: a DMA channel's address generators and burst buffers (an estimate,
  not from the sources above); two channels.

Dynamic energy only (no leakage, no clock tree). These tables do not change what the chip
computes, so they are not part of the config hash that binaries carry.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["EnergyTable", "AreaTable", "sram_default_pj_per_byte", "HOROWITZ_SRAM_PJ_PER_64BIT"]

#: (array bytes, pJ per 64-bit read) from Horowitz, ISSCC 2014 (45 nm)
HOROWITZ_SRAM_PJ_PER_64BIT = ((8 * 1024, 10.0), (32 * 1024, 20.0), (1024 * 1024, 100.0))


def sram_default_pj_per_byte(array_bytes: int) -> float:
    """pJ per byte of an SRAM array of ``array_bytes``: Horowitz's three points interpolated (and
    extrapolated) linearly in log2(size), per 8 bytes."""
    pts = [(math.log2(b), pj) for b, pj in HOROWITZ_SRAM_PJ_PER_64BIT]
    x = math.log2(max(array_bytes, 1))
    if x <= pts[0][0]:
        return pts[0][1] / 8.0          # no smaller array in the table: its 8 KB figure
    (x0, y0), (x1, y1) = (pts[0], pts[1]) if x <= pts[1][0] else (pts[1], pts[2])
    return (y0 + (y1 - y0) * (x - x0) / (x1 - x0)) / 8.0


@dataclass(frozen=True)
class EnergyTable:
    """pJ per event (module docstring); ``sram_pj_per_byte`` None: the bank-size default."""
    mac_pj: float = 0.3
    sram_pj_per_byte: float | None = None
    acc_pj_per_access: float = 5.1
    ddr_pj_per_byte: float = 162.5
    fetch_pj_per_instruction: float = 40.0


@dataclass(frozen=True)
class AreaTable:
    """um^2 per block (module docstring)."""
    pe_um2: float = 660.0
    sram_um2_per_kib: float = 5700.0
    dma_channel_um2: float = 20000.0


def table_from_dict(cls, data: dict | None, where: str, error):
    """``cls`` (EnergyTable / AreaTable) from a YAML mapping of some of its keys; ``error(msg)``
    builds the exception for an unknown key or a value that is not a positive number."""
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise error(f"{where}: expected a mapping, got {type(data).__name__} {data!r}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise error(f"{where}: unknown key(s) {unknown}; expected some of {sorted(known)}")
    out = {}
    for k, v in data.items():
        if v is None and k == "sram_pj_per_byte":
            out[k] = None                      # explicitly the bank-size default
            continue
        if isinstance(v, str):                 # YAML 1.1 reads 1e9 (no dot, no sign) as a string
            try:
                v = float(v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise error(f"{where}.{k}: expected a positive number, got {v!r}")
        out[k] = float(v)
    return cls(**out)
