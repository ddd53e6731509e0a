"""The compiler's fast cost model (tpucompile.backend.estimate): the DDR traffic it derives from
the tilings is the traffic the compiled program moves, its caches do not change its answers,
and its time tracks the SimPy model's across configurations."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tpucompile.backend import pipeline, tiling
from tpucompile.backend.cfgmemo import ConfigReads
from tpucompile.backend.compile import compile_qgraph
from tpucompile.backend.estimate import _TIMING, _TIMING_ONLY, BOUNDS, Estimator, _Geometry, _prices, last_producers
from tpucompile.backend.work import generic_work
from tpucompile.ops import OP_TABLE
from tpusim.arch.config import load_config
from tpusim.arch.dma_timing import DmaTiming
from tpusim.arch.errors import CompileError
from tpusim.arch.timebase import Timebase
from tpusim.flow import sweep


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    cache = tmp_path_factory.mktemp("frontend")
    return {m: sweep.load_model(m, cache, 2) for m in ("digits", "resnet50-reduced")}


@pytest.mark.parametrize("hw", ["small", "medium", "small_wide", "small_tall"])
@pytest.mark.parametrize("model", ["digits", "resnet50-reduced"])
def test_estimated_bytes_are_the_programs(models, model, hw):
    """Per layer, the LOAD and STORE bytes of the work hooks equal meta["layers"] of the
    compiled binary (square and non-square arrays)."""
    md, cfg = models[model], load_config(hw)
    layers = {L["name"]: L for L in compile_qgraph(md.qg, cfg).meta["layers"]}
    est = Estimator(md.qg).estimate(cfg)
    off = [(e.name, e.load_bytes, layers[e.name]["ddr_bytes_in"], e.store_bytes, layers[e.name]["ddr_bytes_out"])
           for e in est.layers
           if (e.load_bytes, e.store_bytes) != (layers[e.name]["ddr_bytes_in"], layers[e.name]["ddr_bytes_out"])]
    assert not off, off
    total = sum(L["ddr_bytes_in"] + L["ddr_bytes_out"] for L in layers.values())
    assert est.ddr_bytes == pytest.approx(total, rel=0.01)
    assert {e.name for e in est.layers} <= set(layers)


def test_caches_do_not_change_the_answer(models):
    """A geometry met again, and one that differs only in DMA depth, give what a fresh
    estimator gives."""
    qg = models["resnet50-reduced"].qg
    small = load_config("small")
    k4 = dataclasses.replace(small, dma_outstanding=4, name="small-k4")
    e = Estimator(qg)
    first, _, k4_cached = e.estimate(small), e.estimate(load_config("medium")), e.estimate(k4)
    again = e.estimate(small)
    assert again.cycles == first.cycles == Estimator(qg).estimate(small).cycles
    assert k4_cached.cycles == Estimator(qg).estimate(k4).cycles
    assert k4_cached.cycles < first.cycles          # more bursts in flight: a faster load channel
    assert all(L.bound in BOUNDS for L in first.layers)
    assert first.macs == sum(int(L["macs"]) for L in compile_qgraph(qg, small).meta["layers"])


def test_refusal_names_the_layer(models):
    """A config too small for a layer: the back end's CompileError naming it."""
    cfg = dataclasses.replace(load_config("small"), acc_depth_rows=1, name="tiny-acc")
    with pytest.raises(CompileError, match=r"QConv '.*' .*cannot be tiled"):
        Estimator(models["digits"].qg).estimate(cfg)


