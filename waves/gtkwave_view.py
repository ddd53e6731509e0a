"""Open a triage save file in a real GTKWave under Xvfb, screenshot it and check what it shows.

``check_view(gtkw, png) -> ViewReport`` (``python -m waves check-view``, ``make triage-check``):

* static: the save file's dump (``[dumpfile]``, relative to the save file) exists and holds every
  trace it names; the shown names (aliases) are all different;
* GTKWave 3.3 (Debian package ``gtkwave``) opens it at its default window size on an Xvfb screen
  (``xvfb``), started in the save file's folder as a user would; once its window is mapped and
  drawn the screen is grabbed (ImageMagick ``import``, package ``imagemagick``) and written as a
  PNG;
* GTKWave's stderr holds nothing but its banner and the dump's start/end times (anything else,
  a GTK warning or a load error, is a problem), and GTKWave is still running;
* the primary marker, a vertical line of colour ``MARKER_RGB``, is on screen (``marker_x``).

Errors: ``WaveError`` naming the missing program (and its Debian package) or a save file that
cannot be read; everything GTKWave shows wrong is a problem in the report, not an exception.
Processes are ended by PID (their own session), also on Ctrl-C.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from waves.reader import WaveError, read_dump

MARKER_RGB = (255, 128, 128)        # GTKWave's default primary marker colour
MIN_MARKER_PX = 100                 # a vertical run at least this long in one column
SCREEN = "1280x1024x24"
_TOOLS = {"gtkwave": "gtkwave", "Xvfb": "xvfb", "import": "imagemagick", "xwininfo": "x11-utils"}
_QUIET = re.compile(r"^(GTKWave Analyzer v.*|\[\d+\] (start|end) time\.|)$")
_TRACE = re.compile(r"^(?:\+\{(?P<alias>[^}]*)\} )?(?P<name>[A-Za-z_$][^\s\[]*)(?:\[\d+:\d+\])?$")


@dataclass
class ViewReport:
    """What one save file looks like in GTKWave. ``ok`` when ``problems`` is empty."""
    gtkw: Path
    png: Path | None = None
    marker_x: int | None = None           # screen column of the primary marker
    shown: list = field(default_factory=list)       # trace names as GTKWave shows them
    stderr: str = ""
    problems: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _tools() -> dict[str, str]:
    found = {t: shutil.which(t) for t in _TOOLS}
    missing = [f"{t} (Debian package {_TOOLS[t]})" for t, p in found.items() if p is None]
    if missing:
        raise WaveError("cannot check a GTKWave view without " + ", ".join(missing)
                        + ": apt-get install -y gtkwave xvfb imagemagick x11-utils")
    return found


def parse_gtkw(path: Path) -> tuple[Path, list[tuple[str, str]]]:
    """(dump file, [(trace name, shown name)]) of a save file; WaveError if it names no dump."""
    text = Path(path).read_text()
    m = re.search(r'^\[dumpfile\] "([^"]*)"', text, re.M)
    if m is None:
        raise WaveError(f"{path}: no [dumpfile] line: not a GTKWave save file of a dump")
    dump = Path(m.group(1))
    dump = dump if dump.is_absolute() else Path(path).parent / dump
    traces = []
    for line in text.splitlines():
        t = None if line[:1] in "[*@-" else _TRACE.match(line)
        if t:
            traces.append((t["name"], t["alias"] or t["name"].rsplit(".", 1)[-1]))
    return dump, traces


def static_problems(gtkw: Path, report: ViewReport) -> None:
    dump_path, traces = parse_gtkw(gtkw)
    report.shown = [s for _, s in traces]
    if not dump_path.is_file():
        report.problems.append(f"dump file {dump_path} (from [dumpfile]) does not exist")
        return
    names = set(read_dump(dump_path).names())
    missing = [n for n, _ in traces if n not in names]
    if missing:
        report.problems.append(f"{len(missing)} trace(s) not in {dump_path.name}: {missing[:5]}")
    dup = sorted({s for s in report.shown if report.shown.count(s) > 1})
    if dup:
        report.problems.append(f"ambiguous names, shown for several signals: {dup}")


def _start_xvfb(xvfb: str) -> tuple[subprocess.Popen, str]:
    r, w = os.pipe()
    proc = subprocess.Popen([xvfb, "-displayfd", str(w), "-screen", "0", SCREEN, "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    os.close(w)
    with os.fdopen(r) as f:
        num = f.readline().strip()
    if not num.isdigit():
        _stop(proc)
        raise WaveError(f"Xvfb did not start (it printed display {num!r})")
    return proc, f":{num}"


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _window_mapped(xwininfo: str, env: dict) -> bool:
    r = subprocess.run([xwininfo, "-root", "-tree"], env=env, capture_output=True, text=True, timeout=10)
    return any("GTKWave" in line and "1x1+" not in line for line in r.stdout.splitlines())


def _grab(tool: str, env: dict) -> np.ndarray:
    """The root window as an (h, w, 3) uint8 array (ImageMagick ``import``, binary PPM)."""
    raw = subprocess.run([tool, "-window", "root", "-depth", "8", "ppm:-"], env=env,
                         capture_output=True, timeout=30, check=True).stdout
    m = re.match(rb"P6\s+(\d+)\s+(\d+)\s+255\s", raw)
    if m is None:
        raise WaveError(f"the screen grab is not an 8-bit binary PPM: {raw[:20]!r}")
    w, h = int(m[1]), int(m[2])
    return np.frombuffer(raw[m.end():m.end() + w * h * 3], np.uint8).reshape(h, w, 3)


def write_png(path: Path, rgb: np.ndarray) -> Path:
    """An (h, w, 3) uint8 array as an 8-bit RGB PNG."""
    h, w, _ = rgb.shape
    rows = b"".join(b"\0" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))
    Path(path).write_bytes(png)
    return Path(path)


def marker_column(rgb: np.ndarray) -> int | None:
    """The leftmost screen column holding a vertical run of the marker colour, or None."""
    hits = np.all(rgb == np.array(MARKER_RGB, np.uint8), axis=2).sum(axis=0)
    cols = np.nonzero(hits >= MIN_MARKER_PX)[0]
    return int(cols[0]) if len(cols) else None


def _run_gtkwave(tools: dict, gtkw: Path, settle_s: float, timeout_s: float,
                 report: ViewReport) -> np.ndarray | None:
    xvfb, gtk = None, None
    err = tempfile.TemporaryFile()
    try:
        xvfb, display = _start_xvfb(tools["Xvfb"])
        env = dict(os.environ, DISPLAY=display)
        gtk = subprocess.Popen([tools["gtkwave"], gtkw.name], cwd=gtkw.parent, env=env,
                               stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        t_end = time.monotonic() + timeout_s
        while not _window_mapped(tools["xwininfo"], env):
            if gtk.poll() is not None or time.monotonic() > t_end:
                report.problems.append(f"GTKWave showed no window (exit {gtk.poll()}) in {timeout_s:.0f} s")
                return None
            time.sleep(0.2)
        time.sleep(settle_s)                      # the waves are drawn after the window maps
        rgb = _grab(tools["import"], env)
        if gtk.poll() is not None:
            report.problems.append(f"GTKWave ended (exit {gtk.returncode}) while showing the view")
        return rgb
    finally:
        _stop(gtk)
        _stop(xvfb)
        err.seek(0)
        report.stderr = err.read().decode(errors="replace")
        err.close()


def check_view(gtkw: str | Path, png: str | Path, settle_s: float = 3.0,
               timeout_s: float = 60.0) -> ViewReport:
    """Check ``gtkw`` statically and in GTKWave; the screenshot goes to ``png`` (module doc)."""
    tools = _tools()
    gtkw = Path(gtkw).resolve()
    if not gtkw.is_file():
        raise WaveError(f"{gtkw}: no such save file")
    report = ViewReport(gtkw)
    static_problems(gtkw, report)
    rgb = _run_gtkwave(tools, gtkw, settle_s, timeout_s, report)
    noise = [ln for ln in report.stderr.splitlines() if not _QUIET.match(ln.strip())]
    if noise:
        report.problems.append(f"GTKWave's stderr: {noise[:5]}")
    if rgb is not None:
        report.png = write_png(Path(png), rgb)
        report.marker_x = marker_column(rgb)
        if report.marker_x is None:
            report.problems.append("the divergence marker is not on screen")
    return report


def bundle_views(path: str | Path) -> list[Path]:
    """The save files of a failure bundle (``triage.gtkw``, ``min/triage.gtkw``), or ``path``
    itself if it is a save file. WaveError if there is none."""
    p = Path(path)
    if p.is_file():
        return [p]
    views = [g for g in (p / "triage.gtkw", p / "min" / "triage.gtkw") if g.is_file()]
    if not views:
        raise WaveError(f"{p}: no triage.gtkw (nor min/triage.gtkw): not a failure bundle with waves")
    return views


__all__ = ["ViewReport", "check_view", "bundle_views", "parse_gtkw", "marker_column", "write_png",
           "MARKER_RGB"]
