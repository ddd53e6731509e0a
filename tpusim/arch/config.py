"""Hardware configuration: one YAML file, validated into a frozen dataclass.

Every number the compiler, the SimPy model and the RTL use comes from here (the RTL receives it as
a generated SystemVerilog package, see ``tpusim.arch.svgen``). Unknown and missing keys are errors.

Optional sections ``energy`` and ``area`` (pJ per event, um^2 per block: tpusim.arch.costs, with
published 45 nm defaults) feed the energy and area estimates; they are not part of the config hash.

Derived quantities (R = ``array.rows``, C = ``array.cols``; non-square arrays:
docs/architecture.md, "Non-square arrays"):
  * ``word_bytes`` = R: one SRAM word holds one activation vector (K lanes of int8).
  * ``requant_planes`` = C / R if C > R else 1: SRAM words one accumulator row (C int32) gives.
  * ``lane_groups`` = R / C if R > C else 1: accumulator rows (C-byte lane groups) in one word.
  * ``param_words`` = ceil(9C / W): REQUANT's per-channel table; ``dw_param_words`` = 9 (DWCONV's
    table of W lanes).
  * ``bank_bytes`` = ``sram.size_bytes / sram.banks``; banks are address-partitioned
    (bank index = SRAM byte address // bank_bytes).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from tpusim.arch.costs import AreaTable, EnergyTable, sram_default_pj_per_byte, table_from_dict
from tpusim.arch.errors import ConfigError, TimebaseError
from tpusim.arch.operands import REQUANT_TABLE_BYTES_PER_CHANNEL, lut_words
from tpusim.arch.timebase import Timebase

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

#: Largest cols/rows of a wide array (REQUANT's channel-block planes per accumulator row) and
#: rows/cols of a tall one (lane groups per word; REQUANT's 8-bit lane_group field).
MAX_REQUANT_PLANES = 16
MAX_LANE_GROUPS = 16


@dataclass(frozen=True)
class ClockConfig:
    """One clock domain: frequency in MHz and phase of its first rising edge in ps."""
    freq_mhz: int
    phase_ps: int


@dataclass(frozen=True)
class HwConfig:
    """Validated hardware configuration (all sizes in bytes, latencies in that domain's cycles)."""
    name: str
    array_rows: int
    array_cols: int
    acc_depth_rows: int
    sram_size_bytes: int
    sram_banks: int
    ddr_beat_bytes: int
    ddr_latency_cycles: int
    ddr_address_bits: int
    dma_burst_bytes: int
    dma_outstanding: int
    qreg_banks: int
    qreg_entries: int
    queue_depth: int
    fetch_line_buffers: int
    clk_core: ClockConfig
    clk_ddr: ClockConfig
    clk_dma: ClockConfig
    energy: EnergyTable = EnergyTable()     # pJ per event (tpusim.arch.costs; not in the hash)
    area: AreaTable = AreaTable()           # um^2 per block (tpusim.arch.costs; not in the hash)

    # ---- derived -------------------------------------------------------------------------
    @property
    def word_bytes(self) -> int:
        """SRAM word width in bytes (= array rows: one int8 activation vector)."""
        return self.array_rows

    @property
    def sram_words(self) -> int:
        return self.sram_size_bytes // self.word_bytes

    @property
    def bank_bytes(self) -> int:
        return self.sram_size_bytes // self.sram_banks

    @property
    def bank_words(self) -> int:
        return self.bank_bytes // self.word_bytes

    @property
    def qreg_count(self) -> int:
        return self.qreg_banks * self.qreg_entries

    @property
    def requant_planes(self) -> int:
        """SRAM words (channel-block planes of R channels) one accumulator row of C int32 fills
        in a REQUANT: C / R for a wide array (C > R), else 1."""
        return max(1, self.array_cols // self.array_rows)

    @property
    def lane_groups(self) -> int:
        """C-byte lane groups of an SRAM word, each filled by one REQUANT accumulator row: R / C
        for a tall array (R > C), else 1."""
        return max(1, self.array_rows // self.array_cols)

    @property
    def param_words(self) -> int:
        """SRAM words of one REQUANT per-channel table: bias int32[cols], mult int32[cols], shift
        int8[cols], packed, the last word zero-padded: ceil(9 * cols / word_bytes)."""
        return -(-(REQUANT_TABLE_BYTES_PER_CHANNEL * self.array_cols) // self.word_bytes)

    @property
    def dw_param_words(self) -> int:
        """SRAM words of one DWCONV per-channel table (one channel per lane, word_bytes lanes):
        bias int32[W], mult int32[W], shift int8[W] = 9 words (= param_words when R = C)."""
        return REQUANT_TABLE_BYTES_PER_CHANNEL

    @property
    def lut_words(self) -> int:
        """SRAM words of one LUT table (256 int8 entries): ceil(256 / word_bytes)."""
        return lut_words(self.word_bytes)

    @property
    def ddr_peak_bytes_per_cycle(self) -> float:
        """The DDR's peak bytes per core cycle: beat bytes x DDR MHz / core MHz (seed: 32 B at
        800 MHz against 1 GHz = 25.6)."""
        return self.ddr_beat_bytes * self.clk_ddr.freq_mhz / self.clk_core.freq_mhz

    @property
    def pes(self) -> int:
        return self.array_rows * self.array_cols

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def sram_pj_per_byte(self) -> float:
        """pJ per SRAM byte read or written: the energy table's, else the bank-size default."""
        e = self.energy.sram_pj_per_byte
        return e if e is not None else sram_default_pj_per_byte(self.bank_bytes)

    def hash_bytes(self) -> bytes:
        """SHA-256 of the canonical JSON of this configuration without its cost tables (they do
        not change what the chip computes) (32 bytes); stored in every .tpubin."""
        d = self.to_dict()
        d.pop("energy")
        d.pop("area")
        canon = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(canon).digest()

    def hash_hex(self) -> str:
        return self.hash_bytes().hex()


_SCHEMA: dict[str, Any] = {
    "name": str,
    "array": {"rows": int, "cols": int},
    "accumulator": {"depth_rows": int},
    "sram": {"size_bytes": int, "banks": int},
    "ddr": {"beat_bytes": int, "latency_cycles": int, "address_bits": int},
    "dma": {"burst_bytes": int, "outstanding": int},
    "quant_regs": {"banks": int, "entries": int},
    "queues": {"depth": int},
    "fetch": {"line_buffers": int},
    "clocks": {d: {"freq_mhz": int, "phase_ps": int} for d in ("core", "ddr", "dma")},
}


#: HwConfig field -> its dotted path in the YAML file (what error messages name)
YAML_PATHS: dict[str, str] = {
    "name": "name", "array_rows": "array.rows", "array_cols": "array.cols",
    "acc_depth_rows": "accumulator.depth_rows", "sram_size_bytes": "sram.size_bytes", "sram_banks": "sram.banks",
    "ddr_beat_bytes": "ddr.beat_bytes", "ddr_latency_cycles": "ddr.latency_cycles",
    "ddr_address_bits": "ddr.address_bits", "dma_burst_bytes": "dma.burst_bytes",
    "dma_outstanding": "dma.outstanding", "qreg_banks": "quant_regs.banks", "qreg_entries": "quant_regs.entries",
    "queue_depth": "queues.depth", "fetch_line_buffers": "fetch.line_buffers",
}


def _check_schema(data: Any, schema: Any, where: str) -> None:
    if isinstance(schema, dict):
        if not isinstance(data, dict):
            raise ConfigError(f"{where or 'config'}: expected a mapping, got {type(data).__name__} {data!r}")
        unknown = sorted(set(data) - set(schema))
        if unknown:
            raise ConfigError(f"{where or 'config'}: unknown key(s) {unknown}; expected {sorted(schema)}")
        missing = sorted(set(schema) - set(data))
        if missing:
            raise ConfigError(f"{where or 'config'}: missing key(s) {missing}")
        for k, sub in schema.items():
            _check_schema(data[k], sub, f"{where}.{k}" if where else k)
    else:
        if schema is int and (isinstance(data, bool) or not isinstance(data, int)):
            raise ConfigError(f"{where}: expected an integer, got {data!r}")
        if schema is str and not isinstance(data, str):
            raise ConfigError(f"{where}: expected a string, got {data!r}")


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


def check_array_shape(c: HwConfig) -> None:
    """The array's shape rules (ConfigError naming the field and the reason): array.rows and
    array.cols powers of two >= 4 (so one is a multiple of the other: an accumulator row of C
    int32 fills C/R whole SRAM words, or R/C rows fill one word in C-byte lane groups), their
    ratio within MAX_REQUANT_PLANES / MAX_LANE_GROUPS (docs/architecture.md, "Non-square
    arrays")."""
    r, col = c.array_rows, c.array_cols
    if not (_pow2(r) and r >= 4):
        raise ConfigError(f"config '{c.name}': array.rows must be a power of two >= 4, got {r}")
    if not (_pow2(col) and col >= 4):
        raise ConfigError(f"config '{c.name}': array.cols must be a power of two >= 4, got {col} "
                          "(an accumulator row of cols int32 must fill whole words or whole lane groups)")
    if c.requant_planes > MAX_REQUANT_PLANES or c.lane_groups > MAX_LANE_GROUPS:
        raise ConfigError(f"config '{c.name}': array {r}x{col}: cols/rows {col / r:g} must lie in "
                          f"[1/{MAX_LANE_GROUPS}, {MAX_REQUANT_PLANES}] (REQUANT's lane_group field "
                          "and the VPU's plane sequencer)")


def _validate(c: HwConfig) -> None:
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise ConfigError(f"config '{c.name}': {msg}")

    for key, path in YAML_PATHS.items():
        if isinstance(getattr(c, key), int):
            need(getattr(c, key) > 0, f"{path} must be positive, got {getattr(c, key)}")
    check_array_shape(c)
    need(c.sram_size_bytes % c.sram_banks == 0,
         f"sram.size_bytes {c.sram_size_bytes} is not divisible into sram.banks {c.sram_banks} banks")
    need(_pow2(c.sram_banks), f"sram.banks must be a power of two, got {c.sram_banks}")
    need(c.bank_bytes % c.word_bytes == 0,
         f"SRAM bank of {c.bank_bytes} bytes (sram.size_bytes / sram.banks) is not a whole number of "
         f"{c.word_bytes}-byte words (array.rows)")
    need(c.sram_words <= 1 << 16, f"sram.size_bytes {c.sram_size_bytes} is {c.sram_words} words of {c.word_bytes} "
                                  "bytes (array.rows): more than the 16-bit word address reaches (65536)")
    need(c.acc_depth_rows <= 1 << 16, f"accumulator.depth_rows {c.acc_depth_rows} exceeds 65536")
    need(c.sram_words >= 4 * c.array_cols,
         f"sram.size_bytes {c.sram_size_bytes} ({c.sram_words} words) cannot hold two weight tiles "
         f"(array.cols = {c.array_cols} words each) and two activation tiles of the same size: the array "
         "is larger than the SRAM can feed")
    need(_pow2(c.dma_burst_bytes), f"dma.burst_bytes must be a power of two, got {c.dma_burst_bytes}")
    need(c.dma_burst_bytes % c.word_bytes == 0,
         f"dma.burst_bytes {c.dma_burst_bytes} must be a multiple of the SRAM word "
         f"({c.word_bytes} bytes = array.rows): a burst fills whole words")
    need(c.dma_burst_bytes >= 32, f"dma.burst_bytes must be at least 32 (one instruction), got {c.dma_burst_bytes}")
    need(_pow2(c.ddr_beat_bytes) and c.ddr_beat_bytes <= c.dma_burst_bytes,
         f"ddr.beat_bytes must be a power of two <= dma.burst_bytes ({c.dma_burst_bytes}), got {c.ddr_beat_bytes}")
    need(c.ddr_latency_cycles >= 2, f"ddr.latency_cycles must be >= 2, got {c.ddr_latency_cycles}")
    need(c.ddr_address_bits == 40, f"ddr.address_bits must be 40, got {c.ddr_address_bits}")
    need(c.qreg_banks == 4 and c.qreg_entries == 16,
         "quant_regs.banks and quant_regs.entries must be 4 and 16 (6-bit index in the ISA), got "
         f"{c.qreg_banks} and {c.qreg_entries}")
    need(c.queue_depth >= 2 and _pow2(c.queue_depth), f"queues.depth must be a power of two >= 2, got {c.queue_depth}")
    need(c.fetch_line_buffers in (1, 2), f"fetch.line_buffers must be 1 or 2, got {c.fetch_line_buffers}")
    need(c.dma_outstanding in (1, 2, 4, 8),
         f"dma.outstanding must be 1, 2, 4 or 8 (burst buffers per channel), got {c.dma_outstanding}")
    # Clock checks (exact periods, no coincident edges) live in the timebase.
    try:
        Timebase(c)
    except TimebaseError as e:
        raise ConfigError(f"config '{c.name}': {e}") from None


def config_from_dict(data: dict[str, Any]) -> HwConfig:
    """Validate a parsed YAML mapping and build a HwConfig. Raises ConfigError naming the bad key.
    The ``energy`` and ``area`` sections are optional (tpusim.arch.costs: defaults per key)."""
    if isinstance(data, dict):
        data = dict(data)
        costs = {k: data.pop(k, None) for k in ("energy", "area")}
    _check_schema(data, _SCHEMA, "")
    clk = data["clocks"]
    cfg = HwConfig(
        name=data["name"],
        array_rows=data["array"]["rows"], array_cols=data["array"]["cols"],
        acc_depth_rows=data["accumulator"]["depth_rows"],
        sram_size_bytes=data["sram"]["size_bytes"], sram_banks=data["sram"]["banks"],
        ddr_beat_bytes=data["ddr"]["beat_bytes"], ddr_latency_cycles=data["ddr"]["latency_cycles"],
        ddr_address_bits=data["ddr"]["address_bits"],
        dma_burst_bytes=data["dma"]["burst_bytes"], dma_outstanding=data["dma"]["outstanding"],
        qreg_banks=data["quant_regs"]["banks"], qreg_entries=data["quant_regs"]["entries"],
        queue_depth=data["queues"]["depth"], fetch_line_buffers=data["fetch"]["line_buffers"],
        clk_core=ClockConfig(**clk["core"]), clk_ddr=ClockConfig(**clk["ddr"]),
        clk_dma=ClockConfig(**clk["dma"]),
        energy=table_from_dict(EnergyTable, costs["energy"], "energy", ConfigError),
        area=table_from_dict(AreaTable, costs["area"], "area", ConfigError),
    )
    _validate(cfg)
    return cfg


def config_path(path_or_name: str | Path) -> Path:
    """The YAML file of a config: a path, or a name in tpusim/configs. ConfigError if neither."""
    p = Path(path_or_name)
    if not p.exists() and not p.suffix:
        p = CONFIG_DIR / f"{path_or_name}.yaml"
    if not p.exists():
        raise ConfigError(f"hardware config {str(path_or_name)!r} not found "
                          f"(known names: {builtin_names()})")
    return p


def builtin_names() -> list[str]:
    """Names of the configs shipped in tpusim/configs (their file stems)."""
    return sorted(q.stem for q in CONFIG_DIR.glob("*.yaml"))


def config_name(data: Any, path: str | Path) -> Any:
    """The name of the config read from the YAML file ``path`` (README, "The hardware"): a
    built-in config's (tpusim/configs) is its ``name``; a file of the user's own is named by its
    stem unless its ``name`` is given and is not a built-in config's name (a copy of small.yaml
    that still says ``name: small`` is not the small chip: it takes the file's stem). ``data`` as
    parsed; None if it is not a mapping (the schema check reports it)."""
    p = Path(path)
    if not isinstance(data, dict):
        return None
    given = data.get("name")
    if p.resolve().parent == CONFIG_DIR.resolve():
        return given
    return p.stem if given is None or given in builtin_names() else given


def load_config(path_or_name: str | Path) -> HwConfig:
    """Load a hardware config from a YAML path, or by name from tpusim/configs ('seed', 'small');
    its name: config_name() (a file's ``name`` key is optional).

    Raises ConfigError if the file is missing, is not YAML, or fails validation.
    """
    p = config_path(path_or_name)
    data = load_config_data(p, str(p))
    try:
        return config_from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


def load_config_data(path: str | Path, where: str = "config") -> Any:
    """The parsed YAML of a config file, a mapping's ``name`` set by config_name(); not
    validated. ConfigError naming ``where`` if the file cannot be read or is not YAML."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{where}: is a folder, not a hardware config YAML file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: not a hardware config YAML file (not UTF-8 text: byte "
                          f"0x{e.object[e.start]:02x} at offset {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read hardware config: {e.strerror or e}") from None
    if not text.strip():
        raise ConfigError(f"{where}: the file is empty (copy one of {CONFIG_DIR}/*.yaml to start from)")
    data = _yaml(text, where)
    name = config_name(data, p)
    return {**data, "name": name} if name is not None else data


def _yaml(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: not valid YAML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise ConfigError(f"{where}: not valid YAML: nested too deeply") from None


def parse_config_text(text: str, where: str = "config") -> HwConfig:
    """Parse and validate the YAML text of a hardware config (its ``name`` required: no file
    names it); ConfigError names ``where``."""
    data = _yaml(text, where)
    try:
        return config_from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None

__all__ = ["HwConfig", "ClockConfig", "YAML_PATHS", "builtin_names", "config_name", "load_config_data", "config_path", "load_config", "config_from_dict", "parse_config_text", "CONFIG_DIR"]
