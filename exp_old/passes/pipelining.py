"""Which scopes time something other than what their source says, because Triton pipelined it.

In a loop that Triton software-pipelines (``num_stages > 1``), the loads written inside
``with pl.scope("load"):`` become asynchronous copies issued iterations ahead, and only
their wait stays where the source put them; a ``tl.dot`` becomes an asynchronous MMA whose
completion is waited for in a later iteration. The markers stay where the source put them,
so such a scope times the wait, not the copy. This module finds those cases in the PTX
before the rewrite, with no guessing about Triton's passes:

* the scope's **source lines**: from its enter marker's ``.loc`` line to its exit marker's,
  or to the end of the ``with pl.scope(...)`` block that starts on the enter line (read from
  the kernel's file, named by the PTX's ``.file 1``);
* the **asynchronous operations** whose ``.loc`` line lies in that range: ``cp.async``
  (with ``cp.async.commit_group`` / ``wait_group N``), TMA ``cp.async.bulk.tensor`` (waited
  on an ``mbarrier``), ``wgmma.mma_async`` (``wgmma.wait_group N``);
* where they are in the final code: issued inside the scope's markers or not, and how many
  iterations ahead: ``N // groups committed per iteration + 1`` for copies waited with
  ``wait_group N``, ``N`` for MMAs, and for TMA copies (waited on an mbarrier) the copies
  the prologue issues before the loop over those the loop issues per iteration.

Each affected scope gets one note (``notes``); a scope whose operations run inside it and
are waited for inside it gets none.
"""
from __future__ import annotations

import ast
import re

_LOC_RE = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+")
_FILE_RE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')
_P = r"^\s*(?:@!?%\w+\s+)?"  # an instruction, predicated or not (TMA copies are issued by one thread)
_ISSUE = (("copy", re.compile(_P + r"cp\.async\.c[ag]\.")), ("tma", re.compile(_P + r"cp\.async\.bulk\.tensor")),
          ("mma", re.compile(_P + r"wgmma\.mma_async")))
_COMMIT_RE = re.compile(_P + r"cp\.async\.commit_group")
_COPY_WAIT_RE = re.compile(_P + r"cp\.async\.wait_group\s+(\d+)")
_MMA_WAIT_RE = re.compile(_P + r"wgmma\.wait_group\.sync\.aligned\s+(\d+)")
_BARRIER_WAIT_RE = re.compile(_P + r"mbarrier\.(?:try_wait|test_wait)")
_WHAT = {"copy": "load(s) (cp.async)", "tma": "TMA load(s) (cp.async.bulk.tensor)", "mma": "dot(s) (wgmma)"}


def with_block_ends(path: str) -> dict[int, int]:
    """Line of each ``with ...scope(...)`` statement in a Python file -> the last line of its block."""
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(isinstance(item.context_expr, ast.Call) and
                                              getattr(item.context_expr.func, "attr", None) == "scope"
                                              for item in node.items):
            out[node.lineno] = node.end_lineno or node.lineno
    return out


def _ops(lines: list[str]):
    """(line index, kind, family, N or None, source line) of every asynchronous operation,
    the source line being the last ``.loc`` of file 1 before it."""
    src = None
    for i, text in enumerate(lines):
        m = _LOC_RE.match(text)
        if m:
            src = int(m.group(2)) if m.group(1) == "1" else src
            continue
        for family, pattern in _ISSUE:
            if pattern.match(text):
                yield i, "issue", family, None, src
        for kind, family, pattern in (("wait", "copy", _COPY_WAIT_RE), ("wait", "mma", _MMA_WAIT_RE)):
            m = pattern.match(text)
            if m:
                yield i, kind, family, int(m.group(1)), src
        if _BARRIER_WAIT_RE.match(text):
            yield i, "wait", "tma", None, src
        if _COMMIT_RE.match(text):
            yield i, "commit", "copy", None, src


def _source_line_before(lines: list[str], index: int) -> int | None:
    for text in reversed(lines[max(0, index - 40):index]):
        m = _LOC_RE.match(text)
        if m and m.group(1) == "1":
            return int(m.group(2))
    return None


