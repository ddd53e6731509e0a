"""tpusim.arch.timebase: exact periods, edge arithmetic, the CDC rule, distinct edges of the seed clocks."""
import dataclasses
import random
import re
from bisect import bisect_right

import pytest

from tpusim.arch.config import ClockConfig, load_config
from tpusim.arch.errors import TimebaseError, TpuError
from tpusim.arch.timebase import CDC_EDGES, PS_PER_US, ClockDomain, Timebase, period_ps

SEED_LCM = 5000  # lcm(1000, 1250, 2500)


@pytest.fixture(scope="module")
def tb():
    return Timebase(load_config("seed"))


def naive_edges(d: ClockDomain, t_end: int) -> list[int]:
    """Every edge of d in [0, t_end), by repeated addition."""
    out, t = [], d.phase_ps
    while t < t_end:
        out.append(t)
        t += d.period_ps
    return out


# ---- period_ps -------------------------------------------------------------------------------
@pytest.mark.parametrize("mhz, ps", [(1, 1_000_000), (1000, 1000), (800, 1250), (400, 2500), (500, 2000),
                                     (250, 4000), (1250, 800), (2000, 500), (1_000_000, 1), (64, 15625)])
def test_period_exact(mhz, ps):
    assert period_ps(mhz) == ps
    assert period_ps(mhz) * mhz == PS_PER_US


@pytest.mark.parametrize("mhz, shown", [(300, "3333.3333333333335"), (3, "333333.3333333333"),
                                        (7, "142857.14285714287"), (1_000_001, "0.999999000001"),
                                        (2_000_000, "0.5"), (666, "1501.5015015015015")])
def test_period_inexact(mhz, shown):
    with pytest.raises(TimebaseError, match=re.escape(
            f"{mhz} MHz has a period of {shown} ps, not a whole number of ps")):
        period_ps(mhz)


@pytest.mark.parametrize("bad", [0, -800, 800.0, "800", None])
def test_period_rejects_non_positive_or_non_int(bad):
    with pytest.raises(TimebaseError, match=re.escape(
            f"clock frequency must be a positive integer of MHz, got {bad!r}")):
        period_ps(bad)


def test_timebase_error_is_tpu_error():
    assert issubclass(TimebaseError, TpuError)


# ---- ClockDomain edge arithmetic -------------------------------------------------------------
D = ClockDomain("ddr", 1250, 100)


def test_edge():
    assert [D.edge(k) for k in range(4)] == [100, 1350, 2600, 3850]


@pytest.mark.parametrize("t, k", [(-5000, 0), (0, 0), (99, 0), (100, 1), (101, 1), (1349, 1), (1350, 2),
                                  (1351, 2), (2599, 2), (2600, 3)])
def test_index_after(t, k):
    assert D.index_after(t) == k


@pytest.mark.parametrize("t, k", [(-5000, 0), (0, 0), (100, 0), (101, 1), (1349, 1), (1350, 1), (1351, 2),
                                  (2600, 2), (2601, 3)])
def test_index_at_or_after(t, k):
    assert D.index_at_or_after(t) == k


@pytest.mark.parametrize("t, n, e", [(0, 1, 100), (0, 2, 1350), (0, 3, 2600), (100, 1, 1350), (100, 3, 3850),
                                     (99, 1, 100), (1349, 2, 2600), (1350, 1, 2600), (-1, 4, 3850),
                                     (10_000, 1, 10_100), (10_100, 5, 16_350)])
def test_next_edge_after(t, n, e):
    assert D.next_edge_after(t, n) == e
    assert e > t


def test_next_edge_after_default_n_is_one():
    assert D.next_edge_after(1350) == 2600


@pytest.mark.parametrize("t, e", [(-3, 100), (0, 100), (100, 100), (101, 1350), (1350, 1350), (1351, 2600)])
def test_edge_at_or_after(t, e):
    assert D.edge_at_or_after(t) == e


@pytest.mark.parametrize("k", [0, 1, 2, 7, 1000])
def test_cycle_of_edges(k):
    assert D.cycle_of(D.edge(k)) == k
    assert D.is_edge(D.edge(k))


@pytest.mark.parametrize("t", [0, 99, 101, 1349, 1351, 1250, -1150, 5000])
def test_cycle_of_non_edge_raises(t):
    assert not D.is_edge(t)
    with pytest.raises(TimebaseError, match=re.escape(
            f"{t} ps is not a rising edge of the ddr clock (period 1250 ps, phase 100 ps)")):
        D.cycle_of(t)


