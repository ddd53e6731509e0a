"""Device errors: which error the decoder registers first, and when dispatch stops.

Rules (docs/architecture.md, "Device errors"):
  * an engine detects an error at an edge ``t`` of its own domain (start edge ``s`` of the
    erroneous instruction; token_overflow: the sender's completion edge ``c``); the decoder
    registers it at ``e = cdc(t -> core)`` (MXU/VPU: ``t + 1``). The decoder itself detects a
    reserved opcode at its dispatch edge ``h0`` and registers it there (``e = h0``);
  * the first error is kept: smallest ``e``; at the same ``e`` the smallest PC (program order);
  * at ``e`` nothing is dispatched and dispatch and fetch stop as for a HALT dispatched at ``e``
    (fetch launches after ``e`` are suppressed); the device then halts at the first core edge
    ``h >= e + 1`` at which every dispatched instruction's retire is visible;
  * the erroneous engine instruction itself does no work: it completes at ``s + 1`` like a NOP
    (engine.py); an overflowing token is not sent (tokens.py).
Errors are reported before the edge at which they register, so the decoder acting at edge ``d``
knows every error with ``e <= d`` whatever the order of SimPy processes at ``d``.
"""
from __future__ import annotations

import simpy

from tpusim.arch.errors import DeviceError
from tpusim.arch.isa import DEVICE_ERRORS
from tpusim.models.common import Clocks


class ErrorUnit:
    """The decoder's error register. ``first``: the registered DeviceError (None: no error);
    ``stop_ps``: its registration edge ``e``; ``wake``: an event that fires at ``e`` (the decoder
    waits on it together with whatever it waits for)."""

    def __init__(self, env: simpy.Environment, clocks: Clocks, fetch, decoder=None) -> None:
        self.env, self.clocks = env, clocks
        self.fetch = fetch
        self.decoder = decoder
        self.first: DeviceError | None = None
        self.stop_ps: int | None = None
        self._key: tuple | None = None
        self.wake = env.event()

    def report(self, err: DeviceError, t_ps: int, dom) -> None:
        """An engine detected ``err`` at its edge ``t_ps`` (domain ``dom``; ``t_ps`` = now)."""
        self._register(err, t_ps, self.clocks.cdc(t_ps, dom, self.clocks.core))

    def report_decoder(self, err: DeviceError, h0_ps: int) -> None:
        """The decoder detected ``err`` (reserved opcode) at its dispatch edge ``h0_ps``."""
        self._register(err, h0_ps, h0_ps)

    def stopped_at(self, e_ps: int) -> bool:
        """True if an error registers at or before core edge ``e_ps`` (no dispatch at ``e_ps``)."""
        return self.stop_ps is not None and self.stop_ps <= e_ps

    def _register(self, err: DeviceError, t_ps: int, e_ps: int) -> None:
        core = self.clocks.core
        err.detect_ps = t_ps
        err.cycle = core.cycle_of(e_ps)
        key = (e_ps, err.pc, DEVICE_ERRORS[err.code])
        if self._key is not None and key >= self._key:
            return
        self.first, self._key, self.stop_ps = err, key, e_ps
        self.fetch.stop(e_ps)
        if e_ps > self.env.now:
            self.env.timeout(e_ps - self.env.now).callbacks.append(self._fire)
        if self.decoder is not None:
            self.decoder.poke()

    def _fire(self, _ev) -> None:
        if not self.wake.triggered:
            self.wake.succeed()


__all__ = ["ErrorUnit"]