def test_true_compulsory_traffic_and_floor(models):
    """meta["stats"]["true_compulsory"]: unpadded int8 bytes of the graph as given, by hand."""
    md, cfg = models["resnet50-reduced"], load_config("small")
    b = compile_qgraph(md.qg, cfg)
    tc, qg = b.meta["stats"]["true_compulsory"], md.qg
    n = {k: int(np.prod(t.shape)) for k, t in qg.tensors.items()}
    moving = [op for op in qg.ops if any(op.name in (L["name"], *L.get("fused", ())) and L["instr_end"] > L["instr_begin"]
                                         for L in b.meta["layers"])]
    assert any(L.get("fused") for L in b.meta["layers"])        # a Conv and Add fused count as both
    assert tc["input"] == 3 * 32 * 32                      # the 32x32 RGB image, not its im2col
    assert tc["weights"] == sum(op.weight.size for op in qg.ops if hasattr(op, "weight"))
    assert tc["writes"] == sum(n[op.out] for op in moving)
    assert tc["reads"] == sum(n[qg.resolve(t)] for op in moving for t in dict.fromkeys(op.inputs))
    assert tc["total"] == tc["weights"] + tc["input"] + tc["writes"] + tc["reads"]
    peak = cfg.ddr_beat_bytes * cfg.clk_ddr.freq_mhz / cfg.clk_core.freq_mhz
    macs = sum(L["macs"] for L in b.meta["layers"])
    assert tc["floor_cycles"] == round(max(macs / cfg.pes, tc["total"] / peak))
    assert (tc["floor_compute_cycles"], tc["floor_ddr_cycles"]) == (round(macs / cfg.pes), round(tc["total"] / peak))
    assert tc["ddr_bytes_per_cycle"] == peak


def test_layer_compulsory_bytes_by_hand(models):
    """meta["layers"][i]["compulsory_bytes"]: a plain conv's weights, input and output; a fused
    Conv and Add's weights, the conv's input, the skip operand and the Add's output (the tensor
    the conv hands the Add never reaches DDR), unpadded int8 bytes of the graph as given."""
    md, cfg = models["resnet50-reduced"], load_config("small")
    b = compile_qgraph(md.qg, cfg)
    qg = md.qg
    n = {k: int(np.prod(t.shape)) for k, t in qg.tensors.items()}
    ops = {op.name: op for op in qg.ops}
    first = next(L for L in b.meta["layers"] if L["op"].startswith("QConv"))
    group = [ops[x] for x in first.get("fused", [first["name"]])]      # (a fused pool: its output)
    assert group[0].inputs[0] == qg.inputs[0]             # the image, not its im2col (the host's)
    assert first["compulsory_bytes"] == group[0].weight.size + 3 * 32 * 32 + n[qg.resolve(group[-1].out)]
    fused = next(L for L in b.meta["layers"] if L["op"] == "QConvAdd")
    c, add = (ops[x] for x in fused["fused"])
    skip = next(qg.resolve(t) for t in add.inputs if qg.resolve(t) != qg.resolve(c.out))
    assert fused["compulsory_bytes"] == c.weight.size + n[qg.resolve(c.inputs[0])] + n[skip] + n[qg.resolve(add.out)]
    plain = next(L for L in b.meta["layers"] if L["op"] == "QConv" and L is not first and ops[L["name"]].strides == (1, 1))
    p = ops[plain["name"]]
    assert plain["compulsory_bytes"] == p.weight.size + n[qg.resolve(p.inputs[0])] + n[qg.resolve(p.out)]
    assert all(("compulsory_bytes" in L) == (L["instr_end"] > L["instr_begin"]) for L in b.meta["layers"])


def _direct(qg, cfg):
    """The estimate with no cache at all: the back end's layout, each op's tiling and work hook
    called on ``cfg`` itself, layer by layer."""
    dg = pipeline.host_transforms(pipeline.DeviceGraph(qg, cfg, pipeline.BackendOptions()))
    lp = pipeline.layout(dg)
    layers, runs = [], []
    for op, orig in zip(lp.qg.ops, lp.graph.qg.ops):
        dev = OP_TABLE.device(op)
        w = (dev.work or generic_work)(op, lp.tensors, dev.tile(op, lp.tensors, cfg), cfg)
        runs.append((op, w is not None))
        if w is not None:
            layers.append((op.name, type(op).__name__, w, int(dev.macs(orig, lp.graph.qg))))
    return _Geometry(layers, after=last_producers(runs)).evaluate(cfg, DmaTiming(cfg), Timebase(cfg).core.period_ps,
                                                                   _prices(cfg))


