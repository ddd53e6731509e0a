"""The retire trace: what both the SimPy model and the RTL report of a run, and its comparison.

A retire trace is a list of ``(pc, engine, time_ps)`` in retire order: ``pc`` the byte offset of
the instruction from the code base, ``engine`` a name of ``tpusim.arch.isa.ENGINE_NAMES`` or
"HALT", ``time_ps`` the retire time in the model time base (ps from core edge 0).
"""
from __future__ import annotations


def first_retire_difference(simpy: list, rtl: list) -> dict | None:
    """First instruction whose retire differs. Each list holds (pc, engine, time_ps) in retire order,
    compared after sorting by (time, engine, pc) so that simultaneous retires compare equal."""
    a = sorted(simpy, key=lambda r: (r[2], r[1], r[0]))
    b = sorted(rtl, key=lambda r: (r[2], r[1], r[0]))
    for i, (x, y) in enumerate(zip(a, b)):
        if tuple(x) != tuple(y):
            return {"index": i, "simpy": {"pc": x[0], "engine": x[1], "time_ps": x[2]},
                    "rtl": {"pc": y[0], "engine": y[1], "time_ps": y[2]}}
    if len(a) != len(b):
        i = min(len(a), len(b))
        return {"index": i, "simpy": list(a[i]) if i < len(a) else None,
                "rtl": list(b[i]) if i < len(b) else None, "note": f"{len(a)} vs {len(b)} retires"}
    return None
