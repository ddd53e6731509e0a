"""Finished stages of a long run, kept on disk so that a restarted run resumes (``make cosim``).

A stage result is stored in ``<folder>/<stage>.pkl`` together with a key: the SHA-256 of
everything the result depends on (the binary, the inputs, the hardware config and the source of
the code that produced it). ``load`` returns the result only when the stored key matches, so a
changed model, input or simulator source recomputes the stage. Files are written atomically
(tpusim.arch.fileio), so a run killed at any moment (kill -9 included) leaves each stage either
complete or absent; an unreadable file (a foreign or damaged one) counts as absent.

The files are pickles written by this process for itself; do not load stage folders from
untrusted sources.
"""
from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

from tpusim.arch.fileio import write_bytes_atomic

_FORMAT = 1
_REPO = Path(__file__).resolve().parents[2]


def source_digest(*globs: str) -> str:
    """SHA-256 (hex) over the repository files matched by ``globs`` (relative to the repo root),
    names and contents, in sorted order. Used to invalidate a stage when its code changes."""
    h = hashlib.sha256()
    for pattern in globs:
        for p in sorted(_REPO.glob(pattern)):
            if p.is_file():
                h.update(str(p.relative_to(_REPO)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def make_key(*parts: bytes | str) -> str:
    """SHA-256 (hex) of the parts, each length-prefixed (so ("ab", "c") differs from ("a", "bc"))."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else bytes(p)
        h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


class StageCache:
    """Per-run store of finished stage results under ``folder``; ``enabled=False`` stores nothing
    and finds nothing (a fresh run)."""

    def __init__(self, folder: str | Path, enabled: bool = True) -> None:
        self.folder = Path(folder)
        self.enabled = enabled

    def _path(self, stage: str) -> Path:
        return self.folder / f"{stage}.pkl"

    def load(self, stage: str, key: str):
        """The result stored for ``stage`` under ``key``, or None (absent, other key, unreadable)."""
        p = self._path(stage)
        if not self.enabled or not p.is_file():
            return None
        try:
            fmt, stored_key, result = pickle.loads(p.read_bytes())
        except Exception:   # a damaged or foreign file is the same as none: the stage reruns
            return None
        return result if fmt == _FORMAT and stored_key == key else None

    def save(self, stage: str, key: str, result) -> None:
        """Store ``result`` (picklable) for ``stage`` atomically. OSError if not writable."""
        if not self.enabled:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(self._path(stage), pickle.dumps((_FORMAT, key, result)))


__all__ = ["StageCache", "make_key", "source_digest"]
