"""Error paths of the invalid stress programs (stressgen.invalid) and their coverage bins
(stressgen.coverage.ERROR_BINS, EDGE_BINS): each SRAM / accumulator range sub-kind gives its own
device error on the SimPy model, at the edge (one unit past the limit) when drawn so, and the
bins say which checker path a program takes."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from stressgen.coverage import ERROR_BINS, bins_of
from stressgen.gen import generate
from stressgen.invalid import SRAM_SUBKINDS, fault_kind, make_invalid
from tpusim.arch.config import load_config
from tpusim.arch.errors import DeviceError
from tpusim.sim import run_binary

SMALL = load_config("small")
EXPECT = {"dma_sram": "dma_sram_range", "mxu_sram_lw": "mxu_sram_range", "mxu_sram_act": "mxu_sram_range",
          "mxu_acc": "mxu_acc_range", "vpu_acc": "vpu_acc_range"}


class _Edge(random.Random):
    """A Random whose random() is 0 (every fault drawn at the edge) or 0.99 (past it)."""

    def __init__(self, seed, edge: bool):
        super().__init__(seed)
        self.edge = edge

    def random(self):
        return 0.0 if self.edge else 0.99


def _program_with(want):
    for s in range(200):
        p = generate(s, SMALL)
        idx = [i for i, ins in enumerate(p.instrs) if getattr(ins, "op", None) and want(ins)]
        if idx:
            return p, idx[0]
    raise AssertionError("no generated program has such an instruction")


@pytest.mark.parametrize("name,want,mutate", SRAM_SUBKINDS, ids=[k[0] for k in SRAM_SUBKINDS])
@pytest.mark.parametrize("edge", [True, False])
def test_each_range_subkind_gives_its_device_error(name, want, mutate, edge):
    p, i = _program_with(want)
    mutate(p, i, SMALL, _Edge(1, edge))
    p.invalid = "sram_out_of_range"
    kind = EXPECT.get(name, "vpu_sram_range")
    assert fault_kind(p, SMALL) == kind
    with pytest.raises(DeviceError) as ei:
        run_binary(p.to_binary(SMALL), SMALL, {})
    assert ei.value.code == kind and ei.value.pc == 32 * i
    bins = bins_of(p, SMALL)
    assert bins.get(f"err_{kind}") == 1
    assert ("err_edge" in bins) == edge, bins


def test_error_bins_of_a_campaign_mix():
    """At invalid rate 0.3, 400 programs reach every error path, most at the edge, and valid
    programs touch the last SRAM word and the last accumulator row."""
    hits = Counter()
    for s in range(400):
        hits.update(generate(s, SMALL, invalid_rate=0.3).bins)
    assert all(hits[b] >= 3 for b in ERROR_BINS), {b: hits[b] for b in ERROR_BINS}
    assert hits["valid_edge_sram"] >= 40 and hits["valid_edge_acc"] >= 40, hits
    assert generate(5, SMALL, invalid_rate=0.0).bins.keys().isdisjoint(ERROR_BINS)


def test_double_dma_fault_flags_the_lower_pc():
    """The first DMA_LOAD zero-length plus a zero-length DMA_STORE right after it: both engines
    fault at once; the device reports the load (the lower pc), and the bins say err_double."""
    p = generate(3, SMALL)
    first = next(i for i, ins in enumerate(p.instrs) if ins.op == "DMA_LOAD")
    r = _Edge(0, True)                       # random() = 0: the DMA pair variant
    assert make_invalid(p, SMALL, r, "double_fault") == "double_fault"
    assert [p.instrs[first].op, p.instrs[first + 1].op] == ["DMA_LOAD", "DMA_STORE"]
    with pytest.raises(DeviceError) as ei:
        run_binary(p.to_binary(SMALL), SMALL, {})
    assert ei.value.code == "dma_zero_length" and ei.value.pc == 32 * first
    assert {"err_dma_zero_length", "err_double"} <= set(bins_of(p, SMALL))
