"""The stress-campaign results database (SQLite, WAL mode).

One file holds any number of campaigns. Tables:

  meta       key/value: ``schema`` (SCHEMA_VERSION)
  campaigns  id (text), root seed, hw, bug, invalid rate, rtl flag, params JSON, created (epoch s)
  sessions   one row per ``stressgen run`` invocation of a campaign: started / last (epoch s),
             programs finished in it, jobs; programs per hour = finished / session time
  programs   one row per program, primary key (campaign, idx): seed, hw, bug, invalid class,
             status ("pass" | "fail" | "error"), reason, signal (first diverging signal or NULL),
             divergence (text), bins (JSON {bin: hits}), timings (JSON {step: seconds}),
             bundle (path or NULL), n_instrs, wall_s, finished (epoch s), session
  claims     programs being run, primary key (campaign, idx): owner (a random token per
             ``stressgen run`` process), host, pid, pid_start (the owner's process start time),
             until (epoch s: the lease, renewed by the owner while it runs)

A program's row (and its session's counters) is written in ONE transaction when the program
finishes, by the campaign's parent process only (the workers never touch the file). A run killed
at any moment therefore leaves every finished program recorded exactly once and nothing of the
programs in flight, which a restart simply redoes (``done_indices``), together with the programs
whose files could not be written (reason ``cannot write ...``, stressgen.writefail): their rows
are replaced. The WAL is checkpointed after every commit (``wal_autocheckpoint=1``), so it never
holds more than one program's row: little disk, and a disk or file-size limit that is reached
fails one whole transaction (DbError), never leaves half a row.

Two ``stressgen run`` processes on one database split the work through ``claims``: a process
runs a program only after claiming it (``claim``: one transaction; a program with a row or a live
claim of another owner is not claimed), records it and drops the claim in one transaction, drops
its unfinished claims when it stops and renews its lease (``renew``) while it runs. A claim whose
lease expired, or whose owner process is gone (same host, pid not alive or reused), is free
again: the programs of a campaign killed with SIGKILL are redone by the next run.

Errors: ``DbError`` (a TpuError) for a path that cannot be opened or written, a file that is not
a SQLite database, or a database of another schema; the message names the path.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from stressgen.writefail import WRITE_FAILED
from tpusim.arch.errors import TpuError

SCHEMA_VERSION = "1"
STATUSES = ("pass", "fail", "error")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS campaigns(
  id TEXT PRIMARY KEY, root_seed INTEGER NOT NULL, hw TEXT NOT NULL, bug TEXT,
  invalid_rate REAL NOT NULL, rtl INTEGER NOT NULL, params TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS sessions(
  id INTEGER PRIMARY KEY AUTOINCREMENT, campaign TEXT NOT NULL REFERENCES campaigns(id),
  started REAL NOT NULL, last REAL NOT NULL, programs INTEGER NOT NULL DEFAULT 0,
  jobs INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS programs(
  campaign TEXT NOT NULL REFERENCES campaigns(id), idx INTEGER NOT NULL, seed INTEGER NOT NULL,
  hw TEXT NOT NULL, bug TEXT, invalid TEXT,
  status TEXT NOT NULL CHECK(status IN ('pass', 'fail', 'error')),
  reason TEXT NOT NULL DEFAULT '', signal TEXT, divergence TEXT NOT NULL DEFAULT '',
  bins TEXT NOT NULL DEFAULT '{}', timings TEXT NOT NULL DEFAULT '{}', bundle TEXT,
  n_instrs INTEGER, wall_s REAL, finished REAL NOT NULL, session INTEGER,
  PRIMARY KEY(campaign, idx));
CREATE TABLE IF NOT EXISTS claims(
  campaign TEXT NOT NULL, idx INTEGER NOT NULL, owner TEXT NOT NULL, host TEXT NOT NULL,
  pid INTEGER NOT NULL, pid_start TEXT NOT NULL, until REAL NOT NULL, PRIMARY KEY(campaign, idx));
"""


class DbError(TpuError):
    """The results database cannot be used (unwritable path, not a database, other schema)."""


