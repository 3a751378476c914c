"""Memory-bound decode components far below the memory roofline (not a catalog entry: the generic gap).

Answers "why does decode run at a fraction of what the memory system allows": components whose
bytes are known, that the roofline calls memory-bound, and that move their bytes at < 50 % of the
device's roofline bandwidth, with the milliseconds each leaves on the table.
"""

from __future__ import annotations

from typing import Any

from attrib.pipeline import Attribution
from rules.finding import Finding, phase_doc, r, roofline_bw

MIN_SHARE = 0.10
MAX_FRACTION = 0.50
MIN_BYTES_KNOWN = 0.5  # below this, a component's achieved GB/s comes from too little of its time


def memory_bound_gap(a: Attribution, doc: dict[str, Any]) -> list[Finding]:
    """Decode components: bound == memory, share > 10 %, achieved < 50 % of the roofline bandwidth."""
    ph, bw = phase_doc(doc, "decode"), roofline_bw(doc)
    if ph is None or not bw:
        return []
    slow = [c for c in ph["components"]
            if c.get("bound") == "memory" and (c.get("share") or 0) > MIN_SHARE
            and c.get("achieved_gbs") is not None and c["achieved_gbs"] < MAX_FRACTION * bw
            and (c.get("bytes_known_share") or 0) >= MIN_BYTES_KNOWN]
    if not slow:
        return []
    slow.sort(key=lambda c: c.get("gap_ms") or 0, reverse=True)
    gap = sum(c.get("gap_ms") or 0 for c in slow)
    basis = (doc.get("device") or {}).get("roofline_bw_basis") or "sustained"
    return [Finding(
        rule="roofline-memory-bound-gap", severity="medium",
        title=f"{len(slow)} memory-bound decode component(s) run below {MAX_FRACTION:.0%} of the "
              f"{bw:g} GB/s roofline, {gap:.3f} ms per step above their memory floor",
        evidence={"roofline_bw_gbs": bw, "roofline_bw_basis": basis, "gap_ms_per_step": r(gap, 4),
                  "step_ms": ph["step_ms"]["median"], "kernel_ms": ph.get("kernel_ms"),
                  "achieved_tok_s": ph.get("achieved_tok_s"), "ceiling_tok_s": ph.get("ceiling_tok_s"),
                  "components": [{"component": c["component"], "share": c["share"], "achieved_gbs": c["achieved_gbs"],
                                  "fraction_of_roofline": r(c["achieved_gbs"] / bw), "gap_ms": c.get("gap_ms")}
                                 for c in slow]},
        remedy="Look at these components' kernels first: small elementwise/norm kernels at low GB/s want fusion "
               "(fewer passes over the activations), GEMV-shaped GEMMs want a skinny/GEMV kernel or a tuned tile; "
               "the gap_ms of each is the most its fix can save per step.",
        references=())]
