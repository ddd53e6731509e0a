"""Generated invalid programs, forced through to both sides: the assembler refuses each with a
clear message, and the SimPy model and the RTL flag it the same way (device error code, PC and
cycle, or the same deadlock), one program per invalid class."""
from __future__ import annotations

import pytest

from stressgen.campaign import derive_seed
from stressgen.gen import generate
from stressgen.invalid import INVALID_CLASSES, assembler_rejects
from stressgen.runner import run_one
from tpusim.arch.config import load_config

pytestmark = pytest.mark.rtl
CFG = load_config("small")


def _one_per_class() -> dict:
    found = {}
    for i in range(400):
        prog = generate(derive_seed(17, i), CFG, invalid_rate=1.0)
        found.setdefault(prog.invalid, prog)
        if len(found) == len(INVALID_CLASSES):
            break
    return found


def test_every_invalid_class_is_flagged_alike_on_simpy_and_rtl(tmp_path):
    progs = _one_per_class()
    assert set(progs) == set(INVALID_CLASSES), sorted(progs)
    for cls, prog in sorted(progs.items()):
        msg = assembler_rejects(prog, CFG)
        assert msg and "instruction #" in msg, (cls, msg)
        o = run_one(prog, CFG, tmp_path / cls, rtl=True)
        assert o.passed, (cls, o.reason, o.first_divergence, o.checks[-1:])
        flags = o.details.get("simpy_flag"), o.details.get("rtl_flag")
        assert flags[0] is not None and flags[0] == flags[1], (cls, flags)
