"""Known RTL bugs that can be compiled in, to prove that the stress flow catches real bugs.

Each bug is one `` `ifdef TPU_BUG_<NAME> `` block in ``rtl/*.sv`` (OFF by default: the default
build is unchanged). ``build(cfg, bugs=("addr36",))`` / ``run_rtl(..., bugs=(...))`` compile the
buggy RTL into its own cached folder (``build/rtl/<cfg>-<hash>-bug-<names>``).
docs/rtl_interfaces.md, "Injected bugs", lists them; tests/test_bugs_rtl.py has one directed
program per bug that passes on the clean RTL and fails on the buggy one.
"""
from __future__ import annotations

from dataclasses import dataclass

from tpusim.arch.errors import ConfigError


@dataclass(frozen=True)
class Bug:
    """One injectable RTL bug.

    ``name``: registry key (lower case); ``define``: the Verilog macro (``TPU_BUG_<NAME>``);
    ``module``: the RTL file holding the ``ifdef``; ``signal``: the architectural signal where
    the bug shows first, as named in the RTL arch waveform below ``tb_top`` (the right-hand side
    of waves/arch_map.yaml, e.g. ``u_tpu.u_ddr_arb.cmd_addr_q`` = the DDR command address);
    ``description``: what the buggy line does; ``trigger``: the program feature that exposes it.
    """
    name: str
    define: str
    module: str
    signal: str
    description: str
    trigger: str


def _bug(name: str, module: str, signal: str, description: str, trigger: str) -> Bug:
    return Bug(name, f"TPU_BUG_{name.upper()}", module, signal, description, trigger)


BUGS: dict[str, Bug] = {b.name: b for b in (
    _bug("addr36", "rtl/tpu_dma_channel.sv", "u_tpu.u_ddr_arb.cmd_addr_q",
         "the DMA channel's burst DDR address is computed in 36 bits: bits 39:36 are dropped on "
         "every DMA request, so the DDR command address aliases 2^36 bytes lower",
         "a DMA_LOAD or DMA_STORE whose DDR address is >= 2^36"),
    _bug("kstall", "rtl/tpu_mxu.sv", "u_tpu.g_eng[2].u_ctrl.busy_q",
         "the MXU registers its last-vector (drain) flag only for an odd access index, so a MATMUL "
         "with an odd number of vectors M = count_x*count_y never drains: the MXU never completes "
         "and the program hangs (even M and M = 0 are correct)",
         "a MATMUL with odd count_x*count_y"),
    _bug("qreg_wrap", "rtl/tpu_quant_regs.sv", "u_arch_probe.vpu_retire_digest",
         "the quant-register entry index drops bit 5 (write and read), so registers i and i+32 "
         "share one entry: loading i+32 overwrites i",
         "two live quant registers i and i+32, i < 32, the older one used after the newer is loaded"),
    _bug("arb_starve", "rtl/tpu_ddr_arbiter.sv", "u_arch_probe.ddr_grant",
         "the DDR arbiter's round-robin pointer never advances: fixed priority fetch > DMA read > "
         "DMA write, so DMA writes starve behind DMA reads (timing only, data unchanged)",
         "DMA_LOAD and DMA_STORE bursts waiting for the DDR bus at the same time"),
    _bug("bank_off1", "rtl/tpu_sram_arbiter.sv", "u_tpu.u_sram.u_arbiter.gnt_q",
         "the SRAM arbiter blocks a granted transaction's banks for D + 1 edges instead of D, so a "
         "requester waiting on those banks is granted one core cycle late (timing only)",
         "two engines' SRAM transactions on a shared bank at the same time (bank conflict)"),
    _bug("requant_round", "rtl/tpu_vpu.sv", "u_arch_probe.vpu_retire_digest",
         "RoundingDivideByPOT's threshold loses its '+ (x < 0)' term: negative exact ties round "
         "up (toward +inf) instead of away from zero",
         "REQUANT / average POOL / ADD with a right shift whose pre-shift value is a negative tie"),
)}


def check_bugs(bugs) -> tuple[str, ...]:
    """Normalise a bug selection: sorted, deduplicated names. Accepts a str or an iterable of str.

    Raises ConfigError naming an unknown bug and listing the known ones.
    """
    if isinstance(bugs, str):
        bugs = (bugs,)
    names = sorted({str(b).strip().lower() for b in bugs or ()})
    for n in names:
        if n not in BUGS:
            raise ConfigError(f"unknown injected bug {n!r}; known bugs: {', '.join(BUGS)}")
    return tuple(names)


def define_flags(bugs) -> list[str]:
    """Verilator flags (``+define+TPU_BUG_<NAME>``) for a bug selection (see ``check_bugs``)."""
    return [f"+define+{BUGS[n].define}" for n in check_bugs(bugs)]


def folder_suffix(bugs) -> str:
    """Build-folder suffix: '' for no bug, else '-bug-<name>[-<name>...]' (sorted names)."""
    names = check_bugs(bugs)
    return "-bug-" + "-".join(names) if names else ""


__all__ = ["Bug", "BUGS", "check_bugs", "define_flags", "folder_suffix"]
