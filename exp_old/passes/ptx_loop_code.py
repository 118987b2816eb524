"""The record code of loops that ptx_loops transforms (a mixin of ptx_emit._Emitter, which
holds ``layout``, ``capacity``, ``unit_threads`` and ``unrolled_tags``): tight loops unrolled
twice, each copy with its own address and tag registers, and loops whose last record is
deferred to the next iteration's store (design.md §2)."""
from __future__ import annotations

from proton_lite.layout import RECORD_BYTES
from proton_lite.passes.ptx_scan import UNROLLED_COPY, MarkerSite


def _opaque_zero(reg: str) -> list[str]:
    """Sets ``reg`` to 0 in a way ptxas can neither compute nor rebuild from other registers,
    and that differs between the lanes of a warp as far as ptxas knows (so it stays off the
    uniform datapath): the top bit of the upper half of %clock64 (a cycle counter, 2^63 after
    more than a century) xor the thread index (below 2^31). Each call reads the counter
    again, so two such zeros are unrelated for ptxas."""
    return [f"mov.u32 {reg}, %clock_hi;", f"xor.b32 {reg}, {reg}, %pl_r0;", f"shr.u32 {reg}, {reg}, 31;"]


class LoopCode:
    """The record code of transformed loops; the transforms themselves are in ptx_loops."""

    def unrolled_prologue(self) -> list[str]:
        """Tags of the records in loops unrolled twice, each in a register of its own for the
        whole kernel.

        A store reads its {tag, clock} pair from two adjacent registers. With the tag a
        constant, ptxas put it into a register shared with other constants and rewrote it in
        every iteration, and the next write waited for the previous store to read it; and it
        gave both copies of a record one clock register. A tag that ptxas can neither compute
        nor derive from another register in one instruction stays in one register all along,
        and the clock beside it is then different for every record of the unrolled body. So
        each tag is the constant plus a zero of its own (``_opaque_zero``). (Tags computed
        from one shared zero, ``z + tag`` and ``tag - z``, were rebuilt in the loop from each
        other, with waits; a warp-uniform tag was copied from a uniform register into the
        store's in every iteration.)"""
        if not self.unrolled_tags:
            return []
        out = []
        for n, tags in enumerate(self.unrolled_tags):
            for k, tag in enumerate(tags + tags):
                t = f"%pl_ut{4 * n + k}"
                out += [*_opaque_zero(t), f"add.u32 {t}, {t}, {tag};"]
        return out

    def unrolled_entry(self, n: int) -> list[str]:
        """Before loop ``n``'s head (unrolled twice): the first copy's address, slot
        min(count, capacity), and the slots left after it before the sink slots. The second
        copy's address is moved on by the first copy before each of its pairs
        (unrolled_record), so it starts one step back: two slots before the first copy's,
        with two more slots left; the first step then puts it two slots after the first
        copy's, or at the sink slots."""
        a, b = 2 * n, 2 * n + 1
        return ["// proton_lite: unrolled loop entry",
                f"min.u32 %pl_un, %pl_r3, {self.capacity};", f"sub.u32 %pl_uo{a}, {self.capacity}, %pl_un;",
                f"mul.wide.u32 %pl_up{a}, %pl_un, {RECORD_BYTES};", f"add.s64 %pl_up{a}, %pl_up{a}, %pl_d3;",
                f"add.u32 %pl_uo{b}, %pl_uo{a}, 2;", f"add.s64 %pl_up{b}, %pl_up{a}, {-2 * RECORD_BYTES};"]

    def unrolled_record(self, site: MarkerSite, tag: int, copy: int) -> list[str]:
        """A record of loop ``site.unrolled``'s pair, in copy ``copy`` of the body. The first
        reads the clock; the second reads it, stores both records at this copy's address, and
        then moves the other copy's address on by four slots, or by the slots left before the
        sink slots, in place: to where the other copy stores next (the first copy moves the
        second's for this pass, the second the first's for the next pass). Each address is
        thus live all through the loop and written once per pass, a copy after its stores:
        ptxas can give its register to nothing else (it had shared one copy's address with
        the other copy's clock, and waited). The first copy is the record site (its tag is
        named in a comment: the code reads it from a register); the second is marked as a
        copy."""
        n = site.unrolled
        k = 4 * n + 2 * copy + site.stores_pair
        out = ["// proton_lite: record", f"// proton_lite: tag {tag}"] if copy == 0 else [UNROLLED_COPY]
        out.append(f"mov.u32 %pl_uc{k}, %clock;")
        if site.pairs:
            return out
        me, other = 2 * n + copy, 2 * n + 1 - copy
        # warp units: every lane stores the same record (record()); larger units: the leader
        pred = "" if self.unit_threads == 32 else "@%pl_p0 "
        return out + [
            f"{pred}st.global.v2.u32 [%pl_up{me}], {{%pl_ut{k - 1}, %pl_uc{k - 1}}};",
            f"{pred}st.global.v2.u32 [%pl_up{me}+{RECORD_BYTES}], {{%pl_ut{k}, %pl_uc{k}}};",
            "add.u32 %pl_r3, %pl_r3, 2;",
            # four slots on, or as many as are left before the sink slots
            f"min.u32 %pl_ud, %pl_uo{other}, 4;",
            f"sub.u32 %pl_uo{other}, %pl_uo{other}, %pl_ud;",
            f"mad.wide.u32 %pl_up{other}, %pl_ud, {RECORD_BYTES}, %pl_up{other};",
        ]

    @staticmethod
    def _defer(pred: str, loop: int) -> str:
        """In place of a deferred record's store: it is stored later under its loop's own
        predicate (%pl_pd<loop>). Under the stores' predicate, ptxas branched around both
        stores of the first record of the loop instead of predicating them."""
        return f"mov.pred %pl_pd{loop}, {pred.strip()[1:]};" if pred else f"setp.eq.u32 %pl_pd{loop}, 0, 0;"

    def deferred_store(self, loop: int, address: str | None = None) -> str:
        """The store of loop ``loop``'s deferred last record (set 2), at its own address (set
        2's) or at ``address``. %pl_pd<loop> holds the predicate the record would have stored
        under; it is false until that loop deferred a record, and again once the loop is left."""
        if self.layout.staging == "shared":
            return f"@%pl_pd{loop} st.shared.v2.u32 [%pl_sa2], {{%pl_tag2, %pl_clk2}};"
        return f"@%pl_pd{loop} st.global.v2.u32 [{address or '%pl_ga2'}], {{%pl_tag2, %pl_clk2}};"

    def loop_exit_store(self, loop: int, by_address: bool) -> list[str]:
        """After a deferring loop's back edge, on the way out: its pending record, then the
        predicate is cleared, so that no later loop (or this one, entered again) stores it
        again (at the next record's address - 8 that would be another record's slot). A
        record stored by address was the last one (slot count - 1, or the sink past the
        capacity)."""
        out = ["// proton_lite: deferred record"]
        if by_address:
            out += ["sub.u32 %pl_slot2, %pl_r3, 1;", f"min.u32 %pl_slot2, %pl_slot2, {self.capacity};",
                    "mul.wide.u32 %pl_ga2, %pl_slot2, 8;", "add.s64 %pl_ga2, %pl_ga2, %pl_d3;"]
        return out + [self.deferred_store(loop), f"setp.ne.u32 %pl_pd{loop}, 0, 0;"]
