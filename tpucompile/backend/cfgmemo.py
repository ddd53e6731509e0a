"""Memoisation keyed on exactly the configuration attributes a computation reads.

``ReadMemo.get(key, cfg, fn)`` calls ``fn`` with a ``ConfigReads`` view of ``cfg`` that records
every attribute read (fields and derived properties alike, by name), and stores the result under
``key`` and the values of those attributes. A later configuration that agrees with it on every one
of them gets the stored result: ``fn`` is deterministic in ``key`` and the values it reads, so it
would take the same path and return the same thing. A sweep over DDR latency thus reuses every
result that never looked at DDR latency, whatever the function and however it reads the config.

The view is not hashable (a cache below ``fn`` keyed on the whole config would hide its reads:
TypeError). Results must not keep the view to read later (they would read the first config). A
call that raises is not stored.
"""
from __future__ import annotations

_MISS = object()


def _values(cfg, names: tuple) -> tuple:
    """The values of the attributes ``names`` of ``cfg`` (``_MISS`` for one it lacks)."""
    return tuple(getattr(cfg, n, _MISS) for n in names)


class ConfigReads:
    """A read-only view of a configuration that records the names of the attributes read (the
    first read of each goes through ``__getattr__``, which keeps the value on the view: later
    reads are plain attribute reads)."""

    __hash__ = None              # type: ignore[assignment]

    def __init__(self, cfg) -> None:
        self._cfg = cfg
        self.names: set = set()

    def __getattr__(self, name: str):
        value = getattr(self._cfg, name)
        self.names.add(name)
        self.__dict__[name] = value
        return value


class ReadMemo:
    """Results of ``fn(cfg)`` per static key, each reused for every config that agrees with the
    one it was computed on in the attributes ``fn`` read (module docstring)."""

    def __init__(self) -> None:
        self._reads: dict = {}         # key -> the distinct tuples of attribute names read
        self._results: dict = {}       # (key, names, values) -> result
        self._cfg, self._values = None, {}   # the last config met: names -> its values

    def get(self, key, cfg, fn):
        """``fn(view of cfg)``, or the result of an earlier call under ``key`` whose reads ``cfg``
        matches. ``key`` must be hashable and name everything else ``fn`` depends on."""
        if cfg is not self._cfg:
            self._cfg, self._values = cfg, {}
        for names in self._reads.get(key, ()):
            out = self._results.get((key, names, self._values_of(cfg, names)), _MISS)
            if out is not _MISS:
                return out
        view = ConfigReads(cfg)
        out = fn(view)
        names = tuple(sorted(view.names))
        known = self._reads.setdefault(key, [])
        if names not in known:
            known.append(names)
        self._results[(key, names, self._values_of(cfg, names))] = out
        return out

    def _values_of(self, cfg, names: tuple) -> tuple:
        """``_values(cfg, names)``, computed once per config met in a row."""
        v = self._values.get(names)
        if v is None:
            v = self._values[names] = _values(cfg, names)
        return v

    def __len__(self) -> int:
        return len(self._results)


__all__ = ["ConfigReads", "ReadMemo"]
