"""The pass manager shared by the front end and the back end: passes that each transform one IR
stage into the next, a verifier run after every pass, and numbered text dumps.

A ``Pass`` is (name, run, verify, dump): ``run(state) -> state``; ``verify(state)`` raises
CompileError naming the node, tensor or address at fault; ``dump(state) -> str`` is readable
text. ``IrDumps`` writes ``NN_<name>.<ext>`` into one directory, numbering on across every
pipeline of one compile (front end ``00_import.mlir`` .. ``06_fuse_relu.mlir``,
``07_quantize.txt``, then the back end's stages).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from tpusim.arch.fileio import write_text_atomic

__all__ = ["Pass", "IrDumps", "run_pipeline"]


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable
    verify: Callable
    dump: Callable
    ext: str = "txt"


class IrDumps:
    """Numbered dumps in ``directory`` (created if missing). OSError naming the file if one
    cannot be written."""

    def __init__(self, directory: Union[str, Path]):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.count = 0

    def write(self, name: str, text: str, ext: str = "txt") -> Path:
        path = self.dir / f"{self.count:02d}_{name}.{ext}"
        write_text_atomic(path, text)
        self.count += 1
        return path

    @classmethod
    def open(cls, where: Union[None, str, Path, "IrDumps"]) -> Optional["IrDumps"]:
        """None, an IrDumps (shared by the stages of one compile) or a directory for a new one."""
        return where if where is None or isinstance(where, IrDumps) else cls(where)


def run_pipeline(passes, state, dumps: Optional[IrDumps] = None):
    """Run every pass on ``state``, verifying (and dumping, with ``dumps``) after each one."""
    for p in passes:
        state = p.run(state)
        p.verify(state)
        if dumps is not None:
            dumps.write(p.name, p.dump(state), p.ext)
    return state
