"""tpusim.arch.config: shipped configs, schema errors, consistency checks, clock checks, config hash."""
import copy
import dataclasses
import os
import re

import pytest
import yaml

from tpusim.arch.config import CONFIG_DIR, YAML_PATHS, ClockConfig, HwConfig, config_from_dict, load_config
from tpusim.arch.costs import AreaTable, EnergyTable
from tpusim.arch.errors import ConfigError, TpuError


def raw(name: str = "small") -> dict:
    """The parsed YAML of a shipped config (a fresh copy each call)."""
    return yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())


def write(tmp_path, data, name="hw.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return p


def with_(data: dict, path: str, value) -> dict:
    """A copy of data with the dotted key path set to value."""
    d = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = d
    for k in parents:
        node = node[k]
    node[last] = value
    return d


def without(data: dict, path: str) -> dict:
    d = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = d
    for k in parents:
        node = node[k]
    del node[last]
    return d


# ---- shipped configs -----------------------------------------------------------------------
def test_seed_loads_with_documented_values():
    c = load_config("seed")
    assert isinstance(c, HwConfig)
    assert c.name == "seed"
    assert (c.array_rows, c.array_cols) == (128, 128)
    assert c.acc_depth_rows == 1024
    assert (c.sram_size_bytes, c.sram_banks) == (131072, 8)
    assert (c.ddr_beat_bytes, c.ddr_latency_cycles, c.ddr_address_bits) == (32, 20, 40)
    assert c.dma_burst_bytes == 256
    assert (c.qreg_banks, c.qreg_entries, c.qreg_count) == (4, 16, 64)
    assert c.queue_depth == 8 and c.fetch_line_buffers == 2
    assert c.clk_core == ClockConfig(1000, 0)
    assert c.clk_ddr == ClockConfig(800, 100)
    assert c.clk_dma == ClockConfig(400, 50)
    # derived
    assert c.word_bytes == 128                      # = array.rows
    assert c.sram_words == 131072 // 128 == 1024
    assert c.bank_bytes == 131072 // 8 == 16384
    assert c.bank_words == 16384 // 128 == 128
    assert c.param_words == 9 * 128 // 128 == 9     # 9C/W
    assert c.pes == 128 * 128


def test_small_loads_with_documented_values():
    c = load_config("small")
    assert c.name == "small"
    assert (c.array_rows, c.array_cols) == (8, 8)
    assert c.acc_depth_rows == 512
    assert (c.sram_size_bytes, c.sram_banks) == (16384, 4)
    assert (c.ddr_beat_bytes, c.ddr_latency_cycles, c.ddr_address_bits) == (16, 8, 40)
    assert c.dma_burst_bytes == 64
    assert c.queue_depth == 4 and c.fetch_line_buffers == 2
    assert (c.clk_core, c.clk_ddr, c.clk_dma) == (ClockConfig(1000, 0), ClockConfig(800, 100),
                                                  ClockConfig(400, 50))
    assert c.word_bytes == 8
    assert c.sram_words == 2048
    assert c.bank_bytes == 4096
    assert c.bank_words == 512
    assert c.param_words == 9
    assert c.pes == 64


@pytest.mark.parametrize("name", ["seed", "small"])
def test_load_by_path_equals_load_by_name(name):
    assert load_config(CONFIG_DIR / f"{name}.yaml") == load_config(name)
    assert load_config(str(CONFIG_DIR / f"{name}.yaml")) == load_config(name)


def test_config_is_frozen():
    c = load_config("small")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.array_rows = 16


def test_to_dict_round_trips_all_fields():
    c = load_config("seed")
    d = c.to_dict()
    assert set(d) == {f.name for f in dataclasses.fields(HwConfig)}
    assert d["clk_ddr"] == {"freq_mhz": 800, "phase_ps": 100}
    tables = {"energy": EnergyTable, "area": AreaTable}
    assert HwConfig(**{k: ClockConfig(**v) if k.startswith("clk_") else tables[k](**v) if k in tables else v
                       for k, v in d.items()}) == c


def test_config_from_dict_accepts_shipped_dict():
    assert config_from_dict(raw("small")) == load_config("small")


def test_errors_are_tpu_errors():
    assert issubclass(ConfigError, TpuError)


# ---- schema: unknown, missing, wrong type -------------------------------------------------
def test_unknown_top_level_key():
    with pytest.raises(ConfigError, match=re.escape("config: unknown key(s) ['bogus']; expected [")):
        config_from_dict(with_(raw(), "bogus", 1))


def test_unknown_nested_key():
    with pytest.raises(ConfigError, match=re.escape(
            "array: unknown key(s) ['depth']; expected ['cols', 'rows']")):
        config_from_dict(with_(raw(), "array.depth", 4))


def test_unknown_deeply_nested_key():
    with pytest.raises(ConfigError, match=re.escape(
            "clocks.ddr: unknown key(s) ['duty']; expected ['freq_mhz', 'phase_ps']")):
        config_from_dict(with_(raw(), "clocks.ddr.duty", 50))


def test_missing_top_level_key():
    with pytest.raises(ConfigError, match=re.escape("config: missing key(s) ['sram']")):
        config_from_dict(without(raw(), "sram"))


def test_missing_several_keys_sorted():
    d = without(without(raw(), "queues"), "dma")
    with pytest.raises(ConfigError, match=re.escape("config: missing key(s) ['dma', 'queues']")):
        config_from_dict(d)


def test_missing_nested_key():
    with pytest.raises(ConfigError, match=re.escape("ddr: missing key(s) ['latency_cycles']")):
        config_from_dict(without(raw(), "ddr.latency_cycles"))


def test_missing_deeply_nested_key():
    with pytest.raises(ConfigError, match=re.escape("clocks.core: missing key(s) ['phase_ps']")):
        config_from_dict(without(raw(), "clocks.core.phase_ps"))


def test_missing_clock_domain():
    with pytest.raises(ConfigError, match=re.escape("clocks: missing key(s) ['dma']")):
        config_from_dict(without(raw(), "clocks.dma"))


@pytest.mark.parametrize("path, value", [
    ("array.rows", True),
    ("array.cols", False),
    ("sram.banks", "4"),
    ("sram.size_bytes", 16384.0),
    ("ddr.latency_cycles", None),
    ("clocks.dma.freq_mhz", "400"),
    ("clocks.core.phase_ps", [0]),
])
def test_wrong_type_for_int(path, value):
    with pytest.raises(ConfigError, match=re.escape(f"{path}: expected an integer, got {value!r}")):
        config_from_dict(with_(raw(), path, value))


def test_wrong_type_for_name():
    with pytest.raises(ConfigError, match=re.escape("name: expected a string, got 5")):
        config_from_dict(with_(raw(), "name", 5))


def test_scalar_where_mapping_expected():
    with pytest.raises(ConfigError, match=re.escape("array: expected a mapping, got int 8")):
        config_from_dict(with_(raw(), "array", 8))


def test_clock_not_a_mapping():
    with pytest.raises(ConfigError, match=re.escape("clocks.core: expected a mapping, got str '1GHz'")):
        config_from_dict(with_(raw(), "clocks.core", "1GHz"))


@pytest.mark.parametrize("text, got", [("# only a comment\n", "NoneType None"), ("- 1\n- 2\n", "list [1, 2]"),
                                       ("42\n", "int 42")])
def test_top_level_not_a_mapping(tmp_path, text, got):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(f"{p}: config: expected a mapping, got {got}")):
        load_config(p)


