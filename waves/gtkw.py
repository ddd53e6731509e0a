"""GTKWave save files for triage: diverging signals grouped at the top, marker at the divergence.

Multi-bit signals get their ``[msb:lsb]`` suffix (``[width-1:0]``), without which GTKWave
silently shows nothing for them.

The view opens on the marker: ``[timestart]`` a quarter window before it and a zoom showing about
``window_ps``. GTKWave's zoom z means 2**-z time units per 200-pixel frame (calczoom), so a wave
pane of ``WAVE_PANE_PX`` pixels spans 2**-z * WAVE_PANE_PX / 200 time units; GTKWave ignores a
``[timestart]`` later than (end of dump - visible span), so it is clamped to that.
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
WAVE_PANE_PX = 1000           # assumed width of GTKWave's wave pane, pixels
_FRAME_PX = 200               # GTKWave: pixels per zoom frame


def view(marker_ticks: int, window_ticks: int, end_ticks: int | None) -> tuple[int, float]:
    """(timestart, zoom) in dump ticks for a view of at least ``window_ticks`` starting a quarter
    window before ``marker_ticks``, kept within the dump's end if known."""
    window_ticks = max(int(window_ticks), 1)
    frame_ticks = window_ticks * _FRAME_PX / WAVE_PANE_PX
    zoom = -float(max(0, math.ceil(math.log2(frame_ticks)))) if frame_ticks > 1 else 0.0
    span = int(2 ** -zoom * WAVE_PANE_PX / _FRAME_PX)
    start = marker_ticks - window_ticks // 4
    if end_ticks is not None:
        start = min(start, end_ticks - span)
    return max(0, start), zoom


def trace_name(dump: Dump, name: str) -> str:
    width = dump.info(name).width
    return f"{name}[{width - 1}:0]" if width > 1 else name


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
    out_gtkw = Path(out_gtkw)
    fh = io.StringIO()                 # written atomically below (tpusim.arch.fileio)
    save = GTKWSave(fh)
    save.comment("waves triage view", f"first divergence at {marker_ps} ps")
    rel = os.path.relpath(Path(merged_vcd).resolve(), out_gtkw.resolve().parent)
    save.dumpfile(rel, abspath=False)
    save.savefile(str(out_gtkw))
    marker = dump.to_ticks(marker_ps)
    end = dump.end_ps
    start, zoom = view(marker, dump.to_ticks(window_ps),
                       None if end is None else dump.to_ticks(end))
    save.timestart(start)
    save.zoom_markers(zoom, marker=marker)
    if diverging:
        with save.group("diverging", highlight=True):
            for n in diverging:
                save.trace(names[n], highlight=True)
    if others:
        with save.group("context", closed=True):
            for n in others:
                save.trace(names[n])
    write_text_atomic(out_gtkw, fh.getvalue())
    return out_gtkw


__all__ = ["GTKW_WINDOW_CYCLES", "trace_name", "view", "write_triage"]