@dataclass(frozen=True)
class Campaign:
    """Identity of a campaign: everything that decides which programs it runs and how."""
    root_seed: int
    hw: str
    bug: str | None
    invalid_rate: float
    rtl: bool
    params: str = "{}"      # JSON of extra identity (e.g. the config's hash)

    @property
    def id(self) -> str:
        """Readable id (hw: the config name or the YAML file's stem): ``s<seed>-<hw>-<bug|clean>-<rtl|simpy>[-inv<rate>]``."""
        base = f"s{self.root_seed}-{Path(self.hw).stem}-{self.bug or 'clean'}-{'rtl' if self.rtl else 'simpy'}"
        return base + (f"-inv{self.invalid_rate:g}" if self.invalid_rate else "")


@dataclass
class ProgramRow:
    """One finished program (see the module docstring for the columns)."""
    idx: int
    seed: int
    hw: str
    bug: str | None
    status: str
    reason: str = ""
    signal: str | None = None
    divergence: str = ""
    bins: dict | None = None
    timings: dict | None = None
    bundle: str | None = None
    invalid: str | None = None
    n_instrs: int | None = None
    wall_s: float | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise DbError(f"program {self.idx}: status {self.status!r} is not one of {STATUSES}")


def _wrap(path: Path, exc: Exception) -> DbError:
    msg = str(exc)
    if "not a database" in msg or "malformed" in msg:
        return DbError(f"{path}: not a stressgen results database (corrupt or another file type: {msg})")
    if "disk I/O" in msg or "disk is full" in msg:
        return DbError(f"{path}: cannot write the results database ({msg}: disk full or file-size "
                       "limit?); the programs recorded so far are kept, run again to resume")
    if "unable to open" in msg or "readonly" in msg or "read-only" in msg:
        return DbError(f"{path}: cannot open or write the results database ({msg})")
    return DbError(f"{path}: results database error: {msg}")