# ---- consistency checks -----------------------------------------------------------------
@pytest.mark.parametrize("path, value, msg", [
    ("array.rows", 0, "array.rows must be positive, got 0"),
    ("sram.banks", -4, "sram.banks must be positive, got -4"),
    ("accumulator.depth_rows", 0, "accumulator.depth_rows must be positive, got 0"),
    ("queues.depth", 0, "queues.depth must be positive, got 0"),
    ("dma.outstanding", 0, "dma.outstanding must be positive, got 0"),
])
def test_non_positive(path, value, msg):
    with pytest.raises(ConfigError, match=re.escape(f"config 'small': {msg}")):
        config_from_dict(with_(raw(), path, value))


def test_every_message_names_the_yaml_path():
    """Zero in each integer field: the message names it as the YAML does (``array.rows``), never
    as the dataclass field (``array_rows``)."""
    for field, path in YAML_PATHS.items():
        if path == "name":
            continue
        with pytest.raises(ConfigError) as e:
            config_from_dict(with_(raw(), path, 0))
        assert f"{path} must be positive, got 0" in str(e.value), (path, str(e.value))
        assert field not in str(e.value)


def test_sram_not_divisible_into_banks():
    with pytest.raises(ConfigError, match=re.escape(
            "config 'small': sram.size_bytes 16384 is not divisible into sram.banks 3 banks")):
        config_from_dict(with_(raw(), "sram.banks", 3))


