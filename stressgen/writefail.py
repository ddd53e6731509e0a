"""Files that could not be written: a full disk (ENOSPC, EDQUOT) or a file-size limit (EFBIG,
RLIMIT_FSIZE) while a program's run folder or bundle is written.

Such a program is neither passed nor failed: its Outcome / database row gets status "error" and
a reason starting with ``WRITE_FAILED`` that names the file, and a resumed campaign runs it again
(``stressgen.db.ResultsDb.done_indices``).

Two ways a write fails: Python raises OSError (``write_failure``), or a simulator's ``$fwrite``
ignores the error and leaves the file cut short (``cut_files``: a file that reached the
file-size limit, or a file system with no space left).
"""
from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

#: reason prefix of a program whose files could not be written
WRITE_FAILED = "cannot write "
_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


def _os_error(exc: BaseException | None) -> OSError | None:
    """The first OSError of a full disk / size limit in ``exc`` and the exceptions it was raised
    from or while handling."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _why(e: OSError) -> str:
    return f"{e.strerror or os.strerror(e.errno)} ({errno.errorcode.get(e.errno, e.errno)})"


def write_failure(exc: BaseException, folder: str | Path | None = None, step: str = "") -> str | None:
    """``"cannot write <file>: <strerror> (<ERRNO>)"`` if ``exc`` comes from a full disk or the
    file-size limit, else None. Under a file-size limit a file that ``cut_files(folder)`` finds
    cut at the limit is named first (it failed before the file the OSError names); otherwise
    the OSError's file, else the cut files or the folder (and ``step``)."""
    e = _os_error(exc)
    if e is None:
        return None
    cut = cut_files(folder) if folder is not None else None
    if cut is not None and _size_limit_bytes() is not None:
        return cut            # a file the simulator's $fwrite cut earlier is the first casualty
    name = e.filename2 or e.filename           # shutil's copy names (source, destination)
    if name:
        return f"{WRITE_FAILED}{name}: {_why(e)}"
    if cut is not None:
        return cut
    where = f"a file under {folder}" if folder is not None else "a file"
    return f"{WRITE_FAILED}{where}{f' (step {step})' if step else ''}: {_why(e)}"


def _size_limit_bytes() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _disk_full(folder: Path) -> bool:
    st = os.statvfs(folder)
    free = st.f_bfree if os.geteuid() == 0 else st.f_bavail   # root may use the reserved blocks
    return free == 0


def cut_files(folder: str | Path) -> str | None:
    """Why a file under ``folder`` may have been cut short by a write error nobody reported:
    ``"cannot write <file>[, <file>...]: file-size limit of N bytes reached (EFBIG)"`` naming
    the files at least RLIMIT_FSIZE bytes long (oldest first, at most 3), or ``"cannot write
    under <folder>: no space left on device (ENOSPC)"``; None if neither (or no folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    limit = _size_limit_bytes()
    if limit is not None:
        full = []
        for f in folder.rglob("*"):
            try:
                st = f.stat()
            except OSError:
                continue
            if f.is_file() and st.st_size >= limit:
                full.append((st.st_mtime_ns, str(f)))
        if full:
            names = ", ".join(n for _, n in sorted(full)[:3]) + (", ..." if len(full) > 3 else "")
            return f"{WRITE_FAILED}{names}: file-size limit of {limit} bytes reached (EFBIG)"
    if _disk_full(folder):
        return f"{WRITE_FAILED}under {folder}: no space left on device (ENOSPC)"
    return None


def is_write_failure(reason: str | None) -> bool:
    """True for a reason given by ``write_failure`` / ``cut_files``."""
    return bool(reason) and reason.startswith(WRITE_FAILED)


__all__ = ["WRITE_FAILED", "write_failure", "cut_files", "is_write_failure"]
