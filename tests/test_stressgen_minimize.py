"""The minimiser: ddmin, token-consistent instruction removal, size shrinking; on real generated
programs with a pure-Python failure predicate, and on the RTL with an injected bug."""
from __future__ import annotations

import pytest

from stressgen.minimize import MinimizeError, ddmin, drop_instructions, minimize, program_size, token_pairs
from tpusim.arch.config import load_config
from tpusim.arch.isa import Engine, make

L, S, M, V = (1 << e for e in (Engine.LOAD, Engine.STORE, Engine.MXU, Engine.VPU))


def test_ddmin_finds_the_one_minimal_subset():
    calls = []

    def fails(xs):
        calls.append(list(xs))
        return 3 in xs and 17 in xs and 40 in xs

    items = list(range(64))
    assert ddmin(items, fails) == [3, 17, 40]
    assert len(calls) < 200


def test_ddmin_keeps_order_and_stops_on_budget():
    assert ddmin([5, 4, 3, 2, 1], lambda xs: 4 in xs and 1 in xs) == [4, 1]
    n = {"k": 0}

    def fails(xs):
        n["k"] += 1
        return 0 in xs

    got = ddmin(list(range(100)), fails, out_of_budget=lambda: n["k"] >= 3)
    assert 0 in got and n["k"] == 3


def _chain():
    return [
        make("DMA_LOAD", signal=M, inner_bytes=8, count1=1, count2=1),          # 0: LOAD -> MXU
        make("LOAD_WEIGHTS", wait=L),                                          # 1
        make("MATMUL", signal=V, count_x=1, count_y=1, stride_x=1, stride_y=1),  # 2: MXU -> VPU
        make("DMA_LOAD", signal=M, inner_bytes=8, count1=1, count2=1),          # 3: LOAD -> MXU
        make("REQUANT", wait=M, signal=S, count=1),                            # 4: wait 2, -> STORE
        make("MATMUL", wait=L, count_x=1, count_y=1),                          # 5: waits on 3
        make("DMA_STORE", wait=V, inner_bytes=8, count1=1, count2=1),          # 6: waits on 4
        make("HALT"),
    ]


def test_token_pairs_follow_program_order():
    assert sorted(token_pairs(_chain())) == [(0, 1, 0, 2), (2, 4, 2, 3), (3, 5, 0, 2), (4, 6, 3, 1)]


def test_drop_clears_the_partner_end_of_each_token():
    prog = _chain()
    out = drop_instructions(prog, {0})            # first load gone: LOAD_WEIGHTS no longer waits
    assert out[0].op == "LOAD_WEIGHTS" and out[0].wait == 0
    assert out[4].op == "MATMUL" and out[4].wait == L   # the second pair is untouched
    out = drop_instructions(prog, {4})            # REQUANT gone: MATMUL 2 no longer signals VPU,
    assert out[2].signal == 0                     # the store no longer waits on VPU
    assert out[5].op == "DMA_STORE" and out[5].wait == 0
    out = drop_instructions(prog, {1, 2})         # both ends dropped: nothing else changes
    assert [i.op for i in out] == ["DMA_LOAD", "DMA_LOAD", "REQUANT", "MATMUL", "DMA_STORE", "HALT"]
    assert out[0].signal == 0 and out[2].wait == 0 and out[2].signal == S
    # the result never leaves a wait without a send, nor a send without a wait
    for drop in [{0}, {2}, {4}, {0, 3}, {1, 4, 6}]:
        out = drop_instructions(prog, drop)
        nsig = sum(bin(i.signal).count("1") for i in out)
        nwait = sum(bin(i.wait).count("1") for i in out)
        assert nsig == nwait == len(token_pairs(out))


# --------------------------------------------------------------- real generated programs
CFG = load_config("small")


def _odd_matmul(prog):
    """Pure-Python stand-in for a bug: 'fails' iff a MATMUL has an odd vector count."""
    odd = [i for i in prog.instrs if i.op == "MATMUL" and (i["count_x"] * i["count_y"]) % 2 == 1]
    return ("odd_matmul", None) if odd else None


