"""Random operator mutants of the RTL: a SystemVerilog tokenizer, the mutable sites and the trees.

``tokenize(text)`` splits SystemVerilog source into tokens (``Tok``); comments, strings, compiler
directives and literals (``17'd1``, ``'h1F``, ``'0``, ``42``) are single tokens, so no mutation
ever edits inside one. ``sites(text, path)`` lists the mutable sites of one file, only inside
``assign`` statements and ``always*`` blocks, outside `` `ifdef TPU_BUG_*`` branches (the
injected bugs of cocotb_tests/bugs.py) and outside any declaration (``parameter``/
``localparam``, functions: a package has no site). Operators (``Site.op``):

  ``eq_ne``     ``==`` <-> ``!=``
  ``and_or``    ``&&`` <-> ``||``
  ``rel``       ``<`` <-> ``<=``, ``>`` <-> ``>=`` (comparisons only: the ``<=`` of a
                non-blocking assignment is not one)
  ``const``     ``+ 1`` <-> ``+ 2`` and ``- 1`` <-> ``- 2`` (the literal replaced whole, its size kept)
  ``drop``      a binary ``+ - & | ^ && ||`` with its right operand removed (``a + b`` -> ``a``;
                not when a tighter operator follows: ``a && b == c`` keeps ``b == c`` whole)
  ``invert``    ``if (c)`` -> ``if (!(c))`` (not the reset conditions on ``rst_ni``: every
                program catches those)

``catalogue(rtl_dir)`` is every site of every ``*.sv`` file, in file then position order;
``pick(rtl_dir, n, seed)`` draws ``n`` of them with ``random.Random(seed)`` (the same seed and
RTL give the same mutants); ``write_tree(site, rtl_dir, dst)`` copies the RTL folder with that
one edit. ``Site.key`` (``file:line:col op``) names a mutant in reports and in the reviewed
list of equivalent mutants (``load_equivalents``).
"""
from __future__ import annotations

import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from tpusim.arch.errors import TpuError


class MutateError(TpuError):
    """A mutant request that cannot be met (unknown site, bad equivalents file line)."""


@dataclass(frozen=True)
class Tok:
    """One token: ``kind`` in ws, comment, string, directive, number, ident, op, tick;
    ``start``/``end`` character offsets, ``line`` 1-based."""
    kind: str
    text: str
    start: int
    line: int

    @property
    def end(self) -> int:
        return self.start + len(self.text)


_OPS = sorted("""<<< >>> === !== ==? !=? == != <= >= && || << >> ** -> ++ -- += -= *= /= &= |= ^=
             :: +: -: .* ## @@ ( ) [ ] { } ; , . : ? = < > + - * / % & | ^ ~ ! @ # $""".split(),
              key=len, reverse=True)
_TOKEN = re.compile("|".join([
    r"(?P<ws>\s+)",
    r"(?P<comment>//[^\n]*|/\*.*?\*/)",
    r'(?P<string>"(?:\\.|[^"\\\n])*")',
    r"(?P<directive>`\w+)",
    r"(?P<number>(?:\d[\d_]*\s*)?'[sS]?[bBoOdDhH]\s*[0-9a-fA-FxXzZ?_]+|'[01xXzZ](?![\w'])"
    r"|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)",
    r"(?P<ident>[A-Za-z_][\w$]*|\\\S+|\$[A-Za-z_][\w$]*)",
    r"(?P<tick>')",
    "(?P<op>" + "|".join(re.escape(o) for o in _OPS) + ")",
]), re.S)


def tokenize(text: str) -> list[Tok]:
    """Every token of ``text`` (whitespace and comments included, so ``''.join`` gives it back).
    Raises MutateError naming the line of a character that starts no token."""
    out, pos, line = [], 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise MutateError(f"line {line}: cannot tokenize {text[pos:pos + 20]!r}")
        out.append(Tok(m.lastgroup, m.group(), pos, line))
        line += m.group().count("\n")
        pos = m.end()
    return out


def significant(toks: list[Tok]) -> list[Tok]:
    return [t for t in toks if t.kind not in ("ws", "comment")]


