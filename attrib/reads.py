"""What a stage or a rule reads of a trace's host side beyond the ops its kernels link to.

The chunked read of a huge trace (attrib.chunked) keeps, of each chunk, the kernels' ops and what
the stages and rules declare here; nothing else survives the merge. A rule that reads another op,
runtime call or Python frame by name declares it in its `Rule(reads=...)`, or misses it there.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec


class Reads(msgspec.Struct, frozen=True):
    """Regexes on names: ops, the names of the linked ops' parents, runtime calls, Python frames.
    kernel_calls_if_frames: the runtime calls of the kernels are read where a frame so named is
    in the trace; kernel_calls_if_roles: where the steps have roles (speculative passes)."""

    ops: tuple[str, ...] = ()
    parents: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()
    frames: tuple[str, ...] = ()
    kernel_calls_if_frames: tuple[str, ...] = ()
    kernel_calls_if_roles: bool = False


def union(reads: Iterable[Reads]) -> Reads:
    """One Reads of all (each regex once, in first-seen order)."""
    got = list(reads)

    def joined(field: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for r in got for p in getattr(r, field)))

    return Reads(ops=joined("ops"), parents=joined("parents"), calls=joined("calls"),
                 frames=joined("frames"), kernel_calls_if_frames=joined("kernel_calls_if_frames"),
                 kernel_calls_if_roles=any(r.kernel_calls_if_roles for r in got))


def pattern(regexes: tuple[str, ...]) -> str | None:
    """The regexes as one alternation; None for none."""
    return "|".join(f"(?:{r})" for r in regexes) if regexes else None