@pytest.mark.parametrize("hw", ["small", "small_wide", "wide"])
def test_drained_and_exposed_stores_are_the_layers_stores(models, hw):
    """The STOREs a conv's work record puts on the pipeline's drain and on the MXU's path are
    STOREs the layer makes (a size among ``stores``): on a wide array a 64-channel output is one
    of the accumulator row's ``requant_planes`` planes, so a chunk STOREs one plane, not four (it
    was priced as four: ResNet-50 on 64x256 +17 % over SimPy, its 3x3 convs +72 %)."""
    cfg = load_config(hw)
    dg = pipeline.host_transforms(pipeline.DeviceGraph(models["resnet50-reduced"].qg, cfg, pipeline.BackendOptions()))
    lp = pipeline.layout(dg)
    for op in lp.qg.ops:
        dev = OP_TABLE.device(op)
        if dev.conv_shape is None:
            continue
        w = dev.work(op, lp.tensors, dev.tile(op, lp.tensors, cfg), cfg)
        bad = (set(w.drain_bursts) | set(w.exposed_stores)) - set(w.stores)
        assert not bad, (op.name, bad, w.stores)


def _same(a, b) -> bool:
    """Two Estimates with bit-identical per-layer arrays and totals."""
    return a.names == b.names and a.total_cycles == b.total_cycles and all(np.array_equal(getattr(a, f), getattr(b, f))
                                      for f in ("layer_cycles", "load_bytes", "store_bytes", "layer_macs",
                                                "bound_index", "layer_energy_uj"))


def test_memoised_stages_give_a_fresh_estimators_numbers(models):
    """An Estimator that has met a grid of configs (arrays, SRAM, banks, accumulator, DDR latency,
    clocks, DMA depth: layouts, tilings and work records reused across geometries and layers)
    gives each config exactly what the back end's stages give it uncached, whatever the order
    the points come in."""
    qg = models["resnet50-reduced"].qg
    grid = {"array": ["8x8", "16x16", "8x32"], "sram": ["32K", "64K"], "banks": [4, 8], "acc_depth": [256, 1024],
            "ddr_latency": [10, 40], "core_mhz": [500, 1000], "outstanding": [2, 4]}
    cfgs = [c.cfg for c in sweep.candidates("small", grid, []) if c.cfg]
    assert len(cfgs) > 100
    forward, backward = Estimator(qg), Estimator(qg)
    ahead = [forward.estimate(c) for c in cfgs]
    behind = [backward.estimate(c) for c in reversed(cfgs)][::-1]
    for c, a, b in zip(cfgs[::17], ahead[::17], behind[::17]):
        assert _same(a, b) and _same(a, _direct(qg, c)), c.name
    assert all(_same(a, b) for a, b in zip(ahead, behind))
    # the tilings were shared: tiler calls (conv-tiled ops: candidate tables looked up) per signature, not per layer
    assert len(forward._tilings) + len(forward._conv_keys) < len(cfgs) * len(qg.ops) / 4


@pytest.mark.parametrize("hw", ["small", "medium", "seed", "small_wide"])
def test_conv_tables_read_no_ddr_timing(hw):
    """``Estimator._conv_tiling`` keeps a conv's ``conv_candidates_key`` per timing group: the key
    reads none of the fields ``_timing_group`` drops (DDR timing, clocks, DMA depth, costs)."""
    for skip, pool in ((False, None), (True, None), (False, ((3, 3), (2, 2), (1, 1, 1, 1), (14, 14)))):
        view = ConfigReads(load_config(hw))
        tiling.conv_candidates_key((3, 3), (1, 1), 64, 96, 28, 28, view, skip, pool)
        assert view.names and not view.names & set(_TIMING + _TIMING_ONLY), view.names


def test_channel_sums_time_each_instruction_as_dma_timing():
    """``_Channel.sums`` (a DMA timing's table of 0 .. EXACT_BURSTS bursts, longer instructions
    extrapolated from its last): per set and layer the sum of count x ``load_ps_array`` /
    ``store_ps_array`` of its instructions, the first set's each plus a DMA cycle, in the order of
    the layer's map: the very values, for two timings at once."""
    from tpucompile.backend.estimate import _Channel, _Flat, _Flats
    from tpusim.arch.dma_timing import EXACT_BURSTS
    per_layer = [_Flat._sets({1: 3, EXACT_BURSTS: 2, EXACT_BURSTS + 70: 1}, {7: 1}, {}),
                 _Flat._sets({2 * EXACT_BURSTS + 5: 4}, {}, {EXACT_BURSTS + 1: 2, 30: 1})]
    dts = [DmaTiming(load_config("seed")), DmaTiming(dataclasses.replace(load_config("small"), ddr_latency_cycles=37))]
    flats = _Flats()
    for i, channel in enumerate(("load", "store")):
        got = _Channel(per_layer).sums([flats.tables(dt)[i] for dt in dts])
        for k, dt in enumerate(dts):
            ps_of = dt.load_ps_array if channel == "load" else dt.store_ps_array
            for layer, (bursts, counts, sets) in enumerate(per_layer):
                for s in range(3):
                    want = 0.0
                    for b, n in zip(bursts[sets == s], counts[sets == s]):
                        want += n * (ps_of(np.array([b]))[0] + (float(dt.dma.period_ps) if s == 0 else 0.0))
                    assert got[s][k][layer] == want, (channel, k, layer, s)


