"""Process replay: prove that a refactor changed no binary and no cycle.

    python scripts/replay_check.py REF [--quick] [--stress-seeds N] [--keep DIR]
    make replay-check REF=main~3 [QUICK=1]

Checks out REF into a temporary git worktree, runs ``scripts/replay_probe.py`` once on that tree
and once on the working tree (each in its own process, ``PYTHONPATH`` pointing at the tree), and
compares the two records case by case: the device bytes of every compiled binary (META
excluded), the SimPy cycle count, retire trace, performance counters, outputs, per-instruction timeline and SRAM grant log, for ResNet-50
(seed, medium, small), the reduced ResNet-50, the small test graphs of tests/qnets.py and N
stressgen seeds (program bytes, golden and SimPy results). ``--quick`` skips the full-size
ResNet-50 SimPy runs (its binaries are still compared).

Prints one line per differing case and a summary; exit 0 when every case is identical, 1 when
one differs or is missing, 2 on a usage error (unknown ref). Records are kept under ``--keep``
(default build/replay/) as ``<ref-sha>-<options>.json`` and ``worktree-<path hash>.json``; a
record of the same ref sha, options, probe and tests/qnets.py is reused.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "scripts" / "replay_probe.py"
QNETS = REPO / "tests" / "qnets.py"


def _git(*args, cwd=REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _probe(tree: Path, out: Path, a) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    cmd = [sys.executable, str(PROBE), "--out", str(out), "--qnets", str(QNETS),
           "--stress-seeds", str(a.stress_seeds)] + (["--quick"] if a.quick else [])
    print(f"replay: probing {tree}", file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=tree, env=env, check=True)
    rec = json.loads(out.read_text())
    if Path(rec["tree"]).resolve() != tree.resolve():
        raise SystemExit(f"replay: the probe imported {rec['tree']}, not {tree} (PYTHONPATH ignored?)")
    return rec


def compare(base: dict, new: dict, added: set | None = None) -> list[str]:
    """Lines naming every case that differs (field and both values) or exists on one side.

    Performance counters are compared by name: a counter the working tree has and the ref does
    not (a hardware change that adds one) is not a difference; its name goes into ``added``."""
    diffs = []
    for case in sorted(set(base) | set(new)):
        if case not in new or case not in base:
            diffs.append(f"{case}: only in {'the ref' if case in base else 'the working tree'}")
            continue
        for k in sorted(set(base[case]) | set(new[case])):
            b, n = base[case].get(k), new[case].get(k)
            if k == "counters" and isinstance(b, dict) and isinstance(n, dict):
                if added is not None:
                    added.update(set(n) - set(b))
                diffs += [f"{case}: counter {c} {b[c]!r} -> {n.get(c)!r}"
                          for c in sorted(b) if b[c] != n.get(c)]
            elif b != n:
                diffs.append(f"{case}: {k} {b!r} -> {n!r}")
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ref", help="git ref to compare the working tree against")
    ap.add_argument("--quick", action="store_true", help="no full-size ResNet-50 SimPy runs")
    ap.add_argument("--stress-seeds", type=int, default=200)
    ap.add_argument("--keep", type=Path, default=REPO / "build" / "replay")
    a = ap.parse_args(argv)
    try:
        sha = _git("rev-parse", "--verify", f"{a.ref}^{{commit}}")
    except subprocess.CalledProcessError:
        print(f"replay: unknown git ref {a.ref!r}", file=sys.stderr)
        return 2
    try:
        return _check(a, sha)
    except subprocess.CalledProcessError as e:
        print(f"replay: the probe failed on one tree ({e.cmd[-1] if e.cmd else e}); see its output above",
              file=sys.stderr)
        return 2


def _check(a, sha: str) -> int:
    a.keep.mkdir(parents=True, exist_ok=True)
    probe_sha = hashlib.sha256(PROBE.read_bytes() + QNETS.read_bytes()).hexdigest()[:8]
    tag = f"{sha[:12]}-{'q' if a.quick else 'f'}{a.stress_seeds}-{probe_sha}"
    base_file = a.keep / f"{tag}.json"
    if base_file.exists():
        base = json.loads(base_file.read_text())
    else:
        with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
            wt = Path(tmp) / "tree"
            _git("worktree", "add", "--detach", str(wt), sha)
            try:
                base = _probe(wt, base_file, a)
            finally:
                _git("worktree", "remove", "--force", str(wt))
    mine = hashlib.sha256(str(REPO).encode()).hexdigest()[:8]
    new = _probe(REPO, a.keep / f"worktree-{mine}.json", a)
    added: set = set()
    diffs = compare(base["cases"], new["cases"], added)
    for line in diffs:
        print(line)
    if added:
        print(f"replay: counters only in the working tree (not compared): {', '.join(sorted(added))}")
    n = len(set(base["cases"]) | set(new["cases"]))
    differ = len({d.split(":")[0] for d in diffs})
    print(f"replay against {a.ref} ({sha[:12]}): {n - differ} of {n} cases identical, {differ} differ")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
