"""Static check that every ``enter_scope`` is closed by a matching ``exit_scope`` on every path.

Triton's code generator sees one call at a time, so a scope left open at the end of a
kernel would only surface (as garbled records) at run time.  Instead, the first time a
``@triton.jit`` function with scope calls is compiled, its source is walked once as
structured code (if/else, for/while, with, return) keeping a stack of open scopes.  Each
problem is reported with the file and line of the source that caused it and the fix.

Rules (one function at a time: a helper may not close its caller's scope):
  * ``exit_scope(n)`` needs an open scope and ``n`` must be the innermost one;
  * both branches of an ``if`` leave the same scopes open;
  * a loop body leaves the same scopes open as it found (no enter in the body closed after it);
  * no scope is open at a ``return`` or at the end of the function.
"""
from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass

_checked: dict[tuple[int, str], None] = {}


class ScopeStructureError(Exception):
    """A misplaced ``enter_scope`` / ``exit_scope``; the message names file, line and fix."""


@dataclass(frozen=True)
class _Open:
    key: str  # the name as written: the literal, or the expression's source
    line: int  # absolute line in the file


class _Walker:

    def __init__(self, jit_fn, constants: dict) -> None:
        self.jit_fn = jit_fn
        self.constants = constants
        fn = jit_fn.fn
        self.kernel = fn.__name__
        self.file = inspect.getsourcefile(fn) or fn.__code__.co_filename
        raw_lines, start = inspect.getsourcelines(fn)
        def_index = next((i for i, line in enumerate(raw_lines) if re.match(r"\s*def\s", line)), 0)
        self.line_offset = start + def_index - 1
        self.scope = jit_fn.get_capture_scope()
        from proton_lite import language
        self.enter, self.exit, self.block = language.enter_scope, language.exit_scope, language.scope

    # -- helpers -------------------------------------------------------------------------
    def line(self, node: ast.AST) -> int:
        return self.line_offset + getattr(node, "lineno", 1)

    def fail(self, node: ast.AST, problem: str, fix: str) -> None:
        raise ScopeStructureError(f"{self.file}:{self.line(node)}: in @triton.jit function '{self.kernel}': "
                                  f"{problem}\n  fix: {fix}")

    def resolve(self, expr: ast.AST):
        if isinstance(expr, ast.Name):
            return self.scope.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = self.resolve(expr.value)
            return getattr(base, expr.attr, None) if base is not None else None
        return None

    def scope_call(self, call: ast.AST) -> tuple[str, str] | None:
        """('enter'|'exit'|'block', key) when ``call`` is one of our scope calls."""
        if not isinstance(call, ast.Call) or not call.args:
            return None
        target = self.resolve(call.func)
        kind = {id(self.enter): "enter", id(self.exit): "exit", id(self.block): "block"}.get(id(target))
        if kind is None:
            return None
        arg = call.args[0]
        key = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else ast.unparse(arg)
        return kind, key

    def static_condition(self, test: ast.expr) -> bool | None:
        """The value of an if-condition made only of constexprs, else None (a run-time branch)."""
        names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        if not names <= set(self.constants):
            return None
        try:
            value = eval(compile(ast.Expression(test), "<scope_check>", "eval"), {"__builtins__": {}},
                         dict(self.constants))
        except Exception:
            return None
        return bool(value) if isinstance(value, (bool, int)) else None

    # -- the walk ------------------------------------------------------------------------
    def run(self) -> None:
        tree = self.jit_fn.parse()
        fn_def = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        end, returned = self.block_stmts(fn_def.body, [])
        if not returned and end:
            last = end[-1]
            self.fail_at_line(fn_def, last, f"scope {last.key!r} (entered at line {last.line}) is still open at the "
                              f"end of '{self.kernel}'", f"add exit_scope({last.key!r}) before the function ends")

    def fail_at_line(self, node: ast.AST, open_scope: _Open, problem: str, fix: str) -> None:
        raise ScopeStructureError(f"{self.file}:{open_scope.line}: in @triton.jit function '{self.kernel}': "
                                  f"{problem}\n  fix: {fix}")

    def block_stmts(self, stmts: list[ast.stmt], stack: list[_Open]) -> tuple[list[_Open], bool]:
        """Walk statements; return (open scopes at the end, whether every path returned)."""
        stack = list(stack)
        for stmt in stmts:
            stack, returned = self.stmt(stmt, stack)
            if returned:
                return stack, True
        return stack, False

    def stmt(self, node: ast.stmt, stack: list[_Open]) -> tuple[list[_Open], bool]:
        if isinstance(node, ast.Expr):
            found = self.scope_call(node.value)
            if found and found[0] == "enter":
                return stack + [_Open(found[1], self.line(node))], False
            if found and found[0] == "exit":
                key = found[1]
                if not stack:
                    self.fail(node, f"exit_scope({key!r}) has no matching enter_scope({key!r}) open here",
                              f"add enter_scope({key!r}) before it, or remove this exit_scope")
                if stack[-1].key != key:
                    top = stack[-1]
                    self.fail(node, f"exit_scope({key!r}) does not match the innermost open scope {top.key!r} "
                              f"(entered at line {top.line}); scopes must nest",
                              f"exit_scope({top.key!r}) first, or reorder the scopes so they nest")
                return stack[:-1], False
            return stack, False
        if isinstance(node, ast.Return):
            if stack:
                top = stack[-1]
                self.fail(node, f"scope {top.key!r} (entered at line {top.line}) is still open at this return",
                          f"call exit_scope({top.key!r}) before returning")
            return stack, True
        if isinstance(node, ast.If):
            static = self.static_condition(node.test)
            if static is not None:  # Triton compiles only the taken branch of a constexpr if
                return self.block_stmts(node.body if static else node.orelse, stack)
            then_end, then_ret = self.block_stmts(node.body, stack)
            else_end, else_ret = self.block_stmts(node.orelse, stack)
            if then_ret and else_ret:
                return stack, True
            if then_ret:
                return else_end, False
            if else_ret:
                return then_end, False
            if then_end != else_end:
                longer, branch = (then_end, "if") if len(then_end) >= len(else_end) else (else_end, "else")
                culprit = next((s for s in longer if s not in (else_end if branch == "if" else then_end)), longer[-1]
                               if longer else None)
                what = f"scope {culprit.key!r} (line {culprit.line})" if culprit else "a scope"
                self.fail(node, f"the branches of this if leave different scopes open: {what} is open after the "
                          f"'{branch}' branch but not after the other",
                          "enter and exit the scope in the same branch, or in both branches")
            return then_end, False
        if isinstance(node, (ast.For, ast.While)):
            body_end, _ = self.block_stmts(node.body, stack)
            if body_end != stack:
                if len(body_end) > len(stack):
                    s = body_end[len(stack)] if body_end[:len(stack)] == stack else body_end[-1]
                    self.fail(node, f"scope {s.key!r} is entered in the loop body (line {s.line}) but not exited "
                              "in the same iteration", f"call exit_scope({s.key!r}) inside the loop body")
                s = stack[-1] if stack else None
                self.fail(node, f"the loop body exits scope {s.key!r} (entered at line {s.line}, before the loop)",
                          f"move exit_scope({s.key!r}) after the loop")
            if node.orelse:
                return self.block_stmts(node.orelse, stack)
            return stack, False
        if isinstance(node, ast.With):
            keys = [self.scope_call(item.context_expr) for item in node.items]
            inner = stack + [_Open(k[1], self.line(node)) for k in keys if k and k[0] == "block"]
            body_end, returned = self.block_stmts(node.body, inner)
            if body_end != inner and not returned:
                s = body_end[-1] if len(body_end) > len(inner) else inner[-1]
                self.fail(node, f"the body of this with-block leaves scope {s.key!r} (line {s.line}) unbalanced",
                          f"enter and exit {s.key!r} inside the with-block")
            return stack, returned
        return stack, False


def check_function(jit_fn, constants: dict | None = None) -> None:
    """Check ``jit_fn`` once per source and constexpr values; raise ScopeStructureError on a problem.

    ``constants`` maps the function's constexpr names to values, so that ``if FLAG:`` on a
    constexpr follows the branch Triton compiles.
    """
    constants = dict(constants or {})
    key = (id(jit_fn), jit_fn.src, repr(sorted(constants.items(), key=lambda kv: kv[0])))
    if key in _checked:
        return
    _Walker(jit_fn, constants).run()
    _checked[key] = None
