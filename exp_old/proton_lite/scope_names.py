"""Rules for scope names, shared by the kernel API and the passes."""
from __future__ import annotations

MAX_NAME_BYTES = 128


def validate_scope_name(name: str) -> None:
    """Reject names a trace viewer cannot show (empty, too long, control characters)."""
    if not name or not name.strip():
        raise ValueError("proton_lite: a scope name must not be empty; give it a readable name like \"load\"")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ValueError(f"proton_lite: scope name {name[:40]!r}... is longer than {MAX_NAME_BYTES} bytes; "
                         "use a shorter name")
    bad = [c for c in name if not c.isprintable()]
    if bad:
        raise ValueError(f"proton_lite: scope name {name!r} contains unprintable character(s) "
                         f"{''.join(bad)!r} that a trace cannot show; use printable characters only")
