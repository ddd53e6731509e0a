"""``python -m waves diff A.vcd B.vcd [--map FILE] [--core-period-ps N] [--gtkw OUT]`` and
``python -m waves triage MODEL.vcd RTL.vcd [--map waves/arch_map.yaml] --out DIR`` and
``python -m waves check-view BUNDLE|FILE.gtkw [--out DIR]`` (``make triage-check``).

Exit status: 0 identical, 1 different, 2 user error (one line on stderr, no traceback; also two
dumps without a signal name in common and no --map), 3 identical only up to the end of a dump cut
short (a killed run: compared up to its last complete time step). check-view: 0 when every view
is fine in GTKWave (waves.gtkwave_view), 1 when one has a problem, 2 user error.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from waves.diff import diff_dumps, load_map, report
from waves.gtkw import GTKW_WINDOW_CYCLES, write_triage
from waves.gtkwave_view import bundle_views, check_view
from waves.reader import WaveError, read_dump
from waves.triage import triage


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m waves", description="waveform dump tools")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("diff", help="compare two dumps signal by signal; report the first divergence")
    d.add_argument("a", help="first dump (VCD or FST)")
    d.add_argument("b", help="second dump (VCD or FST)")
    d.add_argument("--map", help="YAML file mapping names in A to names in B (only these are compared)")
    d.add_argument("--core-period-ps", type=int, default=1000,
                   help="core clock period for the cycle numbers (default 1000)")
    d.add_argument("--gtkw", help="also write a GTKWave save file on A: diverging signals at "
                                  "the top, marker at the first divergence")
    t = sub.add_parser("triage", help="diff a model dump against an RTL dump and write a merged "
                                      "VCD, a GTKWave save file and divergence.txt")
    t.add_argument("model", help="SimPy model dump (run_binary(..., vcd=...))")
    t.add_argument("rtl", help="RTL dump (run_rtl(..., waves='arch') writes arch.vcd)")
    t.add_argument("--map", help="YAML map model name -> RTL name (waves/arch_map.yaml)")
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument("--core-period-ps", type=int, default=1000,
                   help="core clock period for the cycle numbers (default 1000)")
    v = sub.add_parser("check-view", help="open a bundle's triage.gtkw (and min/triage.gtkw) in "
                                           "GTKWave under Xvfb, screenshot it, check marker, names, stderr")
    v.add_argument("path", help="failure bundle folder or .gtkw file")
    v.add_argument("--out", default="build/triage-check", help="folder for the screenshots (PNG)")
    return p


def _check_view(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bad = 0
    for i, g in enumerate(bundle_views(args.path)):
        r = check_view(g, out / f"view{i}-{g.parent.name}.png")
        bad += not r.ok
        print(f"{g}: {'OK' if r.ok else 'PROBLEMS'}; marker at screen x={r.marker_x}; "
              f"screenshot {r.png}; {len(r.shown)} traces, e.g. {r.shown[:2]}")
        for p in r.problems:
            print(f"  problem: {p}")
    return 1 if bad else 0


def _triage(args) -> int:
    res = triage(args.model, args.rtl, args.map, args.out, args.core_period_ps)
    print(res.report)
    print(f"wrote {res.merged_vcd}, {res.gtkw}, {res.report_path}  (gtkwave {res.gtkw})")
    return res.exit_code


def _diff(args) -> int:
    if args.core_period_ps <= 0:
        raise WaveError(f"--core-period-ps must be positive, got {args.core_period_ps}")
    mapping = load_map(args.map) if args.map else None
    a, b = read_dump(args.a), read_dump(args.b)
    res = diff_dumps(a, b, mapping)
    print(report(res, args.core_period_ps, a=a, b=b, mapping=mapping))
    if args.gtkw:
        first = res.first
        marker_ps = first.time_ps if first else (res.cut_ps or 0)
        write_triage(args.a, [d.signal_a for d in res.divergences], marker_ps, args.gtkw, dump=a,
                     window_ps=GTKW_WINDOW_CYCLES * args.core_period_ps)
    return res.exit_code


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"triage": _triage, "diff": _diff, "check-view": _check_view}[args.cmd](args)
    except WaveError as exc:
        print(f"waves: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f" {exc.filename}:" if getattr(exc, "filename", None) else ""
        print(f"waves: error:{where} {exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