def test_cycle_of_before_phase_raises_even_if_congruent():
    # -1150 = 100 - 1250 would be "edge -1": not an edge
    with pytest.raises(TimebaseError, match=r"-1150 ps is not a rising edge of the ddr clock"):
        D.cycle_of(-1150)


def test_edge_arithmetic_against_naive_enumeration():
    rng = random.Random(1)
    for d in (ClockDomain("a", 1000, 0), ClockDomain("b", 1250, 100), ClockDomain("c", 2500, 50),
              ClockDomain("d", 7, 3)):
        edges = naive_edges(d, 40 * d.period_ps)
        for _ in range(300):
            t = rng.randrange(-2 * d.period_ps, 30 * d.period_ps)
            i = bisect_right(edges, t)             # first edge > t
            assert d.index_after(t) == i
            assert d.next_edge_after(t) == edges[i]
            n = rng.randint(1, 5)
            assert d.next_edge_after(t, n) == edges[i + n - 1]
            j = i - 1 if i > 0 and edges[i - 1] == t else i   # first edge >= t
            assert d.index_at_or_after(t) == j
            assert d.edge_at_or_after(t) == edges[j]
            assert d.is_edge(t) == (t in edges)


# ---- Timebase construction ---------------------------------------------------------------------
def test_seed_domains(tb):
    assert (tb.core.period_ps, tb.core.phase_ps) == (1000, 0)
    assert (tb.ddr.period_ps, tb.ddr.phase_ps) == (1250, 100)
    assert (tb.dma.period_ps, tb.dma.phase_ps) == (2500, 50)
    assert list(tb.domains) == ["core", "ddr", "dma"]
    assert tb.domains["ddr"] is tb.ddr


def test_small_has_same_clocks_as_seed(tb):
    small = Timebase(load_config("small"))
    assert small.domains == tb.domains


def _cfg(**clocks):
    c = load_config("seed")
    return dataclasses.replace(c, **{f"clk_{k}": ClockConfig(*v) for k, v in clocks.items()})


def test_timebase_inexact_period_names_clock():
    with pytest.raises(TimebaseError, match=re.escape(
            "clocks.ddr.freq_mhz: 300 MHz has a period of 3333.3333333333335 ps, not a whole number of ps")):
        Timebase(_cfg(ddr=(300, 100)))


@pytest.mark.parametrize("dom, clk, p", [("core", (1000, 1000), 1000), ("dma", (400, -50), 2500),
                                         ("ddr", (800, 5000), 1250)])
def test_timebase_phase_range(dom, clk, p):
    with pytest.raises(TimebaseError, match=re.escape(
            f"clocks.{dom}.phase_ps must be in [0, {p}) ps, got {clk[1]}")):
        Timebase(_cfg(**{dom: clk}))


@pytest.mark.parametrize("clocks, a, b, pa, pb", [
    ({"ddr": (800, 0)}, "core", "ddr", 0, 0),
    ({"ddr": (800, 750)}, "core", "ddr", 0, 750),
    ({"dma": (400, 500)}, "core", "dma", 0, 500),
    ({"dma": (400, 100)}, "ddr", "dma", 100, 100),
    ({"core": (500, 100), "ddr": (800, 600)}, "core", "ddr", 100, 600),  # gcd(2000, 1250) = 250
])
def test_timebase_coincident_edges(clocks, a, b, pa, pb):
    cfg = _cfg(**clocks)
    with pytest.raises(TimebaseError, match=re.escape(
            f"clocks {a} and {b} share rising edges (phases {pa} and {pb} ps): "
            "choose phases so that no edges coincide")):
        Timebase(cfg)


def test_timebase_coincidence_rule_matches_brute_force():
    """_coincide (gcd rule) agrees with enumerating edges over one LCM period."""
    rng = random.Random(7)
    periods = [1000, 1250, 2500, 2000, 800, 500]
    for _ in range(300):
        pa, pb = rng.choice(periods), rng.choice(periods)
        a = ClockDomain("a", pa, rng.randrange(pa))
        b = ClockDomain("b", pb, rng.randrange(pb))
        horizon = max(a.phase_ps, b.phase_ps) + pa * pb  # >= one lcm after both started
        brute = bool(set(naive_edges(a, horizon)) & set(naive_edges(b, horizon)))
        assert Timebase._coincide(a, b) == brute, (a, b)


# ---- CDC ------------------------------------------------------------------------------------------
def test_cdc_edges_constant():
    assert CDC_EDGES == 3


