"""Error paths of the invalid stress programs (stressgen.invalid) and their coverage bins
(stressgen.coverage.ERROR_BINS, EDGE_BINS): each SRAM / accumulator range sub-kind gives its own
device error on the SimPy model, at the edge (one unit past the limit) when drawn so, and the
bins say which checker path a program takes."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from stressgen import invalid as inv
from stressgen.campaign import derive_seed
from stressgen.coverage import ERROR_BINS, bins_of, path_bin
from stressgen.gen import generate
from stressgen.invalid import INVALID_PATHS, QREG_PATHS, SRAM_SUBKINDS, fault_kind, invalid_path_of, make_invalid
from tpusim.arch.config import load_config
from tpusim.arch.errors import DeviceError
from tpusim.arch.rowops import ROWOPS
from tpusim.sim import run_binary

SMALL = load_config("small")
EXPECT = {"dma_sram": "dma_sram_range", "dma_sram_store": "dma_sram_range", "mxu_sram_lw": "mxu_sram_range", "mxu_sram_act": "mxu_sram_range",
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


@pytest.mark.parametrize("name,ops,want,mutate", SRAM_SUBKINDS, ids=[k[0] for k in SRAM_SUBKINDS])
@pytest.mark.parametrize("edge", [True, False])
def test_each_range_subkind_gives_its_device_error(name, ops, want, mutate, edge):
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
    """At invalid rate 0.3, 400 programs reach every device error (each checker path is about
    equally likely, so a one-path error such as deadlock comes up least, once or twice), most at
    the edge, and valid programs touch the last SRAM word and the last accumulator row."""
    hits = Counter()
    for s in range(400):
        hits.update(generate(s, SMALL, invalid_rate=0.3).bins)
    assert all(hits[b] >= 1 for b in ERROR_BINS), {b: hits[b] for b in ERROR_BINS}
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


def _program_without(op):
    for s in range(200):
        p = generate(s, SMALL)
        if not any(getattr(ins, "op", None) == op for ins in p.instrs):
            return p
    raise AssertionError(f"every generated program has a {op}")


@pytest.mark.parametrize("name,ops,want,mutate", SRAM_SUBKINDS, ids=[k[0] for k in SRAM_SUBKINDS])
def test_a_fresh_instruction_carries_any_range_path(name, ops, want, mutate):
    """A sub-kind whose opcode the program lacks gets a fresh, in-range instruction of it; the
    fault then stops SimPy at that instruction with the sub-kind's field, and the path bin says
    which checker path it was."""
    p = _program_without(ops[0]) if ops[0] in ("LUT", "MUL", "POOL", "DWCONV", *ROWOPS) else generate(2, SMALL)
    r = random.Random(3)
    i = inv._fresh(p, SMALL, r, ops[0])
    assert want(p.instrs[i]) and fault_kind(p, SMALL) is None
    mutate(p, i, SMALL, _Edge(1, True))
    p.invalid = "sram_out_of_range"
    kind = EXPECT.get(name, "vpu_sram_range")
    with pytest.raises(DeviceError) as ei:
        run_binary(p.to_binary(SMALL), SMALL, {})
    assert ei.value.code == kind and ei.value.pc == 32 * i, ei.value
    assert path_bin(kind, ops[0], ei.value.field) in bins_of(p, SMALL)


@pytest.mark.parametrize("op,field", QREG_PATHS, ids=[f"{o}.{f}" for o, f in QREG_PATHS])
def test_a_fresh_instruction_carries_any_qreg_path(op, field):
    p = _program_without(op) if op in ("MUL", "POOL", "DWCONV", *ROWOPS) else generate(4, SMALL)
    loaded = sorted({ins.args["qreg"] for ins in p.instrs if ins.op == "LOAD_QREG"})
    free = next(q for q in range(SMALL.qreg_count) if q not in loaded)
    i = inv._fresh(p, SMALL, random.Random(5), op, **{f: loaded[0] for o, f in QREG_PATHS if o == op},
                   mode=int(op == "POOL"))
    inv._replace(p, i, **{field: free})
    p.invalid = "qreg_unloaded"
    with pytest.raises(DeviceError) as ei:
        run_binary(p.to_binary(SMALL), SMALL, {})
    assert (ei.value.code, ei.value.pc, ei.value.field) == ("qreg_unloaded", 32 * i, field)
    assert path_bin("qreg_unloaded", op, field) in bins_of(p, SMALL)


def test_every_checker_path_within_200_consecutive_seeds():
    """At the mutant hunts' invalid rate (0.5), seeds 0..199 (a hunt's 200 programs) draw every
    checker path of INVALID_PATHS (invalid_path_of: the invalid seeds cycle through the paths, 1 to 2 seeds
    per path), and reach every SRAM / accumulator range
    path and every quant-register path (29 + 16, the rare opcodes' on fresh instructions): a
    checker mutant that drops one of those terms meets its path within 200 programs."""
    drawn = Counter(invalid_path_of(s, 0.5) for s in range(200))
    assert all(drawn[p] >= 1 for p in INVALID_PATHS), [p for p in INVALID_PATHS if not drawn[p]]
    assert drawn[None] == 100
    hits = Counter()
    for s in range(200):
        hits.update(b for b in generate(s, SMALL, invalid_rate=0.5).bins if b.startswith("path_"))
    want = {path_bin("qreg_unloaded", o, f) for o, f in QREG_PATHS}
    fields = {"dma_sram": "sram_addr", "dma_sram_store": "sram_addr", "mxu_sram_lw": "sram_addr", "mxu_sram_act": "act_addr",
              "mxu_acc": "acc_addr", "vpu_acc": "acc_addr", "param": "param_addr",
              "dst": "dst_addr", "skip": "skip_addr",
              "a": "src_a", "b": "src_b", "table": "table_addr", "src": "src_addr", "wt": "wt_addr"}
    for name, ops, _, _ in SRAM_SUBKINDS:
        field = fields.get(name) or fields[name.split("_")[-1]]
        want.add(path_bin(EXPECT.get(name, "vpu_sram_range"), ops[0], field))
    assert len(want) == 45
    assert not {b for b in want if not hits[b]}, sorted(b for b in want if not hits[b])


def test_invalid_path_of_follows_the_rate():
    assert invalid_path_of(7, 0.0) is None
    for rate in (0.05, 0.3, 1.0):
        n = sum(invalid_path_of(s, rate) is not None for s in range(1000))
        assert abs(n - 1000 * rate) <= 3, (rate, n)
    # campaign seeds are 64-bit (derive_seed): still the rate, not all invalid
    n = sum(invalid_path_of(derive_seed(12345, i), 0.05) is not None for i in range(2000))
    assert 60 <= n <= 140, n
