"""Committed generated files (rtl/tpu_isa_pkg.sv, docs/isa.md): write one, or check it is current."""
from __future__ import annotations

import sys
from pathlib import Path


def is_current(path: Path, text: str) -> bool:
    """True if ``path`` exists and holds exactly ``text``."""
    return path.exists() and path.read_text() == text


def check_or_write(path: Path, text: str, command: str, check: bool) -> int:
    """``check``: exit status 1 (and a line naming ``command`` to regenerate) if ``path`` is stale,
    else 0; otherwise write ``text`` to ``path``. Prints what it did."""
    if check:
        if not is_current(path, text):
            print(f"{path} is stale or missing: run `{command}`", file=sys.stderr)
            return 1
        print(f"{path} is current")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}")
    return 0
