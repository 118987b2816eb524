"""``json_values.plain``: every value as strict JSON holds it, lists of plain values passed on in one step."""
from __future__ import annotations

import json

import numpy as np

from proton_lite.json_values import plain


class _Int(int):
    pass


def test_plain_values_become_what_json_holds():
    value = {"ints": [1, 2, 3], "mixed": [1, "s", True, None], "floats": [1.5, float("nan"), float("inf")],
             "numpy": (np.int64(3), np.float32(0.5), np.bool_(True)), "array": np.arange(3, dtype=np.uint8),
             "sub": [_Int(5)], "nested": [[1, 2], {"k": np.int32(7)}], 3: {"x", "y"}, "other": [object]}
    got = plain(value)
    assert got == {"ints": [1, 2, 3], "mixed": [1, "s", True, None], "floats": [1.5, None, None],
                   "numpy": [3, 0.5, True], "array": [0, 1, 2], "sub": [5], "nested": [[1, 2], {"k": 7}],
                   "3": ["x", "y"], "other": [repr(object)]}
    assert type(got["sub"][0]) is int and type(got["numpy"][0]) is int and type(got["numpy"][2]) is bool
    json.dumps(got, allow_nan=False)  # strict JSON takes it
    kept = [1, "a"]
    assert plain(kept) == kept and plain(kept) is not kept  # a list of its own, as every other container
