"""The triage save file in a real GTKWave (waves.gtkwave_view, `make triage-check`): under Xvfb at
GTKWave's default window size the divergence marker is on screen, every name is unambiguous and
GTKWave's stderr is clean; a save file that breaks one of these is reported. Skipped where the
Debian packages gtkwave, xvfb, imagemagick and x11-utils are not installed (not needed in CI)."""
from __future__ import annotations

import re
import shutil

import pytest
from vcd import VCDWriter

from waves.gtkw import write_triage
from waves.gtkwave_view import check_view

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("gtkwave", "Xvfb", "import", "xwininfo")),
    reason="needs gtkwave, Xvfb, ImageMagick's import and xwininfo (apt-get install gtkwave xvfb "
           "imagemagick x11-utils)")

SIGNALS = ("model.tpu.vpu.retire_digest", "rtl.tb_top.u_arch_probe.vpu_retire_digest",
           "model.tpu.load.busy", "rtl.tb_top.u_tpu.g_eng.u_ctrl.busy_q", "model.tpu.vpu.busy")
SHOWN = ["model/vpu/retire_digest", "rtl/u_arch_probe/vpu_retire_digest", "model/load/busy",
         "rtl/u_tpu/g_eng/u_ctrl/busy_q", "model/vpu/busy"]
MARKER_PS = 948_000


def _dump(path):
    """A merged-style dump, 1500 core cycles: the two digests part at MARKER_PS."""
    with open(path, "w") as fh, VCDWriter(fh, timescale="1 ps") as w:
        v = {}
        for name in SIGNALS:
            scope, leaf = name.rsplit(".", 1)
            v[name] = w.register_var(scope, leaf, "wire", size=32 if "digest" in leaf else 1, init=0)
        for c in range(1500):
            t = c * 1000
            w.change(v["model.tpu.load.busy"], t, c % 7 == 0)
            w.change(v["model.tpu.vpu.busy"], t, c % 5 == 0)
            if t == MARKER_PS:
                w.change(v["model.tpu.vpu.retire_digest"], t, 0xE6C6650D)
                w.change(v["rtl.tb_top.u_arch_probe.vpu_retire_digest"], t, 0xFD4649DF)
    return path


def _view(tmp_path):
    vcd = _dump(tmp_path / "merged.vcd")
    return write_triage(vcd, SIGNALS[:2], MARKER_PS, tmp_path / "triage.gtkw", other_signals=SIGNALS[2:])


def test_triage_view_in_gtkwave(tmp_path):
    r = check_view(_view(tmp_path), tmp_path / "shot.png")
    assert r.ok, (r.problems, r.stderr)
    assert r.shown == SHOWN
    assert r.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the marker lies in the wave pane, right of the Signals pane, within the default window
    width = int(re.search(r"\[signals_width\] (\d+)", r.gtkw.read_text())[1])
    assert width < r.marker_x < 960, (width, r.marker_x)


def test_a_bad_view_is_reported(tmp_path):
    gtkw = _view(tmp_path)
    good = gtkw.read_text()
    # the old save file: no aliases -> GTKWave shows "busy" for two signals
    gtkw.write_text(re.sub(r"^\+\{[^}]*\} ", "", good, flags=re.M))
    r = check_view(gtkw, tmp_path / "a.png")
    assert r.problems == ["ambiguous names, shown for several signals: ['busy']"]
    # the view opening far after the marker, and a trace the dump does not have
    gtkw.write_text(good.replace("\n[timestart] ", "\n[timestart] 1200000\n[*] ")
                    .replace("model.tpu.load.busy", "model.tpu.load.nosuch"))
    r = check_view(gtkw, tmp_path / "b.png")
    assert r.marker_x is None
    assert r.problems == ["1 trace(s) not in merged.vcd: ['model.tpu.load.nosuch']",
                          "the divergence marker is not on screen"]