def test_sram_banks_not_power_of_two():
    d = with_(with_(raw(), "sram.banks", 6), "sram.size_bytes", 6 * 4096)
    with pytest.raises(ConfigError, match=re.escape("config 'small': sram.banks must be a power of two, got 6")):
        config_from_dict(d)


def test_bank_not_whole_words():
    # 16 banks of 12 bytes with 8-byte words
    d = with_(with_(raw(), "sram.size_bytes", 192), "sram.banks", 16)
    with pytest.raises(ConfigError, match=re.escape(
            "config 'small': SRAM bank of 12 bytes (sram.size_bytes / sram.banks) is not a whole number of "
            "8-byte words (array.rows)")):
        config_from_dict(d)


def test_sram_exceeds_word_address():
    d = with_(raw(), "sram.size_bytes", 8 << 17)  # 2^17 words of 8 bytes
    with pytest.raises(ConfigError, match=re.escape(
            "config 'small': sram.size_bytes 1048576 is 131072 words of 8 bytes (array.rows): more than the "
            "16-bit word address reaches (65536)")):
        config_from_dict(d)


def test_accumulator_too_deep():
    with pytest.raises(ConfigError, match=re.escape(
            "config 'small': accumulator.depth_rows 65537 exceeds 65536")):
        config_from_dict(with_(raw(), "accumulator.depth_rows", 65537))


@pytest.mark.parametrize("name,rows,cols,planes,groups,pw", [
    ("wide", 64, 256, 4, 1, 36), ("narrow", 16, 256, 16, 1, 144),
    ("small_wide", 8, 16, 2, 1, 18), ("small_tall", 16, 8, 1, 2, 5)])
def test_non_square_configs(name, rows, cols, planes, groups, pw):
    c = load_config(name)
    assert (c.array_rows, c.array_cols, c.word_bytes) == (rows, cols, rows)
    assert (c.requant_planes, c.lane_groups, c.param_words, c.dw_param_words) == (planes, groups, pw, 9)


def test_wide_is_seed_but_the_array():
    seed, wide = load_config("seed").to_dict(), load_config("wide").to_dict()
    assert wide["array_rows"] * wide["array_cols"] == seed["array_rows"] * seed["array_cols"] == 16384
    diff = {k for k in seed if seed[k] != wide[k]}
    assert diff == {"name", "array_rows", "array_cols"}


@pytest.mark.parametrize("rows,cols,msg", [
    (8, 12, "array.cols must be a power of two >= 4, got 12 (an accumulator row of cols int32 must "
            "fill whole words or whole lane groups)"),
    (8, 2, "array.cols must be a power of two >= 4, got 2"),
    (8, 256, "array 8x256: cols/rows 32 must lie in [1/16, 16] (REQUANT's lane_group field and the "
             "VPU's plane sequencer)"),
    (128, 4, "array 128x4: cols/rows 0.03125 must lie in [1/16, 16]"),
])
def test_impossible_non_square_array(rows, cols, msg):
    d = with_(with_(raw(), "array.rows", rows), "array.cols", cols)
    d = with_(with_(d, "sram.size_bytes", 4096 * rows), "dma.burst_bytes", max(64, rows))
    with pytest.raises(ConfigError, match=re.escape(f"config 'small': {msg}")):
        config_from_dict(d)


