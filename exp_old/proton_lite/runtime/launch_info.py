"""How a launch's grid, compiled kernel, arguments and JIT function reach the collector's hooks.

A session attaches ``LaunchInfo`` as the ``launch_metadata`` of every JIT function it sees
(``ATTACHER``); Triton builds it into each launch's metadata (a ``LazyDict``), and the
exit hook and the allocator read it back from there without evaluating it.  Kept apart
from the collector: this is where the shape of Triton's launch metadata and of its
launcher's frames is known.
"""
from __future__ import annotations

import weakref

from proton_lite import compat

_LAUNCH_INFO_KEY = "proton_lite_launch"


class LaunchInfo:
    """Attached as a JIT function's ``launch_metadata``: tells the exit hook what was launched
    (grid, compiled kernel's metadata, arguments by name, and the JIT function itself, which
    ``sizing="exact"`` needs to launch it again)."""

    __slots__ = ("jit_fn", )

    def __init__(self, jit_fn=None) -> None:
        self.jit_fn = jit_fn

    def __call__(self, grid, metadata, args):
        return {_LAUNCH_INFO_KEY: (grid, metadata, args, self.jit_fn)}


def launch_metadata_fn(grid, metadata, args):
    """``LaunchInfo`` of no particular JIT function (for tests and tools)."""
    return {_LAUNCH_INFO_KEY: (grid, metadata, args, None)}


class _Chained:
    """A user's own launch_metadata function followed by ours."""

    def __init__(self, user, ours: LaunchInfo) -> None:
        self.user, self.ours = user, ours

    def __call__(self, grid, metadata, args):
        data = dict(self.user(grid, metadata, args) or {})
        data.update(self.ours(grid, metadata, args))
        return data


def _pending_launch_info(launch_metadata):
    """(grid, metadata, arguments, JIT function) from our ``LaunchInfo`` entry still pending in
    Triton's launch metadata (a ``LazyDict``), without evaluating it; None when not there."""
    for fn, fargs in getattr(launch_metadata, "extras", None) or ():
        kind = type(fn)
        if kind is LaunchInfo:
            return fargs[0], fargs[1], fargs[2], fn.jit_fn
        if kind is _Chained:
            return fargs[0], fargs[1], fargs[2], fn.ours.jit_fn
    return None


def _launch_info(launch_metadata):
    """(grid, metadata, arguments, JIT function) from Triton's launch metadata, or None.

    Read from the ``LazyDict``'s pending entries while our ``LaunchInfo`` is still there (no
    evaluation, no dict merges: this runs for every launch); evaluated when another exit
    hook already did that."""
    if launch_metadata is None:
        return None
    info = _pending_launch_info(launch_metadata)
    return info if info is not None else launch_metadata.get().get(_LAUNCH_INFO_KEY)


def _launch_arguments():
    """(grid, compiled kernel's metadata, arguments by name) of the launch whose profile
    buffer is being allocated, or None.

    Triton's launcher calls the profile allocator with a size only; the launch metadata it
    has already built (``LazyDict``, not yet evaluated) holds our ``LaunchInfo`` with
    exactly these values.  It is a local of the launcher's ``__call__`` (Triton 3.9:
    ``launch_metadata``; 3.6: the second of ``*args``) two frames above the allocator,
    and of ``JITFunction.run`` one frame further.  Only kernels sized at launch look.
    """
    try:
        frame = compat.caller_frame(3)  # _launch_arguments <- _launch_capacity <- allocate <- allocate_scratch
    except ValueError:  # called from less deep (a test)
        return None
    for _ in range(4):
        frame = frame.f_back
        if frame is None:
            return None
        code = frame.f_code
        names = code.co_varnames
        candidates = ()
        if "launch_metadata" in names:
            candidates = (frame.f_locals.get("launch_metadata"), )
        elif code.co_name == "__call__" and "args" in names:
            args = frame.f_locals.get("args")
            candidates = tuple(args[:3]) if isinstance(args, tuple) else ()
        for lm in candidates:
            info = _pending_launch_info(lm)
            if info is not None:
                return info[:3]
    return None


class LaunchMetadataAttacher:
    """Attaches ``launch_metadata_fn`` to the JIT functions a session sees, and detaches it after."""

    def __init__(self) -> None:
        self._known: "weakref.WeakSet" = weakref.WeakSet()
        self._originals: dict[int, object] = {}

    def attach(self, jit_fn) -> None:
        self._known.add(jit_fn)
        current = jit_fn.launch_metadata
        if isinstance(current, (LaunchInfo, _Chained)):
            return
        self._originals[id(jit_fn)] = current
        ours = LaunchInfo(jit_fn)
        jit_fn.launch_metadata = ours if current is None else _Chained(current, ours)

    def attach_known(self) -> None:
        for fn in list(self._known):
            self.attach(fn)

    def detach_all(self) -> None:
        for fn in list(self._known):
            if id(fn) in self._originals:
                fn.launch_metadata = self._originals.pop(id(fn))
        self._originals.clear()


ATTACHER = LaunchMetadataAttacher()
