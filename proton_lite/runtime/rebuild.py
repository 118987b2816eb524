"""Triton kernels compiled plain, built again instrumented from their PTX (passes/from_plain.py)
into a ``CompiledKernel`` like the one ``triton.compile`` returns.

The build is kept in Triton's cache under a key of its own (the plain binary's hash, the pass's
version and the session's mode), so a later session loads it instead of running ptxas again.
What it needs of the plain kernel (``PlainKernel``) comes from a ``CompiledKernel`` in memory
(its ``asm`` and metadata) or from Triton's cache, by the plain compile's hash (a kernel Inductor
launches with its static launcher keeps only its name and hash once loaded).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from proton_lite import compat
from proton_lite.passes.from_plain import instrument_plain, plain_enough
from proton_lite.passes import stage_hook
from proton_lite.passes.stage_hook import PASS_VERSION


@dataclass
class PlainKernel:
    """What a plain compile kept of one kernel."""

    name: str
    hash: str
    ptx: str
    metadata: dict  # Triton's metadata, as its cache's JSON holds it
    cubin: bytes | None = None
    ttir: str | None = None
    ttgir: str | None = None

    def usable(self) -> bool:
        return plain_enough(self.ptx, self.ttgir, self.metadata)

    @classmethod
    def of(cls, kernel) -> PlainKernel | None:
        """From a Triton ``CompiledKernel`` (or a torch copy of one), or from the files Triton's
        cache keeps for a kernel that knows only its name and hash (Inductor's static launcher);
        None where neither has its PTX."""
        asm = getattr(kernel, "asm", None)
        metadata = getattr(kernel, "metadata", None)
        if asm is not None and metadata is not None and "ptx" in asm:
            md = dict(metadata._asdict()) if hasattr(metadata, "_asdict") else dict(metadata)
            return cls(md.get("name") or kernel.name, str(getattr(kernel, "hash", md.get("hash"))), asm["ptx"], md,
                       asm.get("cubin"), asm.get("ttir"), asm.get("ttgir"))
        name, kernel_hash = getattr(kernel, "name", None), getattr(kernel, "hash", None)
        if name and kernel_hash:
            return cls.in_cache(name, str(kernel_hash))
        return None

    @classmethod
    def in_cache(cls, name: str, kernel_hash: str) -> PlainKernel | None:
        """The files of a plain compile of hash ``kernel_hash`` in Triton's cache."""
        group = stage_hook.unsalted_cache(kernel_hash).get_group(f"{name}.json") or {}

        def read(ext: str, binary: bool = False):
            path = group.get(f"{name}.{ext}")
            try:
                with open(path, "rb" if binary else "r") as f:
                    return f.read()
            except (OSError, TypeError):
                return None

        ptx, md = read("ptx"), read("json")
        if ptx is None or md is None:
            return None
        return cls(name, kernel_hash, ptx, json.loads(md), read("cubin", binary=True), read("ttir"), read("ttgir"))


def _target(metadata: dict):
    target = metadata["target"]
    if isinstance(target, dict):
        return compat.gpu_target_class()(target["backend"], target["arch"], target["warp_size"])
    return target


def instrumented(plain: PlainKernel, src, mode: str, built=None):
    """The kernel instrumented in ``mode`` as a ``CompiledKernel`` whose source is ``src`` (an
    ``ASTSource`` of its JIT function, for Triton's launcher and launch metadata); None where its
    PTX alone is not enough or the mode leaves it out.  ``built(seconds)`` is told of each build
    (not of a load from the cache)."""
    if not plain.usable():
        return None
    key = hashlib.sha256(f"{plain.hash}-{PASS_VERSION}-{mode}-from-plain".encode()).hexdigest()
    cache = stage_hook.unsalted_cache(key)
    filename = f"{plain.name}.json"
    group = cache.get_group(filename)
    if group is None:
        began = time.perf_counter()
        backend = compat.make_backend(_target(plain.metadata))
        options = backend.parse_options(dict(plain.metadata))
        arch = backend.target.arch
        metadata = dict(plain.metadata)
        done = instrument_plain(plain.ptx, metadata, mode, lambda ptx, md: backend.make_cubin(ptx, md, options, arch),
                                arch, plain.cubin, plain.ttir, plain.ttgir)
        if done is None:
            return None
        ptx, cubin = done
        metadata["hash"] = key
        group = {f"{plain.name}.ptx": cache.put(ptx, f"{plain.name}.ptx", binary=False),
                 f"{plain.name}.cubin": cache.put(cubin, f"{plain.name}.cubin", binary=True)}
        group[filename] = cache.put(json.dumps(metadata, default=vars), filename, binary=False)
        cache.put_group(filename, group)
        if built is not None:
            built(time.perf_counter() - began)
    return compat.compiled_kernel_class()(src, group, key)
