"""What a collector does at stop: copy back what the open chunks hold, wait for the
drain, free buffers and events, and report how the records travelled and what a fault lost.
A mixin of ``Collector``.
"""
from __future__ import annotations

from proton_lite.runtime import cuda_api


class CollectorStop:
    """``Collector.finish`` and what the session reports after it."""

    def _fault_message(self) -> str:
        if self._first_lost is None:
            return f"{self._fault}; every saved launch was copied back before the GPU failed"
        return (f"launch {self._first_lost}: {self._fault}; {self.lost} launch(es) from this one on were still on "
                "the GPU when it failed and were not saved (copy_every=1 copies each launch right after it)")

    def drain_stats(self, stop_ns: int = 0) -> dict:
        """How the records travelled (the END chunk's ``drain``): what was copied, how much waited
        on the device for the disk, and how long launching threads and stop waited for it."""
        d = self._drain
        return {"thread": d.thread, "chunks": self.copies, "eager_chunks": self.eager_copies,
                "copied_bytes": d.copied_bytes, "copy_wait_ms": round(d.copy_ns / 1e6, 3),
                "write_ms": round(d.write_ns / 1e6, 3), "device_limit_bytes": self.device_limit,
                "peak_device_backlog_bytes": d.peak_queued_bytes, "launch_waits": d.waits,
                "launch_wait_ms": round(d.wait_ns / 1e6, 3), "stop_ms": round(stop_ns / 1e6, 3)}

    def finish(self) -> None:
        """Copy back what the open chunks hold, wait for every copy, free buffers (call once)."""
        here = None  # this thread's context, restored at the end (chunks of other devices switch it)
        if not self.failed:
            try:
                here = cuda_api.current_context()
            except cuda_api.CudaError:
                here = None
        with self._lock:
            self._sync()
            self._fast = None  # the hooks are gone: nothing more is held in C (and no reference cycle with them)
            self._drop_spares()
            # open chunks, and closed ones still waiting for a launch that never reached its
            # exit hook (it failed, and its thread launched nothing after it)
            pending = list(self._open.values()) + [c for c in self._waiting if not c.sealed]
            self._waiting.clear()
            for chunk in pending:
                chunk.inflight = 0  # a launch still between allocator and exit hook is not waited for
                if not self.failed:
                    self._use_device(chunk.device)
                if chunk.closed:
                    self._seal(chunk)
                else:
                    self._close(chunk)
        try:  # graphs' last replays go to the drain before it finishes
            self.graphs.finish()
        except cuda_api.CudaError as e:  # a kernel fault: what was drained is kept
            self._failed(e)
        self._drain.finish()
        if self.failed:
            self.errors.append(self._fault_message())
        self.writer.flush()
        if not self.failed:
            with self._events_lock:
                for device, events in self._events.items():
                    self._use_device(device)
                    for ev in events:
                        try:
                            cuda_api.event_destroy(ev)
                        except cuda_api.CudaError:
                            pass
                self._events.clear()
            self.device_pool.release_all(self._use_device)
            if here is not None:
                try:
                    cuda_api.set_context(here)
                except cuda_api.CudaError:
                    pass
        self.pinned_pool.release_all()

    def clock_anchors(self) -> list[dict]:
        """Where each GPU's timer stands against the host clock (``runtime/clock_probe.py``),
        measured once per device the session launched on; none after a fault."""
        if self.failed or not self._contexts:
            return []
        from proton_lite.runtime import clock_probe
        return clock_probe.probe_devices(dict(self._contexts), "stop")