def test_layers_overlap_as_the_engines_allow():
    """``_Geometry.overlap``: a layer that does not read the one before it starts under all of
    its drain, one that reads it under READ_OVERLAP of it; none ends before the one before it.
    ``last_producers`` follows views (ops without work) to the layers that made their inputs."""
    from types import SimpleNamespace

    from tpucompile.backend.estimate import READ_OVERLAP
    c, drain, ds, comp = (np.array(v, dtype=np.float64) for v in ([100, 80, 60], [40, 30, 20], [10, 10, 10],
                                                                  [50, 50, 50]))
    chain = SimpleNamespace(after=(-1, 0, 1))
    assert _Geometry.overlap(chain, c, drain, ds, comp) == 100 + 80 - READ_OVERLAP * 40 + 60 - READ_OVERLAP * 30
    # layer 1 reads only graph inputs: it starts at 100 - 40; layer 2 reads layer 0 (ended at 100)
    fork = SimpleNamespace(after=(-1, -1, 0))
    end1 = max(100 - 40 + 80, 100 - 10 + 50, 100)
    assert _Geometry.overlap(fork, c, drain, ds, comp) == max(max(end1 - 30, 100) + 60, end1 - 10 + 50, end1)
    op = lambda out, *inputs: SimpleNamespace(out=out, inputs=inputs)      # noqa: E731
    ops = [(op("a", "x"), True), (op("v", "a"), False), (op("b", "x"), True), (op("c", "v"), True),
           (op("d", "b", "c"), True)]
    assert last_producers(ops) == (-1, -1, 0, 2)


def test_estimate_many_gives_one_estimate_at_a_time(models):
    """``estimate_many`` (the sweep's path: configs differing only in DDR timing and clocks
    grouped, the conv tiler weighing a group's prices at once) gives each config what a fresh
    Estimator gives it one at a time with the tiler's caches emptied, refusals as the same
    CompileError; in the order given, whatever the order of the groups."""
    qg = models["resnet50-reduced"].qg
    grid = {"array": ["8x8", "8x32"], "sram": ["32K", "64K"], "acc_depth": [256, 1024],
            "ddr_latency": [10, 40, 80], "core_mhz": [250, 500, 1000], "outstanding": [2, 4]}
    cfgs = [c.cfg for c in sweep.candidates("small", grid, []) if c.cfg]
    tiny = dataclasses.replace(load_config("small"), acc_depth_rows=1, name="tiny-acc")
    cfgs = cfgs[1::2] + [tiny] + cfgs[::2]                   # groups interleaved, one refusal
    tiling.conv_candidates.cache_clear()
    tiling._PICKS.clear()
    many = Estimator(qg).estimate_many(cfgs)
    ahead = dict(tiling._PICKS)
    tiling.conv_candidates.cache_clear()
    tiling._PICKS.clear()
    one = Estimator(qg)
    for cfg, got in zip(cfgs, many):
        try:
            want = one.estimate(cfg)
        except CompileError as e:
            assert isinstance(got, CompileError) and str(got) == str(e) and "cannot be tiled" in str(e), cfg.name
            continue
        assert not isinstance(got, CompileError) and got.config == cfg.name and _same(got, want), cfg.name
    # every pick one at a time made was made (alike) by estimate_many, ahead or in turn (ahead also a
    # few at prices of the group no config of it needed at that table)
    assert tiling._PICKS and all(ahead.get(k) == v for k, v in tiling._PICKS.items())
    assert all(_same(many[n], _direct(qg, cfgs[n])) for n in (0, len(cfgs) // 3, -1))
