"""Read waveform dumps (VCD, also FST/GHW) with pywellen.

``read_dump(path)`` -> ``Dump``: ``dump.names()`` lists every variable by hierarchical name
(``top.sub.sig``, scopes joined by dots as pywellen names them; Verilator 5.048 dumps have top
scopes ``$rootio`` and the top module, no ``TOP.`` prefix); ``dump.changes(name)`` gives the
list of ``(time_ps, value)`` changes, times converted from the dump's timescale to picoseconds.

A VCD cut short by a killed run is read up to its last complete time step (``Dump.truncated``);
a dump whose header is incomplete, or that is not a waveform, raises WaveError.

Values: ``int`` for fully known values, ``str`` (e.g. ``"xxxxxxxx"``, ``"1z0"``) when any bit is
x/z, ``float`` for reals, ``str`` for string variables. Consecutive repeats of the same value are
dropped, so two dumps that say the same thing give the same change lists.
"""
from __future__ import annotations

import os
import re
import tempfile
import weakref
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pywellen

from tpusim.arch.errors import TpuError, WaveError  # noqa: F401 (WaveError: raised here, public name)

# pywellen TimescaleUnit -> picoseconds per unit
_UNIT_PS = {"fs": Fraction(1, 1000), "ps": Fraction(1), "ns": Fraction(1000),
            "us": Fraction(10**6), "ms": Fraction(10**9), "s": Fraction(10**12)}


@dataclass(frozen=True)
class SignalInfo:
    name: str          # hierarchical name, scopes joined by '.'
    width: int         # bits
    var_type: str      # pywellen's var type ("Wire", "Reg", "Integer", ...)


def _norm(value):
    if isinstance(value, str):
        return value.lower()
    return value


class Dump:
    """One waveform file, loaded with pywellen. Signal bodies are loaded lazily, on ``changes``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise WaveError(f"{self.path}: no such file")
        if not self.path.is_file():
            raise WaveError(f"{self.path}: not a file")
        self.truncated = False                 # True: only the complete prefix was read
        self._tmp = None
        self._end_ticks: int | None = None     # set for a truncated dump: its last complete step
        self._wave = self._load()
        ts = self._wave.timescale
        if ts is None:
            self.ps_per_tick = Fraction(1)     # VCD without $timescale: treat ticks as ps
        else:
            unit = str(ts.unit).rsplit(".", 1)[-1]
            if unit not in _UNIT_PS:
                raise WaveError(f"{self.path}: unsupported timescale unit {unit!r}")
            self.ps_per_tick = ts.factor * _UNIT_PS[unit]
        # whole ps per tick (the usual case): integer arithmetic, no Fraction per change
        self._ps_int = int(self.ps_per_tick) if Fraction(self.ps_per_tick).denominator == 1 else None
        self._vars = {}
        for var in self._wave.all_vars():
            # pywellen splits Verilator's unpacked-array elements ("tb_last_pc_o[4]") into a
            # scope plus a var "[4]": join them back into the name GTKWave and the VCD use
            self._vars.setdefault(var.full_name.replace(".[", "["), var)
        self._cache: dict[str, list] = {}

    def _load(self):
        """pywellen's Waveform of the file. A VCD cut short inside a line (a killed run) is read
        up to its last complete time step instead; a VCD cut inside its header, or corrupt,
        raises WaveError."""
        if not _is_cut(self.path):
            try:
                return _waveform(self.path)
            except WaveError as exc:
                if _is_vcd(self.path):
                    _complete_prefix(self.path, check_only=True)     # names a truncated header
                raise WaveError(f"{self.path}: not a readable VCD/FST dump ({exc})") from None
        self._tmp = _complete_prefix(self.path)
        self._end_ticks = _last_time_step(Path(self._tmp.name))
        try:
            wave = _waveform(Path(self._tmp.name))
        except WaveError as exc:
            raise WaveError(f"{self.path}: truncated and not readable ({exc})") from None
        self.truncated = True
        return wave

    def names(self) -> list[str]:
        return list(self._vars)

    def __contains__(self, name: str) -> bool:
        return name in self._vars

    def info(self, name: str) -> SignalInfo:
        var = self._var(name)
        return SignalInfo(name, var.bitwidth or 1, str(var.var_type))

    def _var(self, name: str):
        try:
            return self._vars[name]
        except KeyError:
            raise WaveError(f"{self.path}: no signal {name!r}") from None

    def to_ps(self, ticks: int) -> int | Fraction:
        if self._ps_int is not None:
            return ticks * self._ps_int
        t = ticks * self.ps_per_tick
        return int(t) if t.denominator == 1 else t

    def to_ticks(self, time_ps) -> int:
        """Picoseconds -> the dump's own time units (rounded down), e.g. for GTKWave markers."""
        return int(Fraction(time_ps) / self.ps_per_tick)

    @property
    def end_ps(self) -> int | Fraction | None:
        """Time of the dump's last time step (ps): for a truncated dump, its last complete step
        (the read prefix ends there); for a whole VCD, its final ``#t``; None if unknown (FST,
        or a VCD without time steps)."""
        if self._end_ticks is None and not self.truncated and _is_vcd(self.path):
            self._end_ticks = _last_time_step(self.path)
        return None if self._end_ticks is None else self.to_ps(self._end_ticks)

    def changes(self, name: str) -> list[tuple[int, object]]:
        """``[(time_ps, value), ...]`` in time order, consecutive repeats removed."""
        if name not in self._cache:
            out: list[tuple[int, object]] = []
            var = self._var(name)
            try:
                body = list(var.signal)           # pywellen parses the VCD body here, lazily
            except BaseException as exc:
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                msg = " ".join(str(exc).split()) or type(exc).__name__
                raise WaveError(f"{self.path}: broken dump body ({msg})") from None
            for ticks, value in body:
                value = _norm(value)
                t = self.to_ps(ticks)
                if out and out[-1][0] == t:
                    out[-1] = (t, value)               # last value at a time wins
                    if len(out) > 1 and out[-2][1] == value:
                        out.pop()
                elif not out or out[-1][1] != value:
                    out.append((t, value))
            self._cache[name] = out
        return self._cache[name]

    def signals(self) -> dict[str, list[tuple[int, object]]]:
        """Every signal's changes (loads all bodies: fine for small dumps)."""
        return {n: self.changes(n) for n in self._vars}