# ------------------------------------------------------------------------------ regions
def _compiled_mask(toks: list[Tok]) -> list[bool]:
    """Per significant token: compiled in the default build (outside `ifdef TPU_BUG_* branches
    and other conditionals on undefined macros). Directive tokens themselves are False."""
    defined, stack, mask = set(), [], []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "directive":
            name = toks[i + 1].text if i + 1 < len(toks) else ""
            if t.text in ("`ifdef", "`ifndef"):
                on = (name in defined) == (t.text == "`ifdef")
                stack.append(on)
                mask += [False, False]
                i += 2
                continue
            if t.text == "`else" and stack:
                stack[-1] = not stack[-1]
            elif t.text == "`endif" and stack:
                stack.pop()
            elif t.text == "`define" and all(stack):
                defined.add(name)
            mask.append(False)
        else:
            mask.append(all(stack))
        i += 1
    return mask


_BLOCK_OPEN = {"begin": "end", "case": "endcase", "casez": "endcase", "casex": "endcase",
               "fork": "join"}


def _skip_group(s: list[Tok], i: int) -> int:
    """Index after the bracket group opening at ``s[i]`` ((), [], {})."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    depth = 0
    for j in range(i, len(s)):
        if s[j].text in pairs:
            depth += 1
        elif s[j].text in pairs.values():
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


def _statement_end(s: list[Tok], i: int) -> int:
    """Index after the statement starting at ``s[i]`` (begin..end, if/else, case, for, or up to ';')."""
    t = s[i].text if i < len(s) else ""
    if t in ("unique", "priority", "unique0"):
        return _statement_end(s, i + 1)
    if t in _BLOCK_OPEN:
        depth, j = 0, i
        while j < len(s):
            if s[j].text in _BLOCK_OPEN:
                depth += 1
            elif s[j].text in ("end", "endcase", "join"):
                depth -= 1
                if depth == 0:
                    j += 1
                    return j + 2 if j < len(s) and s[j].text == ":" else j
            j += 1
        return j
    if t in ("if", "for", "while", "repeat"):
        j = _statement_end(s, _skip_group(s, i + 1))
        if t == "if" and j < len(s) and s[j].text == "else":
            j = _statement_end(s, j + 1)
        return j
    j = i
    while j < len(s) and s[j].text != ";":
        j = _skip_group(s, j) if s[j].text in "([{" else j + 1
    return j + 1


def regions(s: list[Tok]) -> list[tuple[int, int, str]]:
    """(first, end, kind) index ranges of significant tokens: ``assign`` statements (kind
    "assign", from after the keyword) and ``always*`` bodies (kind "always", after the event control)."""
    out, i = [], 0
    while i < len(s):
        t = s[i].text
        if t == "assign":
            j = _statement_end(s, i + 1)
            out.append((i + 1, j, "assign"))
            i = j
        elif t.startswith("always"):
            j = i + 1
            if j < len(s) and s[j].text == "@":
                j += 1
                j = _skip_group(s, j) if s[j].text == "(" else j + 1
            end = _statement_end(s, j)
            out.append((j, end, "always"))
            i = end
        else:
            i += 1
    return out


# ------------------------------------------------------------------------------ sites
@dataclass(frozen=True)
class Site:
    """One mutation: replace ``text[start:end]`` (``orig``) of ``file`` with ``new``."""
    file: str        # path relative to the RTL folder, e.g. "tpu_mxu_check.sv"
    line: int
    col: int         # 1-based column of ``start``
    op: str
    start: int
    end: int
    orig: str
    new: str

    @property
    def key(self) -> str:
        return f"{self.file}:{self.line}:{self.col} {self.op}"

    def describe(self) -> str:
        return f"rtl/{self.file}:{self.line}: {self.orig!r} -> {self.new!r} ({self.op})"


_SWAP = {"==": "!=", "!=": "==", "&&": "||", "||": "&&", "<": "<=", "<=": "<", ">": ">=", ">=": ">"}
_SWAP_OP = {"==": "eq_ne", "!=": "eq_ne", "&&": "and_or", "||": "and_or",
            "<": "rel", "<=": "rel", ">": "rel", ">=": "rel"}
_DROP_OPS = ("+", "-", "&", "|", "^", "&&", "||")
#: binding strength of the binary operators (higher binds tighter), IEEE 1800 table 11-2
_PREC = {"**": 12, "*": 11, "/": 11, "%": 11, "+": 10, "-": 10, "<<": 9, ">>": 9, "<<<": 9,
         ">>>": 9, "<": 8, "<=": 8, ">": 8, ">=": 8, "==": 7, "!=": 7, "===": 7, "!==": 7,
         "&": 6, "^": 5, "~^": 5, "|": 4, "&&": 3, "||": 2}
_UNARY = {"!", "~", "-", "+", "&", "|", "^", "~&", "~|", "~^"}
_NUM = re.compile(r"^(?:(\d+)\s*)?'([sS]?)([bBoOdDhH])\s*([0-9a-fA-F_]+)$")


def literal_value(text: str) -> tuple[int | None, int | None]:
    """(width or None, value) of a number token; (None, None) if it has x/z digits or is not integral."""
    t = text.replace("_", "")
    if t.isdigit():
        return None, int(t)
    m = _NUM.match(t)
    if not m:
        return None, None
    base = {"b": 2, "o": 8, "d": 10, "h": 16}[m.group(3).lower()]
    try:
        v = int(m.group(4), base)
    except ValueError:
        return None, None
    return (int(m.group(1)) if m.group(1) else None), v


def _const_new(text: str) -> str | None:
    w, v = literal_value(text)
    if v not in (1, 2):
        return None
    nv = 3 - v
    if w is None:
        return str(nv) if text.replace("_", "").isdigit() else f"'d{nv}"
    return f"{max(w, 2)}'d{nv}"


def _operand_end(s: list[Tok], i: int) -> int | None:
    """Index after the primary operand starting at ``s[i]`` (unary ops, identifier with scope,
    selects, fields and calls, literal, group, cast), None if none starts there."""
    while i < len(s) and s[i].text in _UNARY:
        i += 1
    if i >= len(s):
        return None
    t = s[i]
    if t.text in ("(", "{"):
        j = _skip_group(s, i)
    elif t.kind == "number" or t.kind == "ident":
        j = i + 1
        while j + 1 < len(s) and s[j].text == "::" and s[j + 1].kind == "ident":
            j += 2
    else:
        return None
    while j < len(s):
        if s[j].kind == "tick" and j + 1 < len(s) and s[j + 1].text in ("(", "{"):
            j = _skip_group(s, j + 1)
        elif s[j].text in ("[", "("):
            j = _skip_group(s, j)
        elif s[j].text == "." and j + 1 < len(s) and s[j + 1].kind == "ident":
            j += 2
        else:
            break
    return j


def _constant_widths(s: list[Tok]) -> list[bool]:
    """Per significant token: inside a width, not a value - the bounds of a part select
    ``[hi:lo]`` / the width after ``+:`` ``-:``, or the size group of a cast ``(W)'(x)``."""
    out = [False] * len(s)
    for i, t in enumerate(s):
        if t.text == "[":
            j = _skip_group(s, i)
            depth, cut = 0, None
            for k in range(i + 1, j - 1):
                if s[k].text in ("(", "[", "{"):
                    depth += 1
                elif s[k].text in (")", "]", "}"):
                    depth -= 1
                elif depth == 0 and s[k].text in (":", "+:", "-:"):
                    cut = i if s[k].text == ":" else k
                    break
            if cut is not None:
                out[cut:j] = [True] * (j - cut)
        elif t.text == "(" and (j := _skip_group(s, i)) < len(s) and s[j].kind == "tick":
            out[i:j] = [True] * (j - i)
    return out


