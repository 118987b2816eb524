"""Threads for the writers: tasks run ahead on every core, results taken in order."""
from __future__ import annotations

from collections import deque


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


class _Done:
    """A finished computation with the ``result()`` of a future (no thread pool)."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value
