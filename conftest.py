"""Repository-wide pytest configuration: the one switch for slow tests.

A test marked ``@pytest.mark.slow`` (full-size runs: the whole ResNet-50 on SimPy, one Verilator
build per injected bug, seed-sized RTL unit benches) is collected but skipped unless pytest is
given ``--slow`` (``make test-slow``). Nothing else (no environment variable) turns them on.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (full-size runs; make test-slow)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with pytest --slow (make test-slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