def _ends_operand(t: Tok) -> bool:
    return t.kind in ("ident", "number") or t.text in (")", "]", "}")


def _region_sites(s: list[Tok], first: int, end: int, mask: list[bool], width: list[bool], emit) -> None:
    depth, rhs = 0, False
    for i in range(first, end):
        t = s[i]
        if t.text in ("(", "[", "{"):
            depth += 1
        elif t.text in (")", "]", "}"):
            depth -= 1
        if t.text == ";":
            rhs = False
            continue
        if not mask[i] or width[i]:
            continue
        if depth == 0 and t.text in ("=", "<=") and not rhs:
            rhs = True          # the assignment itself
            continue
        prev = s[i - 1] if i > 0 else None
        if t.text in _SWAP:
            emit(t, t, _SWAP_OP[t.text], _SWAP[t.text])
        if t.text in ("+", "-") and prev is not None and _ends_operand(prev) and i + 1 < end \
                and s[i + 1].kind == "number":
            new = _const_new(s[i + 1].text)
            if new is not None:
                emit(s[i + 1], s[i + 1], "const", new)
        if t.text in _DROP_OPS and prev is not None and _ends_operand(prev):
            j = _operand_end(s, i + 1)
            if j is not None and j <= end and (j == end or _PREC.get(s[j].text, 0) <= _PREC[t.text]):
                emit(t, s[j - 1], "drop", "")
        if t.text == "if" and i + 1 < end and s[i + 1].text == "(":
            j = _skip_group(s, i + 1)
            if not any(x.text == "rst_ni" for x in s[i + 2:j - 1]):   # reset: trivially caught
                emit(s[i + 1], s[j - 1], "invert", None)