def test_array_rows_not_power_of_two():
    d = with_(with_(raw(), "array.rows", 12), "array.cols", 12)
    with pytest.raises(ConfigError, match=re.escape(
            "config 'small': array.rows must be a power of two >= 4, got 12")):
        config_from_dict(d)


def test_array_larger_than_sram_can_feed():
    # seed with a 256x256 array: 131072 / 256 = 512 words < 4 tiles of 256 words
    d = with_(with_(raw("seed"), "array.rows", 256), "array.cols", 256)
    with pytest.raises(ConfigError, match=re.escape(
            "config 'seed': sram.size_bytes 131072 (512 words) cannot hold two weight tiles (array.cols = 256 "
            "words each) and two "
            "activation tiles of the same size: the array is larger than the SRAM can feed")):
        config_from_dict(d)


def test_array_exactly_four_tiles_is_accepted():
    d = with_(with_(with_(raw("seed"), "array.rows", 256), "array.cols", 256), "sram.size_bytes", 4 * 256 * 256)
    c = config_from_dict(d)
    assert c.sram_words == 4 * c.array_cols


@pytest.mark.parametrize("burst", [96, 48, 100])
def test_burst_not_power_of_two(burst):
    with pytest.raises(ConfigError, match=re.escape(
            f"config 'small': dma.burst_bytes must be a power of two, got {burst}")):
        config_from_dict(with_(raw(), "dma.burst_bytes", burst))


@pytest.mark.parametrize("burst", [8, 16])
def test_burst_smaller_than_32(burst):
    d = with_(with_(raw(), "dma.burst_bytes", burst), "ddr.beat_bytes", 8)
    with pytest.raises(ConfigError, match=re.escape(
            f"config 'small': dma.burst_bytes must be at least 32 (one instruction), got {burst}")):
        config_from_dict(d)


def test_burst_32_is_accepted():
    assert config_from_dict(with_(raw(), "dma.burst_bytes", 32)).dma_burst_bytes == 32


def test_beat_larger_than_burst():
    with pytest.raises(ConfigError, match=re.escape(
            "config 'small': ddr.beat_bytes must be a power of two <= dma.burst_bytes (64), got 128")):
        config_from_dict(with_(raw(), "ddr.beat_bytes", 128))


def test_ddr_latency_too_small():
    with pytest.raises(ConfigError, match=re.escape("config 'small': ddr.latency_cycles must be >= 2, got 1")):
        config_from_dict(with_(raw(), "ddr.latency_cycles", 1))


def test_ddr_address_bits_fixed():
    with pytest.raises(ConfigError, match=re.escape("config 'small': ddr.address_bits must be 40, got 32")):
        config_from_dict(with_(raw(), "ddr.address_bits", 32))


def test_quant_regs_fixed():
    with pytest.raises(ConfigError, match=re.escape(
            "config 'small': quant_regs.banks and quant_regs.entries must be 4 and 16 (6-bit index in the "
            "ISA), got 4 and 8")):
        config_from_dict(with_(raw(), "quant_regs.entries", 8))


def test_queue_depth_not_power_of_two():
    with pytest.raises(ConfigError, match=re.escape(
            "config 'small': queues.depth must be a power of two >= 2, got 3")):
        config_from_dict(with_(raw(), "queues.depth", 3))


def test_fetch_line_buffers():
    with pytest.raises(ConfigError, match=re.escape("config 'small': fetch.line_buffers must be 1 or 2, got 3")):
        config_from_dict(with_(raw(), "fetch.line_buffers", 3))


# ---- clocks ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dom, mhz, period", [("core", 300, 3333.3333333333335), ("ddr", 7, 142857.14285714287),
                                              ("dma", 3, 333333.3333333333)])
