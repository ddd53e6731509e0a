"""GTKWave save files for triage: diverging signals grouped at the top, marker at the divergence.

Multi-bit signals get their ``[msb:lsb]`` suffix (``[width-1:0]``), without which GTKWave
silently shows nothing for them.

Sized for GTKWave's default window (3.3.118 under Xvfb: about 960 pixels wide, checked by
``make triage-check``): the signal-search tree is collapsed (``[sst_expanded] 0``), the Signals
pane is wide enough for the longest name and its value (``[signals_width]``), and every trace
has an alias with its whole hierarchy in ``/`` form (``model/vpu/retire_digest``,
``rtl/u_arch_probe/vpu_retire_digest``; a scope every signal of one side shares, ``tpu`` or
``tb_top``, is left out): GTKWave shows only the last component of a dotted name, so several
signals would read ``retire_digest[31:0]`` or ``busy``.

The view opens on the marker: ``[timestart]`` a quarter window before it and a zoom showing about
``window_ps`` in the wave pane left beside the Signals pane (``wave_pane_px``). GTKWave's zoom z
means 2**-z time units per 200-pixel frame (calczoom), so a pane of P pixels spans
2**-z * P / 200 time units; GTKWave ignores a ``[timestart]`` later than (end of dump - visible
span), so it is clamped to that. A larger window shows more after the marker, never less.
``[dumpfile]`` is written relative to the save file's folder, with ``[savefile]`` absolute:
GTKWave's find_dumpfile() resolves the dump file against the folder the save file is opened
from, so a bundle folder can be moved (run from that folder, the plain relative path works too).
"""
from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Iterable

from vcd.gtkw import GTKWSave

from tpusim.arch.fileio import write_text_atomic
from waves.reader import Dump, read_dump

GTKW_WINDOW_CYCLES = 40       # core cycles shown around the marker
DEFAULT_WINDOW_PX = 960       # GTKWave 3.3.118's default main window width, pixels
_SST_COLLAPSED_PX = 45        # the collapsed signal-search tree beside the Signals pane
_PANE_MARGIN_PX = 30          # frames and the vertical scroll bar
MIN_WAVE_PANE_PX = 240
CHAR_PX = 8                   # GTKWave's default Signals font, pixels per character
MAX_SIGNALS_PX = 460
_FRAME_PX = 200               # GTKWave: pixels per zoom frame


def wave_pane_px(signals_px: int) -> int:
    """Width of the wave pane beside a Signals pane of ``signals_px`` in the default window."""
    return max(MIN_WAVE_PANE_PX, DEFAULT_WINDOW_PX - _SST_COLLAPSED_PX - signals_px - _PANE_MARGIN_PX)


def view(marker_ticks: int, window_ticks: int, end_ticks: int | None,
         pane_px: int = MIN_WAVE_PANE_PX) -> tuple[int, float]:
    """(timestart, zoom) in dump ticks for a view of at least ``window_ticks`` in a wave pane of
    ``pane_px`` pixels, starting a quarter window before ``marker_ticks``, kept within the
    dump's end if known."""
    window_ticks = max(int(window_ticks), 1)
    frame_ticks = window_ticks * _FRAME_PX / pane_px
    zoom = -float(max(0, math.ceil(math.log2(frame_ticks)))) if frame_ticks > 1 else 0.0
    span = int(2 ** -zoom * pane_px / _FRAME_PX)
    start = marker_ticks - window_ticks // 4
    if end_ticks is not None:
        start = min(start, end_ticks - span)
    return max(0, start), zoom


def trace_name(dump: Dump, name: str) -> str:
    width = dump.info(name).width
    return f"{name}[{width - 1}:0]" if width > 1 else name


def aliases(names: Iterable[str]) -> dict[str, str]:
    """Display names: the hierarchy joined by ``/`` (GTKWave cuts a dotted name to its last part),
    without a second-level scope that every name of the same top scope shares."""
    names = list(names)
    parts = {n: n.split(".") for n in names}
    shared = {}
    for p in parts.values():
        if len(p) > 2:
            shared.setdefault(p[0], set()).add(p[1])
        else:
            shared.setdefault(p[0], set()).add(None)
    out = {}
    for n, p in parts.items():
        drop = len(p) > 2 and len(shared[p[0]]) == 1
        out[n] = "/".join([p[0]] + p[2:] if drop else p)
    return out


def signals_px(dump: Dump, names: dict[str, str]) -> int:
    """A Signals pane wide enough for each alias, ``=`` and its value in hex (capped)."""
    longest = max((len(a) + 2 + -(-dump.info(n).width // 4) for n, a in names.items()), default=20)
    return min(MAX_SIGNALS_PX, CHAR_PX * longest + 24)


def write_triage(merged_vcd: str | Path, diverging_signals: Iterable[str], marker_ps,
                 out_gtkw: str | Path, other_signals: Iterable[str] = (),
                 dump: Dump | None = None,
                 window_ps: int = GTKW_WINDOW_CYCLES * 1000) -> Path:
    """Write ``out_gtkw`` viewing ``merged_vcd``: a "diverging" group with ``diverging_signals``
    (in the given order) first, then an optional closed "context" group with ``other_signals``;
    the primary marker at ``marker_ps`` (converted to the dump's time units), the view opened
    on about ``window_ps`` around it (see the module doc). Signals must exist in the dump
    (WaveError otherwise)."""
    dump = dump if dump is not None else read_dump(merged_vcd)
    diverging = list(diverging_signals)
    others = [n for n in other_signals if n not in set(diverging)]
    names = {n: trace_name(dump, n) for n in diverging + others}   # raises on unknown names
    shown = aliases(diverging + others)
    width = signals_px(dump, shown)
    out_gtkw = Path(out_gtkw)
    fh = io.StringIO()                 # written atomically below (tpusim.arch.fileio)
    save = GTKWSave(fh)
    save.comment("waves triage view", f"first divergence at {marker_ps} ps")
    rel = os.path.relpath(Path(merged_vcd).resolve(), out_gtkw.resolve().parent)
    save.dumpfile(rel, abspath=False)
    save.savefile(str(out_gtkw))
    save.sst_expanded(False)
    save.signals_width(width)
    marker = dump.to_ticks(marker_ps)
    end = dump.end_ps
    start, zoom = view(marker, dump.to_ticks(window_ps),
                       None if end is None else dump.to_ticks(end), wave_pane_px(width))
    save.timestart(start)
    save.zoom_markers(zoom, marker=marker)
    if diverging:
        with save.group("diverging", highlight=True):
            for n in diverging:
                save.trace(names[n], alias=shown[n], highlight=True)
    if others:
        with save.group("context", closed=True):
            for n in others:
                save.trace(names[n], alias=shown[n])
    write_text_atomic(out_gtkw, fh.getvalue())
    return out_gtkw


__all__ = ["GTKW_WINDOW_CYCLES", "trace_name", "aliases", "view", "wave_pane_px", "write_triage"]
