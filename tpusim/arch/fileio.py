"""Atomic output files: write a temporary file in the same folder, then rename it into place.

A run killed part-way leaves either the previous file or the complete new one, never a torn one
(the temporary file is removed on any error raised in Python).
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically.

    OSError (the subclass for its errno) if the folder is not writable or the write fails, e.g.
    ENOSPC (disk full) or EFBIG (file-size limit, RLIMIT_FSIZE): its ``filename`` is ``path``
    (not the temporary file), so ``str(e)`` names the file that could not be written."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno is None:
            raise
        raise OSError(e.errno, e.strerror or str(e), str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def file_part(name: str) -> str:
    """A tensor or input name as part of a file name (characters other than letters, digits and
    ``-_.`` replaced by ``_``)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def save_npy_atomic(path: str | Path, array: np.ndarray) -> None:
    """np.save, atomically (``path`` should end in .npy)."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    write_bytes_atomic(path, buf.getvalue())


def save_npz_atomic(path: str | Path, arrays: dict) -> None:
    """np.savez of {name: array}, atomically (``path`` should end in .npz)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes_atomic(path, buf.getvalue())