def test_inexact_clock_period(dom, mhz, period):
    with pytest.raises(ConfigError, match=re.escape(
            f"config 'small': clocks.{dom}.freq_mhz: {mhz} MHz has a period of {period} ps, "
            "not a whole number of ps")):
        config_from_dict(with_(raw(), f"clocks.{dom}.freq_mhz", mhz))


def test_inexact_clock_period_via_file_names_path(tmp_path):
    p = write(tmp_path, with_(raw(), "clocks.core.freq_mhz", 300))
    with pytest.raises(ConfigError, match=re.escape(f"{p}: config 'hw': clocks.core.freq_mhz: 300 MHz")):
        load_config(p)


def test_zero_clock_frequency():
    with pytest.raises(ConfigError, match=re.escape(
            "config 'small': clocks.ddr.freq_mhz: clock frequency must be a positive integer of MHz, got 0")):
        config_from_dict(with_(raw(), "clocks.ddr.freq_mhz", 0))


@pytest.mark.parametrize("dom, phase, period", [("ddr", 1250, 1250), ("dma", -1, 2500), ("core", 1000, 1000)])
def test_phase_out_of_range(dom, phase, period):
    with pytest.raises(ConfigError, match=re.escape(
            f"config 'small': clocks.{dom}.phase_ps must be in [0, {period}) ps, got {phase}")):
        config_from_dict(with_(raw(), f"clocks.{dom}.phase_ps", phase))


@pytest.mark.parametrize("path, phase, a, b, pa, pb", [
    ("clocks.ddr.phase_ps", 0, "core", "ddr", 0, 0),
    ("clocks.ddr.phase_ps", 250, "core", "ddr", 0, 250),    # gcd(1000, 1250) = 250
    ("clocks.dma.phase_ps", 500, "core", "dma", 0, 500),    # gcd(1000, 2500) = 500
    ("clocks.dma.phase_ps", 100, "ddr", "dma", 100, 100),   # gcd(1250, 2500) = 1250
    ("clocks.dma.phase_ps", 1350, "ddr", "dma", 100, 1350),
])
def test_phases_sharing_an_edge(path, phase, a, b, pa, pb):
    with pytest.raises(ConfigError, match=re.escape(
            f"config 'small': clocks {a} and {b} share rising edges (phases {pa} and {pb} ps): "
            "choose phases so that no edges coincide")):
        config_from_dict(with_(raw(), path, phase))


def test_other_distinct_phases_accepted():
    d = with_(with_(raw(), "clocks.ddr.phase_ps", 130), "clocks.dma.phase_ps", 70)
    c = config_from_dict(d)
    assert (c.clk_ddr.phase_ps, c.clk_dma.phase_ps) == (130, 70)


# ---- files ---------------------------------------------------------------------------------
def test_unknown_name():
    with pytest.raises(ConfigError, match=re.escape(
            "hardware config 'nosuchchip' not found (known names: ['medium', 'narrow', 'seed', 'small', 'small_tall', 'small_wide', 'wide'])")):
        load_config("nosuchchip")


def test_missing_file_path(tmp_path):
    p = tmp_path / "gone.yaml"
    with pytest.raises(ConfigError, match=re.escape(f"hardware config {str(p)!r} not found")):
        load_config(p)


def test_invalid_yaml(tmp_path):
    p = write(tmp_path, "name: [unclosed\narray: {rows: 8\n")
    with pytest.raises(ConfigError, match=re.escape(f"{p}: not valid YAML: ")):
        load_config(p)


def test_tab_indented_yaml(tmp_path):
    p = write(tmp_path, "name: x\narray:\n\trows: 8\n")
    with pytest.raises(ConfigError, match=re.escape(f"{p}: not valid YAML")):
        load_config(p)


def test_not_utf8_file(tmp_path):
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(ConfigError, match=re.escape(
            f"{p}: not a hardware config YAML file (not UTF-8 text: byte 0xff at offset 0)")):
        load_config(p)