def _generated_with_odd_matmul(n_wanted=3, min_instrs=20):
    from stressgen.gen import generate
    out = []
    for seed in range(1, 400):
        p = generate(seed, CFG)
        if _odd_matmul(p) and len(p.instrs) >= min_instrs:
            big = [i for i in p.instrs if i.op == "MATMUL" and i["count_x"] * i["count_y"] > 1
                   and (i["count_x"] * i["count_y"]) % 2]
            if big:
                out.append(p)
        if len(out) == n_wanted:
            return out
    pytest.fail("the generator made too few programs with a MATMUL of odd vector count > 1")


def test_minimize_real_programs_with_a_python_predicate():
    from stressgen.gen import validate
    for prog in _generated_with_odd_matmul():
        res = minimize(prog, CFG, _odd_matmul)
        small = res.prog
        validate(small, CFG)
        assert _odd_matmul(small) == ("odd_matmul", None)
        from stressgen.coverage import bins_of
        assert small.bins == bins_of(small, CFG) != prog.bins   # the reproducer's own coverage
        assert res.before == program_size(prog.instrs)
        assert res.after.instrs < res.before.instrs and res.after.work_units < res.before.work_units
        mm = [i for i in small.instrs if i.op == "MATMUL"]
        # the size pass shrank the odd MATMUL to one vector (1 is the smallest odd count)
        assert any(i["count_x"] * i["count_y"] == 1 for i in mm)
        assert small.instrs[-1].op == "HALT"
        # 1-minimal: dropping any single remaining instruction makes it pass or invalid
        for k in range(len(small.instrs) - 1):
            cand = type(small)(**{**small.__dict__, "instrs": drop_instructions(small.instrs, {k})})
            try:
                validate(cand, CFG)
            except Exception:
                continue
            assert _odd_matmul(cand) is None, (k, small.asm())
        print(f"seed {prog.seed}: {res.before} -> {res.after} in {res.tests} tests")


def test_minimize_refuses_a_passing_program():
    from stressgen.gen import generate
    prog = generate(3, CFG)
    with pytest.raises(MinimizeError, match=f"program seed {prog.seed} passes: nothing to minimise"):
        minimize(prog, CFG, lambda p: None)


def test_minimize_respects_its_test_budget():
    prog = _generated_with_odd_matmul(1)[0]
    res = minimize(prog, CFG, _odd_matmul, max_tests=5)
    assert res.budget_exhausted and res.tests <= 6
    assert _odd_matmul(res.prog)


@pytest.mark.rtl
def test_minimize_on_rtl_with_injected_bug(tmp_path):
    """addr36 (DMA DDR address loses bits 39:36): a failing generated program shrinks to a
    handful of instructions that still shows the same failure (same reason, same signal)."""
    from stressgen.gen import generate
    from stressgen.runner import prebuild, run_one
    prebuild(CFG, ("addr36",))
    n = {"k": 0}

    def pred(p):
        n["k"] += 1
        return run_one(p, CFG, tmp_path / f"c{n['k']}", bugs=("addr36",)).signature

    for seed in range(1, 60):
        prog = generate(seed, CFG)
        if any(i.op.startswith("DMA") and i["ddr_addr"] >= 1 << 36 for i in prog.instrs):
            o = run_one(prog, CFG, tmp_path / "orig", bugs=("addr36",))
            if not o.passed:
                break
    else:
        pytest.fail("no generated program with a DMA address >= 2^36 fails on the addr36 RTL")
    res = minimize(prog, CFG, pred, budget_s=240)
    print(f"addr36 seed {seed}: {res.before} -> {res.after}, {res.tests} runs, {res.seconds:.0f} s, "
          f"signature {res.signature}")
    assert res.signature == o.signature
    assert pred(res.prog) == o.signature
    assert res.after.instrs <= 6 < res.before.instrs
