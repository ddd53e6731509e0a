"""docs/isa.md is generated from tpusim.arch.isa and must be current."""
import pytest

from tpusim.arch import isa, isa_doc
from tpusim.arch.errors import IsaError


def test_isa_doc_is_current():
    assert isa_doc.doc_is_current(), "docs/isa.md is stale: run `python -m tpusim.arch.isa_doc`"


def test_every_field_documented_with_its_bits():
    text = isa_doc.isa_doc_text()
    for spec in isa.OPCODES.values():
        assert f"### {spec.name}" in text
        for f, lsb in spec.layout():
            assert f"| `{f.name}` | [{lsb + f.bits - 1}:{lsb}] | {f.bits} |" in text


def test_missing_field_description_is_an_error(monkeypatch):
    sem, tim, fields = isa_doc._OPS["ADD"]
    monkeypatch.setitem(isa_doc._OPS, "ADD", (sem, tim, {k: v for k, v in fields.items() if k != "relu"}))
    with pytest.raises(IsaError, match=r"ADD: fields without description \['relu'\]"):
        isa_doc.isa_doc_text()


def test_check_cli(tmp_path, monkeypatch):
    stale = tmp_path / "isa.md"
    stale.write_text("old")
    monkeypatch.setattr(isa_doc, "DOC_PATH", stale)
    assert isa_doc.main(["--check"]) == 1