def test_empty_file(tmp_path):
    p = write(tmp_path, " \n")
    with pytest.raises(ConfigError, match=re.escape(f"{p}: the file is empty (copy one of {CONFIG_DIR}/*.yaml")):
        load_config(p)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path}: is a folder, not a hardware config YAML file")):
        load_config(tmp_path)


def test_unreadable_file(tmp_path):
    p = tmp_path / "locked.yaml"
    p.write_text("name: x\n")
    p.chmod(0)
    if os.access(p, os.R_OK):           # root reads anything
        pytest.skip("running as root")
    with pytest.raises(ConfigError, match=re.escape(f"{p}: cannot read hardware config: Permission denied")):
        load_config(p)


def test_file_errors_name_the_path(tmp_path):
    p = write(tmp_path, without(raw(), "fetch"))
    with pytest.raises(ConfigError, match=re.escape(f"{p}: config: missing key(s) ['fetch']")):
        load_config(p)
    p = write(tmp_path, with_(raw(), "sram.banks", 3), "b.yaml")
    with pytest.raises(ConfigError, match=re.escape(f"{p}: config 'b': sram.size_bytes 16384 is not divisible")):
        load_config(p)


# ---- config hash ----------------------------------------------------------------------------
def test_hash_stable_across_loads(tmp_path):
    a, b = load_config("seed"), load_config("seed")
    assert a is not b
    assert a.hash_bytes() == b.hash_bytes()
    assert len(a.hash_bytes()) == 32
    assert a.hash_hex() == a.hash_bytes().hex() and len(a.hash_hex()) == 64
    # same content and name, different file, different key order and comments: same hash (the
    # name is part of it: a copy in a file of another stem is another config, config_name())
    d = raw("seed")
    reordered = dict(reversed(list(d.items())))
    p = write(tmp_path, yaml.safe_dump(reordered, sort_keys=False), "seed.yaml")
    assert load_config(p).hash_bytes() == a.hash_bytes()
    assert load_config(write(tmp_path, yaml.safe_dump(reordered), "copy.yaml")).hash_bytes() != a.hash_bytes()


def test_shipped_hashes_differ():
    assert load_config("seed").hash_bytes() != load_config("small").hash_bytes()


def _changed(v):
    if isinstance(v, ClockConfig):
        return ClockConfig(v.freq_mhz, v.phase_ps + 1)
    if isinstance(v, str):
        return v + "x"
    return v + 1


@pytest.mark.parametrize("fld", [f.name for f in dataclasses.fields(HwConfig) if f.name not in ("energy", "area")])
def test_hash_changes_with_every_field(fld):
    c = load_config("small")
    c2 = dataclasses.replace(c, **{fld: _changed(getattr(c, fld))})
    assert c2.hash_bytes() != c.hash_bytes()
    assert c2.hash_hex() != c.hash_hex()


@pytest.mark.parametrize("dom", ["core", "ddr", "dma"])
@pytest.mark.parametrize("attr", ["freq_mhz", "phase_ps"])
def test_hash_changes_with_every_clock_field(dom, attr):
    c = load_config("small")
    clk = getattr(c, f"clk_{dom}")
    c2 = dataclasses.replace(c, **{f"clk_{dom}": dataclasses.replace(clk, **{attr: getattr(clk, attr) + 1})})
    assert c2.hash_bytes() != c.hash_bytes()


def test_hash_changes_with_valid_yaml_edit(tmp_path):
    base = load_config("small").hash_bytes()
    for path, value in [("ddr.latency_cycles", 9), ("clocks.ddr.phase_ps", 130), ("name", "small2"),
                        ("queues.depth", 8), ("accumulator.depth_rows", 256)]:
        p = write(tmp_path, with_(raw(), path, value))
        assert load_config(p).hash_bytes() != base, path


