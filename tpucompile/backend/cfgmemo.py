"""Memoisation keyed on exactly the configuration attributes a computation reads.

``ReadMemo.get(key, cfg, fn)`` calls ``fn`` with a ``ConfigReads`` view of ``cfg`` that records
every attribute read (fields and derived properties alike, by name), and stores the result under
``key`` and the values of those attributes. A later configuration that agrees with it on every one
of them gets the stored result: ``fn`` is deterministic in ``key`` and the values it reads, so it
would take the same path and return the same thing. A sweep over DDR latency thus reuses every
result that never looked at DDR latency, whatever the function and however it reads the config.

A call under a key met before starts from a view holding the attributes the key's first call
read (their values on the new config; recorded as read even if this call does not read them: a
superset of the reads only makes the stored key stricter, never a wrong reuse), so a recomputation
reads most of them as plain attributes. Values are interned per config met in a row: a lookup
hashes small integers, not the values (clock records, tables) again.

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
    reads are plain attribute reads). ``known``: attribute values to start from, recorded as
    read."""

    __hash__ = None              # type: ignore[assignment]

    def __init__(self, cfg, known: dict | None = None) -> None:
        self._cfg = cfg
        self.names: set = set()
        if known:
            self.__dict__.update(known)
            self.names.update(known)

    def __getattr__(self, name: str):
        value = getattr(self._cfg, name)
        self.names.add(name)
        self.__dict__[name] = value
        return value


class ReadMemo:
    """Results of ``fn(cfg)`` per static key, each reused for every config that agrees with the
    one it was computed on in the attributes ``fn`` read (module docstring)."""

    def __init__(self) -> None:
        self._reads: dict = {}         # key -> [(names id, names)]: the distinct tuples of names read
        self._names: dict = {}         # names tuple -> its id (an int)
        self._results: dict = {}       # (key, names id, values id) -> result
        self._ids: dict = {}           # values tuple -> its id (an int)
        self._cfg, self._values = None, {}   # the last config met: names id -> (values id, values)
        self._known: dict = {}         # the last config met: names id -> {name: value} (None: one missing)

    def get(self, key, cfg, fn):
        """``fn(view of cfg)``, or the result of an earlier call under ``key`` whose reads ``cfg``
        matches. ``key`` must be hashable and name everything else ``fn`` depends on."""
        if cfg is not self._cfg:
            self._cfg, self._values, self._known = cfg, {}, {}
        reads = self._reads.get(key)
        known = None
        if reads:
            seen, results = self._values, self._results
            for nid, names in reads:
                v = seen.get(nid) or self._values_of(cfg, nid, names)      # (values id, values)
                out = results.get((key, nid, v[0]), _MISS)
                if out is not _MISS:
                    return out
            nid, names = reads[0]
            vid, values = seen[nid]     # (worked out in the loop)
            known = self._known.get(nid, _MISS)
            if known is _MISS:          # (a view copies it: shared by the calls on this config)
                known = self._known[nid] = None if _MISS in values else dict(zip(names, values))
        view = ConfigReads(cfg, known)
        out = fn(view)
        if known is None or len(view.names) > len(known):      # read something new
            names = tuple(sorted(view.names))
            nid = self._names.setdefault(names, len(self._names))
            reads = self._reads.setdefault(key, [])
            if (nid, names) not in reads:
                reads.append((nid, names))
            vid = self._values_of(cfg, nid, names)[0]
        self._results[(key, nid, vid)] = out
        return out

    def _values_of(self, cfg, nid: int, names: tuple) -> tuple:
        """(values id, ``_values(cfg, names)``) of the names tuple ``nid``, computed once per
        config met in a row."""
        v = self._values.get(nid)
        if v is None:
            values = _values(cfg, names)
            v = self._values[nid] = (self._ids.setdefault(values, len(self._ids)), values)
        return v

    def reads_nothing(self, key) -> bool:
        """Whether the calls under ``key`` read no attribute of their config (one at least was
        stored): its result then holds for every config."""
        reads = self._reads.get(key)
        return bool(reads) and all(not names for _, names in reads)

    def __len__(self) -> int:
        return len(self._results)


__all__ = ["ConfigReads", "ReadMemo"]
