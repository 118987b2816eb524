"""Threads for the writers: tasks run ahead on every core, results taken in order."""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor


def _ordered(submit, tasks: list, ahead: int):
    """The results of ``tasks`` in order, as an iterator; the first ``ahead`` tasks are
    submitted at once (before the first result is asked for) and ``ahead`` stay submitted
    beyond the one being waited for (``submit`` returns a future); the window bounds memory."""
    tasks = list(tasks)
    window = deque(submit(t) for t in tasks[:ahead])

    def results():
        for t in tasks[ahead:]:
            window.append(submit(t))
            yield window.popleft().result()
        while window:
            yield window.popleft().result()
    return results()


def _run_ordered(tasks, workers: int):
    """Yield the results of ``tasks`` (callables) in order, a few computed ahead in threads.

    numpy's sorting, copying and masking and zlib release the GIL, so tasks really run
    in parallel.
    """
    if workers <= 1:
        for t in tasks:
            yield t()
        return
    with ThreadPoolExecutor(workers) as ex:
        yield from _ordered(ex.submit, tasks, 2 * workers + 1)



class _Done:
    """A finished computation with the ``result()`` of a future (no thread pool)."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value
