"""The copies of staging in blocks (``layout.flush_slots``, design.md §2): before a straight
run of records (ptx_staging.mark_block_checks), a block without room for the run is copied
by the unit's first warp to the unit block in global memory, and the copy records its own
time under ``layout.COPY_SCOPE``. A mixin of ptx_emit._Emitter, which holds ``layout``,
``blocks``, ``copy_tags``, ``capacity`` and ``unit_threads``."""
from __future__ import annotations

from proton_lite.layout import RECORD_BYTES, UNIT_HEADER_BYTES
from proton_lite.passes.ptx_scan import MarkerSite

# the copies' registers, live only inside a copy (ptx_emit._Emitter.registers)
BLOCK_REGS = (".reg .b32 %pl_f<10>;", ".reg .b64 %pl_fd;", ".reg .pred %pl_fp<3>;")


class BlockCode:
    def copy_before(self, site: MarkerSite) -> list[str]:
        """Before the first record of a straight run (``site.room``, ptx_staging.mark_block_checks):
        with staging in blocks, the copy of a block without room for the run."""
        return self.block_copy(room=site.room) if self.blocks and site.room else []

    def block_copy(self, at_exit: bool = False, room: int = 0) -> list[str]:
        """With staging in blocks, before a run of ``room`` records (before the first one's
        timer read): if the block has no room for them (always, at exit), the unit's first
        warp copies the staged records to the unit block, 32 lanes at a time, record ``i``
        of the unit to slot ``min(i, capacity)`` (past the capacity: the first sink slot);
        then the leader stages the copy's own enter and exit records (COPY_SCOPE: the timer
        before and after it) and the block goes on after them. At exit there is nothing
        after, and the unit's end was read before the copy.

        Before the run, not after each record: the compare reads the pointer the previous
        record left, so its predicate is ready long before the branch, and the kernel's code
        between the run's records stays in one basic block (with a compare and branch after
        each store the fidelity suite's FMA region read 42 cycles long, and its pipelined=False
        matmul lost 7% of each iteration to the gaps between its scopes). The warp syncs
        before a copy (its leader lane wrote the records) and after it (no lane may stage
        again before every lane has read its share). Every branch is warp-uniform and says so
        (``bra.uni``; the lanes past the records are predicated off, not branched around):
        with a divergent copy loop ptxas could not prove the warp converged at the
        pipelined matmul's wgmma and put a WARPSYNC before it. Nothing is deferred past a
        copy (rewrite turns _defer_loop_tails off with blocks)."""
        if not self.blocks:
            return []
        n = self._flushes
        self._flushes += 1
        lbl = f"$pl_block{n}"
        out = []  # at exit: part of the epilogue
        if not at_exit:
            out += ["// proton_lite: block copy", f"add.u32 %pl_f0, %pl_ptr, {room * RECORD_BYTES};",
                    "setp.le.u32 %pl_fp1, %pl_f0, %pl_sink;", f"@%pl_fp1 bra.uni {lbl}_kept;", "mov.u32 %pl_f6, %clock;"]
        # who copies: the unit's first warp, when the buffer has slots (not a launch's capacity
        # word of 0, nor a buffer without the word); recomputed here, where it costs nothing,
        # rather than kept in the loop's registers, as is the unit block's address (%pl_d2)
        out += [
            "mov.u32 %pl_f2, %tid.x;",
            f"and.b32 %pl_f2, %pl_f2, {self.unit_threads - 1};",
            "setp.lt.u32 %pl_fp2, %pl_f2, 32;",
        ]
        if self.layout.sized_at_launch:
            out.append("setp.ne.and.u32 %pl_fp2, %pl_r24, 0, %pl_fp2;")
        out += [
            "sub.u32 %pl_f0, %pl_ptr, %pl_r4;",
            "shr.u32 %pl_f0, %pl_f0, 3;",  # records staged
            f"@!%pl_fp2 bra.uni {lbl}_done;",
            "bar.warp.sync -1;",
            "sub.u32 %pl_f1, %pl_r3, %pl_f0;",  # the unit's index of the first staged record
            "mov.u32 %pl_f9, 0;",  # slots done by the whole warp
            f"{lbl}_copy:",
            "setp.lt.u32 %pl_fp1, %pl_f2, %pl_f0;",  # this lane's slot holds a record
            "mad.lo.u32 %pl_f3, %pl_f2, 8, %pl_r4;",
            "@%pl_fp1 ld.shared.v2.u32 {%pl_f4, %pl_f5}, [%pl_f3];",
            "add.u32 %pl_f3, %pl_f1, %pl_f2;",
            f"min.u32 %pl_f3, %pl_f3, {self.capacity};",
            "mul.wide.u32 %pl_fd, %pl_f3, 8;",
            "add.s64 %pl_fd, %pl_fd, %pl_d2;",
            f"@%pl_fp1 st.global.v2.u32 [%pl_fd+{UNIT_HEADER_BYTES}], {{%pl_f4, %pl_f5}};",
            "add.u32 %pl_f2, %pl_f2, 32;",
            "add.u32 %pl_f9, %pl_f9, 32;",
            "setp.lt.u32 %pl_fp1, %pl_f9, %pl_f0;",
            f"@%pl_fp1 bra.uni {lbl}_copy;",
            "bar.warp.sync -1;",
            f"{lbl}_done:",
        ]
        if not at_exit:
            enter, exit_ = self.copy_tags
            out += ["mov.u32 %pl_f7, %clock;", f"mov.u32 %pl_f8, {enter};", f"mov.u32 %pl_f9, {exit_};",
                    "@%pl_p0 st.shared.v2.u32 [%pl_r4], {%pl_f8, %pl_f6};",
                    f"@%pl_p0 st.shared.v2.u32 [%pl_r4+{RECORD_BYTES}], {{%pl_f9, %pl_f7}};",
                    f"add.u32 %pl_ptr, %pl_r4, {2 * RECORD_BYTES};", "add.u32 %pl_r3, %pl_r3, 2;", f"{lbl}_kept:"]
        return out
