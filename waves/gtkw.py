"""GTKWave save files for triage: diverging signals grouped at the top, marker at the divergence.

Multi-bit signals get their ``[msb:lsb]`` suffix (``[width-1:0]``), without which GTKWave
silently shows nothing for them.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Iterable

from vcd.gtkw import GTKWSave

from tpusim.fileio import write_text_atomic

from waves.reader import Dump, read_dump


def trace_name(dump: Dump, name: str) -> str:
    width = dump.info(name).width
    return f"{name}[{width - 1}:0]" if width > 1 else name


def write_triage(merged_vcd: str | Path, diverging_signals: Iterable[str], marker_ps,
                 out_gtkw: str | Path, other_signals: Iterable[str] = (),
                 dump: Dump | None = None) -> Path:
    """Write ``out_gtkw`` viewing ``merged_vcd``: a "diverging" group with ``diverging_signals``
    (in the given order) first, then an optional closed "context" group with ``other_signals``;
    the primary marker at ``marker_ps`` (converted to the dump's time units). Signals must
    exist in the dump (WaveError otherwise)."""
    dump = dump if dump is not None else read_dump(merged_vcd)
    diverging = list(diverging_signals)
    others = [n for n in other_signals if n not in set(diverging)]
    names = {n: trace_name(dump, n) for n in diverging + others}   # raises on unknown names
    out_gtkw = Path(out_gtkw)
    fh = io.StringIO()                 # written atomically below (tpusim.fileio)
    save = GTKWSave(fh)
    save.comment("waves triage view", f"first divergence at {marker_ps} ps")
    save.dumpfile(str(merged_vcd))
    save.savefile(str(out_gtkw))
    save.zoom_markers(marker=dump.to_ticks(marker_ps))
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


__all__ = ["trace_name", "write_triage"]
