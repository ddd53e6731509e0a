"""Random RTL operator mutants (stressgen.mutate_rtl, stressgen.rtl_mutants): the tokenizer never
mutates inside a literal, a comment or a string, only assign/always expressions are sites, a
draw is reproducible from its seed, and one real mutant is built and caught end to end."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cocotb_tests.build import BUILD_ROOT, tree_suffix
from stressgen.mutants import main
from stressgen.mutate_rtl import (
    MutateError,
    apply,
    catalogue,
    is_equivalent,
    literal_value,
    load_equivalents,
    pick,
    sites,
    tokenize,
    write_tree,
)
from stressgen.rtl_mutants import hunt_site
from tpusim.arch.config import load_config

REPO = Path(__file__).resolve().parent.parent
RTL = REPO / "rtl"

SRC = """\
// a == b && c < d in a comment
module m (input logic [16:0] a, output logic [16:0] y, output logic z);
  localparam int unsigned P = 4 == 4 ? 1 + 1 : 2;   /* x != y || w */
  logic [7:0] h;
  initial $display("a == b + 1");
  assign y = a + 17'd1;
  assign h = 'h1F + 8'b0000_0001;
  assign z = (a[3:0] == 4'hF) && (a != '0);
  always_ff @(posedge clk) begin
    if (a <= 17'd5) y_q <= a - 1;
  end
endmodule
"""


def _texts(ss):
    return sorted((s.op, s.orig, s.new) for s in ss)


def test_tokenizer_keeps_literals_comments_and_strings_whole():
    toks = tokenize(SRC)
    assert "".join(t.text for t in toks) == SRC
    kinds = {t.text: t.kind for t in toks}
    for lit in ("17'd1", "'h1F", "8'b0000_0001", "4'hF", "'0", "17'd5"):
        assert kinds[lit] == "number", lit
    assert kinds["// a == b && c < d in a comment"] == "comment"
    assert kinds['"a == b + 1"'] == "string"
    assert literal_value("17'd1") == (17, 1) and literal_value("'h1F") == (None, 31)


def test_sites_only_in_assign_and_always_never_inside_literals():
    ss = sites(SRC, "m.sv")
    bounds = {t.start for t in tokenize(SRC)} | {t.end for t in tokenize(SRC)}
    for s in ss:
        line = SRC.splitlines()[s.line - 1]
        assert line.lstrip().startswith(("assign", "if")), s      # no localparam, comment, string
        assert s.start in bounds and s.end in bounds, s            # whole tokens only
    got = _texts(ss)
    assert ("const", "17'd1", "17'd2") in got                      # the literal replaced whole
    assert ("const", "8'b0000_0001", "8'd2") in got
    assert ("eq_ne", "==", "!=") in got and ("eq_ne", "!=", "==") in got
    assert ("and_or", "&&", "||") in got
    assert ("rel", "<=", "<") in got                               # the comparison in the if
    assert sum(1 for op, o, _ in got if op == "rel") == 1          # not the '<=' assignment
    assert ("invert", "(a <= 17'd5)", "(!(a <= 17'd5))") in got
    assert ("drop", "+ 17'd1", "") in got and ("const", "1", "2") in got   # a - 1 -> a - 2
    assert not any("1F" in o and op == "const" for op, o, _ in got)       # 'h1F is not a 1
    for s in ss:                                                   # every edit lands on its text
        assert apply(s, SRC)[s.start:s.start + len(s.new)] == s.new


def test_part_select_bounds_casts_and_bug_branches_are_not_sites():
    src = """module m;
  assign a = b[W-1:0] + (W+1)'(c) + d[i*8 +: 8];
`ifdef TPU_BUG_X
  assign e = f == g;
`else
  assign e = f != g;
`endif
endmodule
"""
    got = _texts(sites(src, "m.sv"))
    assert ("eq_ne", "!=", "==") in got and ("eq_ne", "==", "!=") not in got
    assert not any(o in ("-1", "+1", "- 1", "1") for _, o, _ in got)       # widths untouched
    assert ("drop", "+ d[i*8 +: 8]", "") in got


def test_tree_rejects_a_stale_site_and_equivalents_file(tmp_path):
    s = sites(SRC, "m.sv")[0]
    with pytest.raises(MutateError, match="the RTL changed"):
        apply(s, "x" + SRC)
    bad = tmp_path / "eq.yaml"
    bad.write_text("- site: a.sv:1:1 rel\n  orig: '<'\n  new: '<='\n")
    with pytest.raises(MutateError, match="entry 1 must have exactly the fields"):
        load_equivalents(bad)
    good = tmp_path / "ok.yaml"
    good.write_text(json.dumps([{"site": s.key, "orig": s.orig, "new": s.new, "reason": "r"}]))
    eqs = load_equivalents(good)
    assert is_equivalent(s, eqs)
    assert not is_equivalent(sites(SRC, "m.sv")[1], eqs)


def test_draw_is_reproducible_and_tree_has_one_edit(tmp_path):
    a, b = pick(RTL, 12, 7), pick(RTL, 12, 7)
    assert a == b and len(set(a)) == 12
    assert pick(RTL, 12, 8) != a
    assert len(catalogue(RTL)) > 500
    with pytest.raises(MutateError, match="mutant count must be >= 1, got 0"):
        pick(RTL, 0, 1)
    tree = write_tree(a[0], RTL, tmp_path / "t")
    diff = [f.name for f in sorted(RTL.glob("*.sv")) if (tree / f.name).read_text() != f.read_text()]
    assert diff == [a[0].file]


@pytest.mark.rtl
@pytest.mark.slow          # a Verilator build of its own (~30-100 s on a loaded machine)
def test_one_real_mutant_built_and_caught(tmp_path, capsys):
    """The MXU's last-access compare inverted (tpu_mxu.sv `last_acc`, == -> !=): built from
    its own tree (build folder -src-<id>, removed afterwards) and caught by the first programs."""
    site = "tpu_mxu.sv:123:35 eq_ne"
    rc = main(["--no-bugs", "--site", site, "--max-programs", "5", "--no-waves", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    rec = json.loads((tmp_path / "random.json").read_text())
    rows = rec["mutants"]
    assert rec["max_programs"] == 5 and rows[0]["key"] == site and rows[0]["status"] == "caught" and rows[0]["programs"] <= 5
    assert "1 caught within 5 programs" in out
    assert not list((REPO / "build" / "rtl").glob("*-src-tpu_mxu-l123c35-eq_ne"))   # build removed


def test_every_site_of_the_rtl_is_whole_tokens_of_code():
    """On the real RTL: each edit starts and ends on token boundaries, its tokens are code
    (no comment, string or directive), and no site is in a package (they hold declarations only)."""
    for f in sorted(RTL.glob("*.sv")):
        text = f.read_text()
        toks = tokenize(text)
        starts = {t.start: t for t in toks}
        ends = {t.end for t in toks}
        for s in sites(text, f.name):
            assert not f.name.endswith("_pkg.sv"), s
            assert s.start in starts and s.end in ends, s
            inside = [t for t in toks if s.start <= t.start < s.end]
            assert all(t.kind not in ("comment", "string", "directive") for t in inside), s


@pytest.mark.rtl
def test_a_mutant_that_does_not_build_is_not_built(tmp_path):
    """Verilator refuses the tree (a syntax error): status not_built with the %Error line, no
    program runs, no build folder is left."""
    site = replace(next(s for s in catalogue(RTL) if s.op == "eq_ne"), new="== ==")

    def no_runs(*args):
        raise AssertionError("a program ran on a mutant that does not build")
    row = hunt_site(site, load_config("small"), 3, tmp_path, no_runs)
    assert row.status == "not_built" and row.error.startswith("%Error:") and "syntax error" in row.error
    tree = tmp_path / "trees" / row.id
    assert not list(BUILD_ROOT.glob(f"small-*{tree_suffix(tree)}"))


def test_report_of_saved_runs_uses_their_budget(tmp_path, capsys):
    """`--report` merges random.json records and states the budget they ran with (not the
    default 200); a file that is not such a record is one error line; --no-bugs alone is refused."""
    from stressgen.rtl_mutants import MutantRow, rows_json
    rows = [MutantRow("a-l1c1-rel", "rtl/a.sv:1: '<' -> '<='", "a.sv:1:1 rel", "<", "<=", "caught", programs=3, seed=2,
                      reason="counters"),
            MutantRow("b-l2c2-drop", "rtl/b.sv:2: '+ 1' -> ''", "b.sv:2:2 drop", "+ 1", "", "survived", programs=50)]
    (tmp_path / "r.json").write_text(json.dumps(rows_json(rows, 50)))
    assert main(["--report", str(tmp_path / "r.json")]) == 1            # one survivor not reviewed
    out = capsys.readouterr().out
    assert "1 caught within 50 programs, 1 survived" in out and "rtl/b.sv:2" in out
    (tmp_path / "bad.json").write_text(json.dumps({"max_programs": 5, "mutants": [{"id": "x"}]}))
    assert main(["--report", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "bad.json: not a random.json of python -m stressgen.mutants (TypeError" in err and err.count("\n") == 1
    assert main(["--no-bugs"]) == 2
    assert "--no-bugs leaves nothing to run: add --random N or --site KEY" in capsys.readouterr().err


def test_every_reviewed_equivalent_mutant_is_a_site_of_today_s_rtl():
    """stressgen/equivalent_mutants.yaml lists only mutants of the current RTL (same site key,
    original and mutated text): an RTL edit that moves or removes a reviewed line must update
    the list (and re-review it), not leave an entry that silently matches nothing."""
    eqs = load_equivalents(REPO / "stressgen" / "equivalent_mutants.yaml")
    current = {s.key: s for s in catalogue(RTL)}
    stale = sorted(k for k, e in eqs.items() if k not in current or not is_equivalent(current[k], eqs))
    assert not stale, f"stale entries in stressgen/equivalent_mutants.yaml: {stale}"
