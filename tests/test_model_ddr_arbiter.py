"""DDR arbiter (spec v2, pipelined bus): round robin among fetch (0), DMA read (1), DMA write (2);
per-requester in-order queues; next grant at g_prev + B_prev; done = g + L + B - 1.

Config 'small': DDR 1250 ps / phase 100 (edge k at 100 + 1250k), beat 16 bytes, latency L = 8,
dma.outstanding K = 2 (DMA request queues hold up to 2 entries, fetch 1).
"""
import simpy

from tpusim.arch.config import load_config
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
    grants rotate 0, 1, 2, 0, ... and, the bus being pipelined, each comes at g_prev + B_prev
    (B = 4 beats): 1, 5, 9, ... while up to ceil(L / B) + 1 = 3 transactions are in flight."""
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
    assert [g for g, _, _ in log] == [1 + b * i for i in range(12)]
    for g, _, done in log:
        assert done == g + L + b - 1            # 1 -> 12, 5 -> 16, 9 -> 20, ...
    assert perf["ddr_busy_cycles"] == 12 * b    # v2: sum of B (cycles the bus carries commands)
    # g - v: first round (all visible at 1) 0 + 4 + 8; then each re-request, launched at the
    # edge after its grant g (visible g + 2), is granted 3 * B = 12 later: 9 x (12 - 2)
    assert perf["ddr_arb_wait_cycles"] == 0 + 4 + 8 + 9 * 10
    assert perf["fetch_bytes"] == 4 * 64 and perf["ddr_read_bytes"] == 4 * 64
    assert perf["ddr_write_bytes"] == 4 * 64


def test_two_bursts_overlap_on_the_bus():
    """DMA read posts two bursts back to back (launched at DDR edges 0 and 1, visible 1 and 2).
    Burst 0: 64 bytes, B = 4, granted g0 = 1, done0 = 1 + 8 + 4 - 1 = 12.
    Burst 1: 32 bytes at 0x1008 (straddles: B = (0x1027 // 16) - (0x1008 // 16) + 1 = 3), waits
    in the in-order queue until the bus is free at g0 + B0 = 5: g1 = 5 (while burst 0 is still in
    flight), done1 = 5 + 8 + 3 - 1 = 15. Completions in grant order; the bus is free at 5 + 3 = 8,
    so a fetch launched at 6 (visible 7) is granted at 8: done 8 + 8 + 1 - 1 = 16."""
    env, clocks, perf, arb = _setup()
    ddr = clocks.ddr
    log = []

    def dma():
        evs = [arb.request(DMA_READ, ddr.edge(0), ddr, 0x1000, 64),
               arb.request(DMA_READ, ddr.edge(1), ddr, 0x1008, 32)]
        for ev in evs:
            g, done = yield ev
            log.append(("rd", ddr.cycle_of(g), ddr.cycle_of(done)))

    def fetch():
        yield env.timeout(ddr.edge(6) - env.now)
        g, done = yield arb.request(FETCH, ddr.edge(6), ddr, 0x40, 16)
        log.append(("fetch", ddr.cycle_of(g), ddr.cycle_of(done)))

    env.process(dma())
    env.process(fetch())
    env.run()
    assert sorted(log, key=lambda x: x[1]) == [("rd", 1, 12), ("rd", 5, 15), ("fetch", 8, 16)]
    assert perf["ddr_busy_cycles"] == 4 + 3 + 1
    assert perf["ddr_arb_wait_cycles"] == 0 + (5 - 2) + (8 - 7)


def test_round_robin_is_over_requesters_not_requests():
    """DMA read queues two requests (visible 1 and 2), fetch one (launched 2, visible 3).
    Read 0 granted at 1 (B = 4, bus free at 5). At 5 the search starts after requester 1: DMA write
    (nothing), then fetch -> fetch granted at 5 although read 1 is older (visible 2); fetch B = 1,
    bus free at 6: read 1 granted at 6."""
    env, clocks, perf, arb = _setup()
    ddr = clocks.ddr
    log = []

    def dma():
        evs = [arb.request(DMA_READ, ddr.edge(0), ddr, 0x1000, 64),
               arb.request(DMA_READ, ddr.edge(1), ddr, 0x1040, 64)]
        for ev in evs:
            g, _ = yield ev
            log.append((DMA_READ, ddr.cycle_of(g)))

    def fetch():
        yield env.timeout(ddr.edge(2) - env.now)
        g, _ = yield arb.request(FETCH, ddr.edge(2), ddr, 0, 16)
        log.append((FETCH, ddr.cycle_of(g)))

    env.process(dma())
    env.process(fetch())
    env.run()
    assert sorted(log, key=lambda x: x[1]) == [(DMA_READ, 1), (FETCH, 5), (DMA_READ, 6)]
    assert perf["ddr_arb_wait_cycles"] == 0 + (5 - 3) + (6 - 2)


def test_round_robin_starts_after_last_granted():
    """DMA read is granted first (alone, 64 bytes: B = 4, bus free at 1 + 4 = 5); fetch (visible
    3) and DMA write (visible 4) wait for the bus: the search starts after requester 1, so DMA
    write (2) goes first at 5 (B = 1, bus free at 6), then fetch at 6."""
    env, clocks, perf, arb = _setup()
    ddr = clocks.ddr
    log = []

    def req(rid, launch_edge, nbytes):
        t = ddr.edge(launch_edge)
        yield env.timeout(t - env.now)
        g, _ = yield arb.request(rid, t, ddr, 0, nbytes)
        log.append((rid, ddr.cycle_of(g)))

    env.process(req(DMA_READ, 0, 64))    # visible 1, granted 1
    env.process(req(FETCH, 2, 16))       # visible 3
    env.process(req(DMA_WRITE, 3, 16))   # visible 4
    env.run()
    assert log == [(DMA_READ, 1), (DMA_WRITE, 5), (FETCH, 6)]
    # arbitration wait: write 5 - 4 = 1, fetch 6 - 3 = 3
    assert perf["ddr_arb_wait_cycles"] == 1 + 3


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
