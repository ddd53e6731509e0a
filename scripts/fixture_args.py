"""Command line shared by the fixture export scripts (export_torch_fixtures, export_hf_fixtures).

Run from a separate environment with torch; the product never imports this.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def fixture_args(doc: str) -> argparse.Namespace:
    """Parse ``--out DIR`` (default tests/fixtures, created) and ``--only STEM``.

    ``doc`` is the script's module docstring; its first paragraph is the --help description.
    """
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests" / "fixtures")
    ap.add_argument("--only", help="write only this fixture stem")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    return a
