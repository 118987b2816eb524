"""Array helpers shared by the decoder, the trace writers and the viewer."""
from __future__ import annotations

import numpy as np


def distinct(values) -> np.ndarray:
    """The distinct values of an integer array, sorted: ``np.unique(values)`` by one sort.

    Why: numpy 2.3+ finds a plain ``np.unique``'s values by hashing, ~1 µs a value on the CPU
    host (4 M values 4.9 s, 65 K launches 0.08 s), where a sort takes ~15 ns a value."""
    a = np.sort(np.asarray(values).ravel())
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) > 1 else a


def groups(keys: np.ndarray):
    """(key, the positions that hold it, in their order) for each distinct integer key, in key
    order: one stable sort, not a pass over every key per distinct one (4,096 kernels' 4 M CTAs
    in ``diff``: 21 s; 132 SMs' 4 M CTAs in the summary's clock check: 1.9 s)."""
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    cuts = np.flatnonzero(np.diff(keys[order])) + 1
    for at in np.split(order, cuts) if len(order) else ():
        yield int(keys[at[0]]), at