def process_start(pid: int) -> str:
    """Start time of process ``pid`` (clock ticks since boot, /proc/<pid>/stat field 22), "" if
    there is no such process: with the pid it names one process even when pids are reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


@dataclass(frozen=True)
class Owner:
    """Who claims programs: one ``stressgen run`` process (``Owner.me()``)."""
    token: str
    host: str
    pid: int
    pid_start: str

    @classmethod
    def me(cls) -> "Owner":
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(), process_start(os.getpid()))


def _owner_alive(host: str, pid: int, pid_start: str) -> bool:
    """False only when the owner is surely gone (same host, its process ended); another host's
    owner is trusted until its lease expires."""
    return host != socket.gethostname() or (pid_start != "" and process_start(pid) == pid_start)


_NOT_WRITE_FAILURE = "NOT (status='error' AND substr(reason, 1, ?)=?)"


class ResultsDb:
    """The results database at ``path`` (created with its folder if missing). DbError on failure.
    ``read_only``: open an existing file for reading only, also on a read-only folder or file
    system (``stressgen report``); nothing is created or written.

    Use as a context manager or call ``close()``. Not shared between processes' threads: only the
    campaign parent opens it for writing."""

    def __init__(self, path: str | Path, create: bool = True, read_only: bool = False):
        self.path = Path(path)
        if self.path.is_dir():
            raise DbError(f"{self.path}: is a folder, expected a results database file")
        if self.path.exists() and not self.path.is_file():
            raise DbError(f"{self.path}: not a regular file (a device or a pipe), expected a results database file")
        if (read_only or not create) and not self.path.is_file():
            raise DbError(f"{self.path}: no such results database")
        if read_only:
            self.conn = _connect_read_only(self.path)
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DbError(f"{self.path}: cannot create its folder ({e.strerror})") from None
        try:
            self.conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
            self._refuse_foreign()
            self.conn.execute("PRAGMA journal_mode=WAL").fetchone()
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("PRAGMA wal_autocheckpoint=1")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self._init_schema()
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None

    def _refuse_foreign(self) -> None:
        """DbError if the file is an SQLite database with tables but not ours (before any write)."""
        tables = sorted(r[0] for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"))
        if tables and "meta" not in tables:
            self.conn.close()
            raise DbError(f"{self.path}: an SQLite database of something else (tables: {', '.join(tables[:5])}); "
                          "not a stressgen results database, left untouched: give another --db")

    def _init_schema(self) -> None:
        with self._tx():
            for stmt in filter(str.strip, _SCHEMA.split(";")):
                self.conn.execute(stmt)
            row = self.conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                self.conn.execute("INSERT INTO meta VALUES('schema', ?)", (SCHEMA_VERSION,))
            elif row[0] != SCHEMA_VERSION:
                raise DbError(f"{self.path}: results database schema {row[0]!r}, "
                              f"this stressgen reads schema {SCHEMA_VERSION!r}")

    def _tx(self):
        return _Transaction(self.conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---------------------------------------------------------------------- campaigns, sessions
    def ensure_campaign(self, c: Campaign) -> str:
        """Insert the campaign if new; DbError if its id exists with other parameters."""
        try:
            with self._tx():
                row = self.conn.execute("SELECT root_seed, hw, bug, invalid_rate, rtl, params FROM "
                                        "campaigns WHERE id=?", (c.id,)).fetchone()
                mine = (c.root_seed, c.hw, c.bug, c.invalid_rate, int(c.rtl), c.params)
                if row is None:
                    self.conn.execute("INSERT INTO campaigns VALUES(?,?,?,?,?,?,?,?)",
                                      (c.id, *mine, time.time()))
                elif tuple(row) != mine:
                    raise DbError(f"{self.path}: campaign {c.id} exists with other parameters "
                                  f"{json.loads(row[5]) or row[:5]} (this run: {json.loads(c.params) or mine[:5]}); "
                                  "use another --db")
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None
        return c.id

    def start_session(self, campaign_id: str, jobs: int) -> int:
        now = time.time()
        try:
            with self._tx():
                cur = self.conn.execute("INSERT INTO sessions(campaign, started, last, programs, jobs) "
                                        "VALUES(?,?,?,0,?)", (campaign_id, now, now, jobs))
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None
        return int(cur.lastrowid)

    def campaigns(self) -> list[dict]:
        cur = self.conn.execute("SELECT id, root_seed, hw, bug, invalid_rate, rtl, params, created "
                                "FROM campaigns ORDER BY created")
        return [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]

    # ---------------------------------------------------------------------------- programs
    def done_indices(self, campaign_id: str) -> set[int]:
        """Indices of the campaign's programs that have a row (finished, whatever the status),
        except those whose files could not be written (to be run again)."""
        try:
            rows = self.conn.execute(
                f"SELECT idx FROM programs WHERE campaign=? AND {_NOT_WRITE_FAILURE}",
                (campaign_id, len(WRITE_FAILED), WRITE_FAILED))
            return {r[0] for r in rows}
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None

    def record(self, campaign_id: str, session: int | None, row: ProgramRow, owner: Owner | None = None) -> bool:
        """Write one finished program, bump its session and drop ``owner``'s claim of it, in one
        transaction; True if written.

        A second record of the same (campaign, idx) replaces the first (a program redone after a
        crash of the parent between the worker's end and this write, or a write failure redone),
        except with ``owner``: a program another owner recorded meanwhile (this owner's lease
        had expired) keeps its row and this one is dropped (False)."""
        now = time.time()
        vals = (campaign_id, row.idx, row.seed, row.hw, row.bug, row.invalid, row.status, row.reason,
                row.signal, row.divergence, json.dumps(row.bins or {}, sort_keys=True),
                json.dumps(row.timings or {}, sort_keys=True), row.bundle, row.n_instrs, row.wall_s,
                now, session)
        try:
            with self._tx():
                if owner is not None:
                    self.conn.execute("DELETE FROM claims WHERE campaign=? AND idx=? AND owner=?",
                                      (campaign_id, row.idx, owner.token))
                    if self._done(campaign_id, row.idx):
                        return False
                self.conn.execute("INSERT OR REPLACE INTO programs VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                                  vals)
                if session is not None:
                    self.conn.execute("UPDATE sessions SET last=?, programs=programs+1 WHERE id=?",
                                      (now, session))
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None
        return True

    def _done(self, campaign_id: str, idx: int) -> bool:
        return self.conn.execute(f"SELECT 1 FROM programs WHERE campaign=? AND idx=? AND {_NOT_WRITE_FAILURE}",
                                 (campaign_id, idx, len(WRITE_FAILED), WRITE_FAILED)).fetchone() is not None

    # ---------------------------------------------------------------------------- claims
    def claim(self, campaign_id: str, owner: Owner, indices, lease_s: float) -> tuple[list[int], list[int]]:
        """Claim the programs ``indices`` for ``owner`` until now + ``lease_s``, in one
        transaction: (claimed, busy). Not claimed: a program with a row (done) and one that
        another live owner claims (busy: to look at again later)."""
        got, busy = [], []
        now = time.time()
        try:
            with self._tx():
                for i in indices:
                    if self._done(campaign_id, i):
                        continue
                    c = self.conn.execute("SELECT owner, host, pid, pid_start, until FROM claims WHERE "
                                          "campaign=? AND idx=?", (campaign_id, i)).fetchone()
                    if c is not None and c[0] != owner.token and c[4] > now and _owner_alive(*c[1:4]):
                        busy.append(i)
                        continue
                    self.conn.execute("INSERT OR REPLACE INTO claims VALUES(?,?,?,?,?,?,?)",
                                      (campaign_id, i, owner.token, owner.host, owner.pid, owner.pid_start,
                                       now + lease_s))
                    got.append(i)
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None
        return got, busy

    def renew(self, owner: Owner, lease_s: float) -> None:
        """Extend every claim of ``owner`` to now + ``lease_s``."""
        try:
            with self._tx():
                self.conn.execute("UPDATE claims SET until=? WHERE owner=?", (time.time() + lease_s, owner.token))
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None

    def release(self, owner: Owner) -> None:
        """Drop every claim of ``owner`` (its unfinished programs are free for another run)."""
        try:
            with self._tx():
                self.conn.execute("DELETE FROM claims WHERE owner=?", (owner.token,))
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None

    def claims(self, campaign_id: str) -> list[dict]:
        cur = self.conn.execute("SELECT * FROM claims WHERE campaign=? ORDER BY idx", (campaign_id,))
        return [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]

    def programs(self, campaign_id: str | None = None) -> list[dict]:
        """Every program row (dicts, bins/timings decoded), ordered by campaign then index."""
        q = "SELECT * FROM programs" + (" WHERE campaign=?" if campaign_id else "") + " ORDER BY campaign, idx"
        try:
            cur = self.conn.execute(q, (campaign_id,) if campaign_id else ())
            names = [d[0] for d in cur.description]
            out = []
            for r in cur.fetchall():
                d = dict(zip(names, r))
                d["bins"] = json.loads(d["bins"])
                d["timings"] = json.loads(d["timings"])
                out.append(d)
            return out
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None

    def sessions(self, campaign_id: str | None = None) -> list[dict]:
        q = "SELECT * FROM sessions" + (" WHERE campaign=?" if campaign_id else "") + " ORDER BY id"
        try:
            cur = self.conn.execute(q, (campaign_id,) if campaign_id else ())
            return [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection that also works on a read-only folder or file system.

    ``mode=ro`` first: it sees a WAL that a running campaign is writing. Where SQLite cannot
    open even that (WAL mode needs a ``-shm`` file it may not create in a read-only folder), the
    file is opened ``immutable=1``: no locks and no ``-shm``, the file read as it is (our WAL is
    checkpointed after every commit, so at most the last program's row is missing). The schema
    is checked; DbError names the path."""
    uri = "file:" + quote(str(path.resolve()))
    last = None
    for flags in ("?mode=ro", "?mode=ro&immutable=1"):
        try:
            conn = sqlite3.connect(uri + flags, uri=True, timeout=30.0, isolation_level=None)
            row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.Error as e:
            last = e
            continue
        if row is None or row[0] != SCHEMA_VERSION:
            conn.close()
            found = repr(row[0]) if row else "missing"
            raise DbError(f"{path}: results database schema {found}, this stressgen reads "
                          f"schema {SCHEMA_VERSION!r}")
        return conn
    raise _wrap(path, last) from None


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any exception (autocommit connection). A Ctrl-C
    (KeyboardInterrupt) can land between BEGIN and the block, or inside COMMIT, leaving the
    connection in a transaction that no ``__exit__`` ends: the next transaction first rolls it
    back (its block never ran, or its COMMIT did not finish), instead of failing with "cannot
    start a transaction within a transaction"."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self):
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.conn.execute("COMMIT")
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        return False


__all__ = ["ResultsDb", "Campaign", "ProgramRow", "Owner", "process_start", "DbError", "SCHEMA_VERSION", "STATUSES"]
