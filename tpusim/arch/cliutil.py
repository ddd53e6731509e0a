"""One way for every command line tool to turn user mistakes into one line and an exit status.

`user_errors(prog)` wraps a ``main(argv) -> int``: a TpuError (bad model, config, binary, input,
device error) or an OSError (unreadable/unwritable path) prints ``prog: error: <message>`` on
stderr and returns 2; Ctrl-C prints ``prog: interrupted`` and returns 130; a closed output pipe
(``| head``) returns 141 quietly. Anything else is a bug in tpusim and keeps its traceback.
`quiet_interrupt(prog)`, called by a tool's entry module before its heavy imports, does the same
for a Ctrl-C that comes while the modules are still being imported (before `main` runs).
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from tpusim.arch.errors import TpuError

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141          # what a shell reports for a process killed by SIGPIPE


def writable_dir(path: str | Path, what: str, error: type[TpuError] = TpuError) -> Path:
    """Create the directory ``path`` if needed and check it is writable, before a long run;
    the resolved path. Raises ``error`` naming the option ``what`` and the path otherwise."""
    p = Path(path).resolve()
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise error(f"{what} {p}: cannot create it ({e.strerror})") from None
    if not os.access(p, os.W_OK):
        raise error(f"{what} {p}: not writable")
    return p


def quiet_interrupt(prog: str) -> None:
    """An uncaught KeyboardInterrupt (a Ctrl-C during the tool's imports, before user_errors
    wraps ``main``) prints ``prog: interrupted`` instead of a traceback; the process still ends
    by SIGINT (status 130 in a shell). Other exceptions go to the previous sys.excepthook."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            print(f"{prog}: interrupted", file=sys.stderr)
        else:
            previous(kind, value, tb)
    sys.excepthook = hook


def user_errors(prog: str):
    def wrap(main):
        @functools.wraps(main)
        def run(*args, **kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except TpuError as e:
                print(f"{prog}: error: {e}", file=sys.stderr)
                return EXIT_USER_ERROR
            except BrokenPipeError:        # the reader went away (`... | head`): stop quietly
                try:
                    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                except OSError:
                    pass
                return EXIT_BROKEN_PIPE
            except OSError as e:
                where = f" {e.filename}:" if getattr(e, "filename", None) else ""
                print(f"{prog}: error:{where} {e.strerror or e}", file=sys.stderr)
                return EXIT_USER_ERROR
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return EXIT_INTERRUPTED
        return run
    return wrap
