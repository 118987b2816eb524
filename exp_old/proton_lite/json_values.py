"""Values as JSON can hold them: one rule for the trace metadata, the raw file's session
record and the CLI's ``--json`` output.

numpy scalars and arrays become Python numbers and lists, NaN and infinities None (strict
JSON has neither), tuples lists, sets sorted lists, dict keys strings, anything else its
``repr``.
"""
from __future__ import annotations

import math

import numpy as np


_AS_IS = {str, int, bool, type(None)}  # what JSON holds as Python gives it (bool and None: exact types)


def plain(obj):
    """``obj`` with every value JSON can hold (see the module docstring); never raises."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if set(map(type, obj)) <= _AS_IS:  # (a launch column, the packed CTA streams: one C pass, no call a value)
            return list(obj)
        return [plain(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return [plain(v) for v in sorted(obj, key=repr)]
    return repr(obj)
