"""Scopes that ask to time what their source says: ``pl.scope(name, pipelined=False)``.

In a loop that Triton software-pipelines, the loads written inside a scope become copies
issued iterations ahead and the scope times only their wait (``passes/pipelining.py``
names such scopes). A scope opened with ``pipelined=False`` leaves a *hint* marker in the
Triton IR beside its enter marker; this module, run on the TTIR before Triton's pipeliner
(the stage hook's ``ttir`` stage), gives the innermost ``scf.for`` around each hint the
attribute ``tt.num_stages = 1`` (what ``tl.range(..., num_stages=1)`` writes: the
pipeliner leaves that loop alone, its copies and dots complete where the source put them)
and removes the hints. The cost is the pipelining itself: the loop's loads no longer
overlap its math (measured by ``tests/test_gpu_pipelined.py``, numbers in docs/design.md);
the kernel's other loops keep theirs.

The rewrite is textual on the TTIR's printed form, which Triton parses back itself
(``ir.parse_mlir_module``, the same path as its kernel-override knob): a loop opens with a
line ending in ``{`` that holds ``scf.for``, and closes with a line starting with ``}``,
followed by its attributes (``{...}``) where it has any and its location.
"""
from __future__ import annotations

import re

from proton_lite.markers import MARKER_TAG

HINT = "unpipelined"
_HINT_RE = re.compile(r'^\s*%[\w#:]+ = tt\.elementwise_inline_asm "[^"]*' + re.escape(MARKER_TAG)
                      + r"\s+" + HINT + r"\s+([0-9a-f]+)\"")
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_STAGES_RE = re.compile(r"tt\.num_stages = \d+ : i32")


class UnpipelineError(ValueError):
    """A scope asked for ``pipelined=False`` where no loop holds it."""


def _closes_and_opens(line: str) -> tuple[bool, bool, str]:
    """Whether the line closes a region, opens one, and the line with its strings emptied."""
    bare = _STRING_RE.sub('""', line).strip()
    return bare.startswith("}"), bare.endswith("{"), bare


def _with_one_stage(close_line: str) -> str:
    """The closing line of a loop, with ``tt.num_stages = 1``."""
    if _STAGES_RE.search(close_line):
        return _STAGES_RE.sub("tt.num_stages = 1 : i32", close_line, count=1)
    head, brace, rest = close_line.partition("}")
    stripped = rest.lstrip()
    if stripped.startswith("{"):  # the loop has attributes already
        at = len(rest) - len(stripped) + 1
        return head + brace + rest[:at] + "tt.num_stages = 1 : i32, " + rest[at:]
    return head + brace + " {tt.num_stages = 1 : i32}" + rest


_LOC_DEF_RE = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$")
_LOC_USE_RE = re.compile(r"loc\((#loc\d*)\)\s*$")
_FILE_LINE_RE = re.compile(r'"([^"]+)":(\d+):\d+')
_ALIAS_RE = re.compile(r"#loc\d*")


def _source_line(line: str, aliases: dict[str, str]) -> str | None:
    """``file:line`` of a TTIR op from its location (followed through the aliases)."""
    use = _LOC_USE_RE.search(line)
    seen, todo = set(), [use.group(1)] if use else []
    while todo:
        name = todo.pop(0)
        if name in seen or name not in aliases:
            continue
        seen.add(name)
        found = _FILE_LINE_RE.search(aliases[name])
        if found:
            return f"{found.group(1).replace(chr(92), '/').rsplit('/', 1)[-1]}:{found.group(2)}"
        todo.extend(_ALIAS_RE.findall(aliases[name]))
    return None


def message(entry: dict) -> str:
    """What ``proton-lite compile``, the summary and the trace say about one such scope."""
    where = f" ({entry['source']})" if entry.get("source") else ""
    before = entry.get("had_stages")
    return (f"scope {entry['scope']!r}{where} asked for pipelined=False: the loop around it runs with one stage"
            f"{f' instead of {before}' if before and before > 1 else ''}, so the loads and dots written inside the "
            "scope complete inside it and it times them; the loop no longer overlaps its loads with its math "
            "(slower than the pipelined kernel by that overlap)")


def unpipeline(ttir: str, default_stages: int | None = None) -> tuple[str, list[dict]]:
    """``ttir`` with every hinted loop set to one stage and the hints removed, and what was
    done: one dict per hint (``scope``, ``source`` file:line of the scope, ``loop_line`` in
    the TTIR, ``had_stages``: the loop's own stage count, else ``default_stages``, and the
    ``message`` to show)."""
    if HINT not in ttir:
        return ttir, []
    lines = ttir.split("\n")
    aliases = {m.group(1): m.group(2) for m in map(_LOC_DEF_RE.match, lines) if m}
    stack: list[tuple[str, int]] = []  # open regions: ("for" | "other", line of the op)
    marked: dict[int, list[tuple[str, str | None]]] = {}  # loop line -> (scope, its source line) that asked
    keep, done = [], []
    for i, line in enumerate(lines):
        hint = _HINT_RE.match(line)
        if hint:
            scope = bytes.fromhex(hint.group(1)).decode("utf-8", "replace")
            loop = next((at for kind, at in reversed(stack) if kind == "for"), None)
            if loop is None:
                raise UnpipelineError(f"scope {scope!r}: pipelined=False keeps a loop from being software-pipelined, "
                                      "but this scope is in no for loop (range or tl.range); remove pipelined=False")
            marked.setdefault(loop, []).append((scope, _source_line(line, aliases)))
            continue  # the hint goes: it has no use and no record
        closes, opens, bare = _closes_and_opens(line)
        if closes and stack:
            kind, at = stack.pop()
            if kind == "for" and at in marked:
                had = _STAGES_RE.search(line)
                line = _with_one_stage(line)
                for scope, source in marked.pop(at):
                    entry = {"scope": scope, "source": source, "loop_line": at + 1,
                             "had_stages": int(had.group(0).split()[2]) if had else default_stages}
                    entry["message"] = message(entry)
                    done.append(entry)
        if opens:
            stack.append(("for" if " scf.for " in f" {bare}" and not closes else "other", i))
        keep.append(line)
    return "\n".join(keep), done


def reparse(mod, text: str):
    """A module parsed from ``text`` in ``mod``'s context (Triton's own override path)."""
    from proton_lite import compat
    return compat.parse_module(text, mod)
