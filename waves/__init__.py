"""Waveform tools: read VCD/FST dumps (pywellen), diff two dumps, write GTKWave triage views.

``python -m waves diff A.vcd B.vcd [--map FILE] [--core-period-ps N] [--gtkw OUT]``.
"""
from waves.reader import Dump, SignalInfo, WaveError, read_dump

__all__ = ["Dump", "SignalInfo", "WaveError", "read_dump"]
