"""DDR arbiter: round robin among fetch (0), DMA read (1), DMA write (2); burst duration.

Config 'small': DDR 1250 ps / phase 100 (edge k at 100 + 1250k), beat 16 bytes, latency L = 8.
"""
import simpy

from tpusim.config import load_config
from tpusim.models.common import Clocks
from tpusim.models.ddr_arbiter import DMA_READ, DMA_WRITE, FETCH, DdrArbiter
from tpusim.models.perf import PerfCounters

CFG = load_config("small")
L = CFG.ddr_latency_cycles


def _setup():
    env = simpy.Environment()
    clocks = Clocks(CFG)
    perf = PerfCounters()
    return env, clocks, perf, DdrArbiter(env, clocks, CFG, perf)


def test_beats_count_partial_beats():
    _, _, _, arb = _setup()
    assert arb.beats(0x1000, 64) == 4
    assert arb.beats(0x1008, 16) == 2       # straddles a 16-byte beat
    assert arb.beats(0x1008, 8) == 1


def test_round_robin_under_full_load():
    """Three requesters re-request at the DDR edge after each grant: always pending, so the
    grants rotate 0, 1, 2, 0, ... and each comes at the previous done + 1."""
    env, clocks, perf, arb = _setup()
    ddr = clocks.ddr
    log = []

    def requester(rid, n_bytes):
        t = ddr.edge(0)                    # launched at DDR edge 0 -> visible at edge 1
        for _ in range(4):
            if t > env.now:
                yield env.timeout(t - env.now)
            g, done = yield arb.request(rid, t, ddr, 0x1000, n_bytes)
            log.append((ddr.cycle_of(g), rid, ddr.cycle_of(done)))
            t = g + ddr.period_ps          # next request launched right after the grant

    for rid in (DMA_WRITE, FETCH, DMA_READ):     # process creation order must not matter
        env.process(requester(rid, 64))
    env.run()
    order = [rid for _, rid, _ in log]
    assert order == [FETCH, DMA_READ, DMA_WRITE] * 4
    b = 4                                       # 64 bytes / 16-byte beats
    expect_g = 1
    for g, _, done in log:
        assert g == expect_g and done == g + L + b - 1
        expect_g = done + 1
    assert perf["ddr_busy_cycles"] == 12 * (L + b)
    assert perf["fetch_bytes"] == 4 * 64 and perf["ddr_read_bytes"] == 4 * 64
    assert perf["ddr_write_bytes"] == 4 * 64


def test_round_robin_starts_after_last_granted():
    """DMA read is granted first (alone); then fetch and DMA write are both visible while the
    channel is busy: the search starts after requester 1, so DMA write (2) goes before fetch."""
    env, clocks, perf, arb = _setup()
    ddr = clocks.ddr
    log = []

    def req(rid, launch_edge):
        t = ddr.edge(launch_edge)
        yield env.timeout(t - env.now)
        g, _ = yield arb.request(rid, t, ddr, 0, 16)
        log.append((rid, ddr.cycle_of(g)))

    env.process(req(DMA_READ, 0))    # visible 1, granted 1, B = 1: done 1 + 8 = 9, free at 10
    env.process(req(FETCH, 2))       # visible 3
    env.process(req(DMA_WRITE, 3))   # visible 4
    env.run()
    assert log == [(DMA_READ, 1), (DMA_WRITE, 10), (FETCH, 19)]
    # arbitration wait: write 10 - 4 = 6, fetch 19 - 3 = 16
    assert perf["ddr_arb_wait_cycles"] == 6 + 16


def test_cross_domain_request_visibility():
    """A request launched at core edge 0 (0 ps) is visible at the 3rd DDR edge after it:
    100, 1350, 2600 -> DDR edge 2."""
    env, clocks, perf, arb = _setup()
    out = []

    def req():
        g, done = yield arb.request(FETCH, 0, clocks.core, 0, 64)
        out.append((g, done))

    env.process(req())
    env.run()
    assert out == [(clocks.ddr.edge(2), clocks.ddr.edge(2 + L + 4 - 1))]
