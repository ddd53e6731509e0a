"""Where a campaign's programs run: a Dask cluster, local by default.

  ``ClusterSpec(jobs=J)``                      a ``distributed.LocalCluster`` of J worker
                                               processes, 1 thread each, started and stopped by
                                               the campaign; scheduler, workers and their HTTP
                                               endpoints listen on 127.0.0.1 only (no dashboard)
  ``ClusterSpec(scheduler="tls://host:8786",   an existing cluster (``dask scheduler`` +
  tls_ca_file=..., tls_cert=..., tls_key=...)``  ``dask worker``, dask-jobqueue, Kubernetes);
                                               used only when given

Security: Dask runs any function a connected client submits, so whoever can reach the
scheduler can run code on the workers. The local cluster is reachable from this machine only
(127.0.0.1; other local users included). A cluster on a network should use TLS with client
certificates: ``tls://`` addresses and ``distributed.security.Security`` from ``tls_*``
(``--tls-ca-file/--tls-cert/--tls-key``) or, when none is given, from the Dask config
(``distributed.comm.tls.*``, e.g. ``DASK_DISTRIBUTED__COMM__TLS__CA_FILE``). The campaign itself
submits only ``stressgen.worker.run_program`` with plain data.

Errors: CampaignError for a scheduler that cannot be reached within ``connect_timeout_s``, a TLS
file that does not exist, TLS files with a non-``tls://`` address (the message names the value).
"""
from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import subprocess
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import dask
from distributed import Client, LocalCluster
from distributed.security import Security

from stressgen.spec import CampaignError

DEFAULT_CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ClusterSpec:
    """A local cluster of ``jobs`` workers, or the cluster at ``scheduler``."""
    jobs: int = 2
    scheduler: str | None = None
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S

    def check(self) -> None:
        """CampaignError for a bad combination or a missing file."""
        if self.jobs < 1:
            raise CampaignError(f"--jobs must be at least 1, got {self.jobs}")
        if self.connect_timeout_s <= 0:
            raise CampaignError(f"--connect-timeout must be positive seconds, got {self.connect_timeout_s}")
        if self.scheduler is not None and "://" in self.scheduler and \
                self.scheduler.split("://", 1)[0] not in SCHEDULER_SCHEMES:
            raise CampaignError(f"--scheduler {self.scheduler}: unknown address scheme "
                                f"{self.scheduler.split('://', 1)[0]!r} (tcp://HOST:PORT or tls://HOST:PORT)")
        tls = {"--tls-ca-file": self.tls_ca_file, "--tls-cert": self.tls_cert, "--tls-key": self.tls_key}
        given = {k: v for k, v in tls.items() if v}
        if given and self.scheduler is None:
            raise CampaignError(f"{', '.join(given)} apply to a cluster: give its --scheduler tls://HOST:PORT")
        for flag, path in given.items():
            if not Path(path).is_file():
                raise CampaignError(f"{flag} {path}: no such file")
        if given and not self.scheduler.startswith("tls://"):
            raise CampaignError(f"--scheduler {self.scheduler}: TLS files need a tls:// address")
        if given and not (self.tls_cert and self.tls_ca_file):
            raise CampaignError("TLS needs at least --tls-ca-file and --tls-cert (and --tls-key unless the "
                                "certificate file holds the key)")

    def security(self) -> Security:
        """Security from the tls_* files, else from the Dask config."""
        if not self.tls_cert:
            return Security()
        return Security(tls_ca_file=self.tls_ca_file, tls_client_cert=self.tls_cert,
                        tls_client_key=self.tls_key, require_encryption=True)


#: Dask's communication schemes a --scheduler address may name
SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")


def local_cluster(jobs: int, local_directory: str | Path | None = None, **kw) -> LocalCluster:
    """J worker processes, 1 thread each, everything on 127.0.0.1, no dashboard. The worker
    processes start with SIGINT ignored (a disposition that survives exec), so a Ctrl-C at the
    terminal, sent to the whole process group, reaches the client alone: it stops the campaign
    and closes the cluster, without a KeyboardInterrupt traceback from every worker. The price: a
    Ctrl-C while the cluster starts (seconds on a loaded machine) is ignored; press it again once
    the campaign runs (a signal mask instead was tried: Dask's loop thread, started earlier, spawns
    the workers with SIGINT unblocked, so they died with tracebacks). Dask's own
    logs are silenced below CRITICAL: while the cluster closes, a worker whose heartbeat meets the
    closed scheduler logs a CommClosedError traceback at ERROR, which is shutdown noise; a task's
    real failure reaches the campaign as the task's exception, not through these logs."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # e.g. "Port 8787 is already in use"
            return LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, host="127.0.0.1",
                                dashboard_address=None, local_directory=local_directory and str(local_directory),
                                silence_logs=logging.CRITICAL, **kw)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def connect(cs: ClusterSpec, local_directory: str | Path | None = None):
    """A ``distributed.Client`` for ``cs``. The local cluster is started and closed here, its
    workers' scratch space in a fresh folder under ``local_directory`` (default: the temp dir),
    removed afterwards."""
    cs.check()
    if cs.scheduler is None:
        if local_directory is not None:
            Path(local_directory).mkdir(parents=True, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix="dask-", dir=local_directory)
        try:
            with local_cluster(cs.jobs, scratch) as cluster, Client(cluster) as client:
                yield client
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    try:
        with dask.config.set({"distributed.comm.timeouts.connect": f"{cs.connect_timeout_s}s"}):
            client = Client(cs.scheduler, security=cs.security(), timeout=cs.connect_timeout_s)
    except ValueError as e:          # refused before any attempt: a malformed address
        raise CampaignError(f"--scheduler {cs.scheduler}: not a scheduler address ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else 'unparsable'}); expected e.g. "
                            "tcp://HOST:8786") from None
    except (OSError, TimeoutError, TypeError) as e:
        raise CampaignError(f"--scheduler {cs.scheduler}: cannot connect within {cs.connect_timeout_s:g} s "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no answer'})") from None
    with client:
        yield client


def worker_count(client: Client) -> int:
    """Threads of the cluster's workers (programs that can run at once)."""
    return sum(client.nthreads().values())


def stop_processes(procs, grace_s: float = 30.0) -> None:
    """Stop hand-started cluster processes (``dask scheduler``, ``dask worker``: subprocess.Popen),
    newest first: SIGTERM to each one still running, SIGKILL if it has not ended ``grace_s`` later."""
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                p.kill()


__all__ = ["ClusterSpec", "connect", "local_cluster", "stop_processes", "worker_count", "DEFAULT_CONNECT_TIMEOUT_S"]