def notes(ptx: str, info) -> list[dict]:
    """One note per scope of ``info`` (a ``ptx_scan.PtxScan``) whose asynchronous operations
    Triton moved: {scope, operations, issued_outside, iterations_ahead, waits_inside, message}."""
    if not info.back_edges or not any(word in ptx for word in ("cp.async", "wgmma.mma_async")):
        return []  # no loop, or nothing asynchronous: nothing can have moved
    lines = ptx.split("\n")
    files = {m.group(1): m.group(2) for m in map(_FILE_RE.match, lines) if m}
    block_end = with_block_ends(files["1"]) if "1" in files else {}
    ops = list(_ops(lines))
    out, seen = [], set()  # one note per scope (a scope in nested loops is in every enclosing body)
    for head, branch, sites, _ in info.loop_bodies():
        commits = sum(1 for i, kind, *_ in ops if kind == "commit" and head < i < branch)
        for enter in (s for s in sites if s.kind == "enter"):
            exit_ = next((s for s in sites if s.kind == "exit" and s.name == enter.name and s.line > enter.line), None)
            if exit_ is None or enter.name in seen:
                continue
            seen.add(enter.name)
            first = _source_line_before(lines, enter.line)
            last = _source_line_before(lines, exit_.line)
            if first is None:
                continue
            last = max(block_end.get(first, last or first), last or first)
            mine = [op for op in ops if op[4] is not None and first <= op[4] <= last]
            waits = [op for op in ops if op[1] == "wait" and enter.line < op[0] < exit_.line]
            note = _note(enter.name, mine, waits, enter.line, exit_.line, head, branch, commits, files.get("1", ""))
            if note:
                out.append(note)
    return out


def _note(scope: str, mine, waits_in_scope, enter: int, exit_: int, head: int, branch: int, commits: int,
          path: str) -> dict | None:
    """The note for one scope: ``mine``, the asynchronous operations its source lines hold;
    ``waits_in_scope``, every wait between its markers (whatever line Triton gave it)."""
    issues = [op for op in mine if op[1] == "issue"]
    families = sorted({op[2] for op in issues}, key=["copy", "tma", "mma"].index)
    if not families:
        return None
    inside = lambda i: enter < i < exit_  # noqa: E731
    parts, ahead_all, outside_all, waits_all = [], {}, {}, {}
    for family in families:
        fam = [op for op in issues if op[2] == family]
        outside = all(not inside(op[0]) for op in fam)
        waits = [op for op in waits_in_scope if op[2] == family]
        if family == "copy":
            n = max((op[3] for op in waits if op[3] is not None), default=None)
            ahead = n // commits + 1 if n is not None and commits else (1 if outside else 0)
        elif family == "mma":
            ahead = max((op[3] for op in waits if op[3] is not None), default=0)
        else:  # TMA: waited on an mbarrier, which says no distance; the prologue does: it issues
            # the copies of the iterations ahead before the loop starts
            before = sum(1 for op in fam if op[0] < head)
            per_iteration = sum(1 for op in fam if head < op[0] < branch)
            ahead = before // per_iteration if before and per_iteration else (1 if outside else 0)
        if not outside and not ahead:
            continue  # issued and completed inside the scope: it times what it says
        lines_of = sorted({op[4] for op in fam})
        where = f"{path.rsplit('/', 1)[-1]}:{','.join(map(str, lines_of))}"
        if family == "mma":
            text = (f"its {_WHAT[family]} ({where}) run asynchronously: the scope times their issue and the wait for "
                    f"the ones issued {ahead} iteration(s) before, not this iteration's")
        elif outside:
            text = (f"its {len(lines_of)} {_WHAT[family]} ({where}) are issued {ahead} iteration(s) ahead by Triton's "
                    f"pipeliner, outside the scope; the scope times {'their wait' if waits else 'no part of them'}, "
                    "not the copy")
        else:
            text = (f"its {_WHAT[family]} ({where}) are issued in the scope but waited for {ahead} iteration(s) "
                    "later: the scope times the issue, not the copy")
        parts.append(text)
        ahead_all[family], outside_all[family], waits_all[family] = ahead, outside, bool(waits)
    if not parts:
        return None
    return {"scope": scope, "operations": list(ahead_all), "iterations_ahead": ahead_all,
            "issued_outside": outside_all, "waits_inside": waits_all,
            "message": f"scope {scope!r}: " + "; ".join(parts)}