@pytest.mark.parametrize("t, dst, src, expect", [
    # core edge 0 -> DDR: DDR edges after 0 are 100, 1350, 2600
    (0, "ddr", "core", 2600),
    # core edge 0 -> DMA: 50, 2550, 5050
    (0, "dma", "core", 5050),
    # DDR edge 100 -> core: 1000, 2000, 3000
    (100, "core", "ddr", 3000),
    # DMA edge 50 -> core: 1000, 2000, 3000
    (50, "core", "dma", 3000),
    # DMA edge 50 -> DDR: 100, 1350, 2600
    (50, "ddr", "dma", 2600),
    # DDR edge 1350 -> DMA: 2550, 5050, 7550
    (1350, "dma", "ddr", 7550),
    # core edge 2000 -> DDR: 2600, 3850, 5100
    (2000, "ddr", "core", 5100),
    # core edge 3000 -> DMA: 5050, 7550, 10050
    (3000, "dma", "core", 10050),
    # DDR edge 3850 -> core: 4000, 5000, 6000
    (3850, "core", "ddr", 6000),
    # DMA edge 2550 -> DDR: 2600, 3850, 5100
    (2550, "ddr", "dma", 5100),
    # within one domain: the next edge
    (0, "core", "core", 1000),
    (1000, "core", "core", 2000),
    (1350, "ddr", "ddr", 2600),
    (50, "dma", "dma", 2550),
])
def test_cdc_hand_computed(tb, t, dst, src, expect):
    assert tb.cdc(t, tb.domains[dst], tb.domains[src]) == expect


def test_cdc_without_src_is_cross_domain(tb):
    assert tb.cdc(0, tb.ddr) == 2600
    # even when dst is the launching domain, no src means the synchroniser rule
    assert tb.cdc(1000, tb.core) == 4000


def test_cdc_same_domain_matches_by_name(tb):
    other_core = ClockDomain("core", 1000, 0)
    assert tb.cdc(1000, tb.core, other_core) == 2000


def test_cdc_brute_force(tb):
    rng = random.Random(2024)
    horizon = 40 * SEED_LCM
    edges = {n: naive_edges(d, horizon) for n, d in tb.domains.items()}
    for _ in range(3000):
        t = rng.randrange(0, 30 * SEED_LCM)
        src = rng.choice(list(tb.domains))
        dst = rng.choice(list(tb.domains))
        after = [e for e in edges[dst] if e > t]
        want = after[0] if src == dst else after[2]
        got = tb.cdc(t, tb.domains[dst], tb.domains[src])
        assert got == want, (t, src, dst)
        assert got > t


def test_cdc_brute_force_from_launch_edges(tb):
    """Launches at real source edges (the way the models use it)."""
    rng = random.Random(99)
    horizon = 40 * SEED_LCM
    edges = {n: naive_edges(d, horizon) for n, d in tb.domains.items()}
    for _ in range(2000):
        src = rng.choice(list(tb.domains))
        dst = rng.choice([d for d in tb.domains if d != src])
        t = rng.choice(edges[src][: len(edges[src]) * 3 // 4])
        got = tb.cdc(t, tb.domains[dst], tb.domains[src])
        after = [e for e in edges[dst] if e > t]
        assert got == after[2]
        assert tb.domains[dst].is_edge(got)
        # strictly more than two destination periods, at most three after the launch
        p = tb.domains[dst].period_ps
        assert 2 * p < got - t <= 3 * p


# ---- no shared edges ---------------------------------------------------------------------------
def test_seed_domains_never_share_an_edge(tb):
    horizon = 8 * SEED_LCM
    sets = {n: set(naive_edges(d, horizon)) for n, d in tb.domains.items()}
    assert len(sets["core"]) == 40 and len(sets["ddr"]) == 32 and len(sets["dma"]) == 16
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not sets[a] & sets[b], (a, b)
    # and the pattern repeats every LCM: edges mod 5000 are the same in every period
    for n, s in sets.items():
        first = {t for t in s if t < SEED_LCM}
        assert {t % SEED_LCM for t in s} == first


def test_seed_min_edge_separation(tb):
    """The closest approach between edges of different seed domains is 50 ps (DMA at 50 vs core 0 / DDR 100)."""
    horizon = 4 * SEED_LCM
    allt = sorted((t, n) for n, d in tb.domains.items() for t in naive_edges(d, horizon))
    gaps = [b[0] - a[0] for a, b in zip(allt, allt[1:]) if a[1] != b[1]]
    assert min(gaps) == 50