def _waveform(path: Path):
    try:
        return pywellen.Waveform(str(path))
    except BaseException as exc:          # pywellen raises RuntimeError or a pyo3 PanicException
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise WaveError(" ".join(str(exc).split()) or type(exc).__name__) from None


def _is_vcd(path: Path) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip()
    return head.startswith(b"$")


def _is_cut(path: Path) -> bool:
    """A VCD whose last line is incomplete (no final newline)."""
    size = path.stat().st_size
    if size == 0 or not _is_vcd(path):
        return False
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        return fh.read(1) != b"\n"


def _complete_prefix(path: Path, check_only: bool = False):
    """A temporary copy of the VCD up to (not including) its last time step, which a cut may
    have left incomplete. WaveError if the header itself is incomplete."""
    data = path.read_bytes()
    end_hdr = data.find(b"$enddefinitions")
    if end_hdr < 0 or data.find(b"$end", end_hdr + 15) < 0:
        raise WaveError(f"{path}: truncated VCD: the header ends before $enddefinitions "
                        f"({len(data)} bytes)")
    if check_only:
        return None
    body = data.find(b"\n", data.find(b"$end", end_hdr + 15)) + 1
    last = data.rfind(b"\n#", body - 1)
    keep = data[:last + 1] if last >= body - 1 else data[:body]
    tmp = tempfile.NamedTemporaryFile(prefix="waves-prefix-", suffix=".vcd", delete=False)
    tmp.write(keep)
    tmp.close()
    weakref.finalize(tmp, _unlink_quietly, tmp.name)
    return tmp


def _last_time_step(path: Path, tail_bytes: int = 1 << 16) -> int | None:
    """The last ``#<ticks>`` line of a VCD (read from its tail), or None."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        while True:
            start = max(0, size - tail_bytes)
            fh.seek(start)
            data = b"\n" + fh.read() if start == 0 else fh.read()
            found = re.findall(rb"\n#(\d+)[ \t\r]*(?=\n|$)", data)
            if found:
                return int(found[-1])
            if start == 0:
                return None
            tail_bytes *= 4


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def read_dump(path: str | Path) -> Dump:
    return Dump(path)


__all__ = ["Dump", "SignalInfo", "WaveError", "read_dump"]
