"""How many threads a stop's decode and trace writers use: every core this process may run
on, at most 16, or ``PROTON_LITE_THREADS``.

Why a setting: more threads make a stop faster and hold more memory at once (each decoding
thread a batch of up to 8 MiB of raw records at 3-5 times its size, and the heap keeps what
the threads freed): on the H200 host the stop of 4 M CTA lifetimes (a 128 MiB capture) took
2.1 s at 9.0 times the capture on 16 threads, 2.4 s at 7.0 times on 8, 2.3 s at 5.7 times on
4; of 21 M records (293 MiB) 1.4 s at 3.3 times on 16, 1.5 s at 2.7 times on 8 (docs/design.md
§6, "The stop's memory"). A machine short of memory trades time for it here.
"""
from __future__ import annotations

import os

MOST = 16  # the most the stop has been measured with (16-core GPU hosts; docs/benchmarks.md, "Stop")


class SettingError(ValueError):
    """A setting of the environment is wrong (the capture is fine): its message names both."""


def stop_threads() -> int:
    """``PROTON_LITE_THREADS`` if set, else the cores this process may run on (at most MOST)."""
    raw = os.environ.get("PROTON_LITE_THREADS", "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise SettingError(f"proton_lite: PROTON_LITE_THREADS must be a whole number of at least 1 (got {raw!r}); "
                             f"unset it to use every core, at most {MOST}")
        return int(raw)
    return max(1, min(usable_cores(), MOST))


def usable_cores() -> int:
    """The cores this process may run on: a container's or taskset's, not the host's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