def sites(text: str, file: str) -> list[Site]:
    """Every mutable site of one file's ``text`` (module docstring), in position order."""
    toks = tokenize(text)
    s = significant(toks)
    mask = _compiled_mask(s)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    out: list[Site] = []

    def emit(a: Tok, b: Tok, op: str, new: str | None) -> None:
        orig = text[a.start:b.end]
        if new is None:                                   # invert: (c) -> (!(c))
            new = "(!(" + orig[1:-1] + "))"
        col = a.start - line_starts[a.line - 1] + 1
        out.append(Site(file, a.line, col, op, a.start, b.end, orig, new))

    width = _constant_widths(s)
    for first, end, _ in regions(s):
        _region_sites(s, first, end, mask, width, emit)
    return out


def catalogue(rtl_dir: Path) -> list[Site]:
    """Every site of every ``*.sv`` of ``rtl_dir`` (sorted file names, then position)."""
    out = []
    for f in sorted(Path(rtl_dir).glob("*.sv")):
        out += sites(f.read_text(), f.name)
    return out


def pick(rtl_dir: Path, n: int, seed: int) -> list[Site]:
    """``n`` distinct sites drawn with ``random.Random(seed)`` (all of them if fewer),
    in draw order. Raises MutateError for n < 1."""
    if n < 1:
        raise MutateError(f"mutant count must be >= 1, got {n}")
    cat = catalogue(rtl_dir)
    return random.Random(seed).sample(cat, min(n, len(cat)))


def apply(site: Site, text: str) -> str:
    """``text`` with the site's edit; MutateError if the text there is not ``site.orig``."""
    if text[site.start:site.end] != site.orig:
        raise MutateError(f"{site.key}: expected {site.orig!r} at offset {site.start}, "
                          f"found {text[site.start:site.end]!r} (the RTL changed)")
    return text[:site.start] + site.new + text[site.end:]


def write_tree(site: Site, rtl_dir: Path, dst: Path) -> Path:
    """Copy ``rtl_dir`` (``*.sv``, ``*.vlt``) to ``dst`` with the site's one edit; returns ``dst``."""
    dst = Path(dst)
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in sorted(Path(rtl_dir).iterdir()):
        if f.suffix in (".sv", ".vlt"):
            text = f.read_text()
            (dst / f.name).write_text(apply(site, text) if f.name == site.file else text)
    return dst


# ------------------------------------------------------------------------------ equivalents
@dataclass(frozen=True)
class Equivalent:
    """A reviewed survivor: ``site`` (Site.key), ``orig``/``new`` text and the reviewer's ``reason``."""
    site: str
    orig: str
    new: str
    reason: str


_EQ_FIELDS = ("site", "orig", "new", "reason")


def load_equivalents(path: Path) -> dict[str, Equivalent]:
    """Reviewed equivalent mutants: a YAML list of {site, orig, new, reason} (``Site.key``, the
    original and mutated text, why no program can tell them apart); {} if the file is missing.
    Raises MutateError naming the entry with a missing or extra field."""
    p = Path(path)
    if not p.exists():
        return {}
    data = yaml.safe_load(p.read_text()) or []
    if not isinstance(data, list):
        raise MutateError(f"{p}: expected a list of {{site, orig, new, reason}}, got {type(data).__name__}")
    out = {}
    for n, e in enumerate(data, start=1):
        if not isinstance(e, dict) or set(e) != set(_EQ_FIELDS) or not str(e["reason"]).strip():
            raise MutateError(f"{p}: entry {n} must have exactly the fields {', '.join(_EQ_FIELDS)} "
                              f"and a non-empty reason, got {e!r}")
        out[str(e["site"])] = Equivalent(*(str(e[f]) for f in _EQ_FIELDS))
    return out


def is_equivalent(site: Site, eqs: dict[str, Equivalent]) -> bool:
    """``site`` is in the reviewed list with the same original and mutated text (a stale entry,
    whose RTL text changed, does not count)."""
    e = eqs.get(site.key)
    return e is not None and e.orig == site.orig and e.new == site.new


__all__ = ["Tok", "Site", "Equivalent", "MutateError", "tokenize", "sites", "catalogue", "pick",
           "apply", "write_tree", "load_equivalents", "is_equivalent", "literal_value"]
