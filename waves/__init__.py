"""Waveform tools: read VCD/FST dumps (pywellen), diff two dumps, triage model vs RTL in GTKWave.

* ``python -m waves diff A.vcd B.vcd [--map FILE] [--core-period-ps N] [--gtkw OUT]``: first
  divergence (ps, core cycle, signal, both values, instruction in flight on each side), count of
  differing signals. Exit 0 identical, 1 different, 2 user error.
* ``python -m waves triage MODEL.vcd RTL.vcd --map waves/arch_map.yaml --out DIR`` (also
  ``waves.triage.triage``): merged VCD (``model.*`` / ``rtl.*``), GTKWave save file, report.
* Architectural signals: the SimPy model dumps them (``run_binary(..., vcd=...)``,
  tpusim/models/trace.py), the RTL testbench probe too (``run_rtl(..., waves="arch")``,
  cocotb_tests/tb/tb_arch_probe.sv); ``waves/arch_map.yaml`` (``python -m waves.archmap``) maps
  model names to RTL names. Both in ps from core edge 0: identical for a valid program.
* Scoped / windowed RTL dumps: ``run_rtl(..., waves="vcd", dump_scopes=[...],
  dump_window_ps=(t0, t1))`` (cocotb_tests/rtl_dump.py); model: ``Trace.write(path, scopes, window_ps)``.
* A VCD cut short by a killed run reads as its complete prefix (``Dump.truncated``).
"""
from waves.reader import Dump, SignalInfo, WaveError, read_dump

__all__ = ["Dump", "SignalInfo", "WaveError", "read_dump"]