def test_burst_must_fill_whole_words():
    d = with_(with_(raw("seed"), "array.rows", 512), "array.cols", 512)
    d = with_(with_(d, "sram.size_bytes", 2 * 1024 * 1024), "accumulator.depth_rows", 256)
    with pytest.raises(ConfigError, match=re.escape(
            "config 'seed': dma.burst_bytes 256 must be a multiple of the SRAM word "
            "(512 bytes = array.rows): a burst fills whole words")):
        config_from_dict(d)


def test_energy_and_area_tables_are_optional_validated_and_not_hashed():
    base = yaml.safe_load((CONFIG_DIR / "seed.yaml").read_text())
    seed = config_from_dict(base)
    assert seed.energy.mac_pj == 0.3 and seed.sram_pj_per_byte == pytest.approx(15.0 / 8)   # 16 KiB banks
    tuned = config_from_dict({**base, "energy": {"mac_pj": 0.5, "sram_pj_per_byte": 3}, "area": {"pe_um2": 400}})
    assert (tuned.energy.mac_pj, tuned.sram_pj_per_byte, tuned.area.pe_um2) == (0.5, 3.0, 400.0)
    assert tuned.hash_bytes() == seed.hash_bytes()
    with pytest.raises(ConfigError, match=r"energy: unknown key\(s\) \['mac_nj'\]; expected some of"):
        config_from_dict({**base, "energy": {"mac_nj": 1}})
    with pytest.raises(ConfigError, match=r"area.pe_um2: expected a positive number, got -3"):
        config_from_dict({**base, "area": {"pe_um2": -3}})


def test_cost_tables_read_yaml_exponents_and_an_explicit_default():
    base = yaml.safe_load((CONFIG_DIR / "small.yaml").read_text())
    c = config_from_dict({**base, **yaml.safe_load("area: {pe_um2: 1e3}\nenergy: {sram_pj_per_byte: null}")})
    assert c.area.pe_um2 == 1000.0 and c.energy.sram_pj_per_byte is None and c.sram_pj_per_byte == 1.25
    with pytest.raises(ConfigError, match=r"energy.mac_pj: expected a positive number, got 'abc'"):
        config_from_dict({**base, "energy": {"mac_pj": "abc"}})


# ---- the name of a config file of the user's own ---------------------------------------------
def test_copied_config_is_named_by_its_file(tmp_path):
    """A copy of small.yaml that still says ``name: small`` is named by its file's stem; a file
    without ``name`` too; an explicit name other than a built-in config's is kept; the built-in
    configs keep theirs."""
    text = (CONFIG_DIR / "small.yaml").read_text()
    (tmp_path / "my_chip.yaml").write_text(text)
    assert load_config(tmp_path / "my_chip.yaml").name == "my_chip"
    (tmp_path / "no_name.yaml").write_text(yaml.safe_dump({k: v for k, v in raw().items() if k != "name"}))
    assert load_config(tmp_path / "no_name.yaml").name == "no_name"
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(with_(raw(), "name", "fast_chip")))
    assert load_config(tmp_path / "x.yaml").name == "fast_chip"
    assert load_config("small").name == "small" and load_config(CONFIG_DIR / "seed.yaml").name == "seed"
    assert load_config(tmp_path / "my_chip.yaml").hash_hex() != load_config("small").hash_hex()


def test_sweep_of_two_copies_that_both_say_small(tmp_path):
    """Two different files, both ``name: small``: their sweep points are named by the files and
    their cache keys differ."""
    from tpusim.flow import sweep
    a, b = tmp_path / "chip_a.yaml", tmp_path / "chip_b.yaml"
    a.write_text(yaml.safe_dump(raw()))
    b.write_text(yaml.safe_dump(with_(raw(), "dma.outstanding", 4)))
    ca, cb = sweep.candidates(str(a), {}, [])[0], sweep.candidates(str(b), {"array": ["8x8"]}, [])[0]
    assert (ca.name, cb.name) == ("chip_a", "chip_b-8x8")
    md = sweep.ModelData("m", None, None, "digest")
    assert sweep._point_key(md, ca.cfg) != sweep._point_key(md, cb.cfg)
