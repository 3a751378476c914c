"""Bytes and FLOPs of Inductor (torch.compile) Triton kernels from their launch record.

The CPU op of an Inductor kernel is its launch (`triton_<cat>_<fused names>_<n>`), with every buffer
argument in `Input Dims` and the iteration sizes (xnumel, r0_numel; ynumel before xnumel in 2-D
tiled kernels) as trailing scalars in `Concrete Inputs`. Roles (input / output / in-place) are not
recorded. Buffers are passed whole, but a kernel touches at most its iteration space of each one:
an embedding table it gathers rows of, a KV cache it scatters a few rows into. So each buffer is
counted up to N = xnumel * r0_numel elements (Inductor's own `estimate_kernel_num_bytes` rule for
sliced or indexed buffers). When the launch passes no sizes (static shapes in some builds), N is
the largest buffer, or, when an integer index buffer is present and the largest buffer is far
larger than the rest, the second largest (a gather or a scatter into a cache).
Figures are estimates and say so; in-place buffers are counted once.
"""

from __future__ import annotations

from attrib.cost.dtypes import Cost, Tensor, concrete_int, tensor, unknown

_INT = frozenset({"int64", "int32", "int16", "int8", "uint8"})
# the largest buffer this many times the next one, with an index buffer: a gather/scatter
GATHER_RATIO = 8


def category(name: str) -> str:
    """poi | red | per | tem | for | spl ... from `triton_<cat>_...`."""
    return name[7:10] if name.startswith("triton_") else ""


def _sizes(dims: list, types: list, concrete: list) -> list[int]:
    """The trailing run of integer scalar arguments (sizevars, then the numels)."""
    out: list[int] = []
    for i in range(len(dims) - 1, -1, -1):
        v = concrete_int(concrete, i)
        if (i < len(types) and types[i] != "Scalar") or v is None:
            break
        out.append(v)
    return out[::-1]


def iteration_space(name: str, ts: list[Tensor], sizes: list[int]) -> tuple[int, str]:
    """(N, how it was found): the elements one launch iterates over."""
    numels = sorted((t.numel for t in ts), reverse=True)
    top = numels[0]
    if sizes:
        last = sizes[-1]
        if category(name) in ("red", "per") and len(sizes) >= 2:
            n, how = sizes[-2] * last, "xnumel*r0_numel"
        elif len(sizes) >= 2 and sizes[-2] * last in numels and last not in numels:
            n, how = sizes[-2] * last, "ynumel*xnumel"
        else:
            n, how = last, "xnumel"
        return min(n, top), how
    indexed = any(t.dtype in _INT for t in ts)
    if indexed and len(numels) > 1 and top >= GATHER_RATIO * numels[1]:
        how = ("no sizes recorded: the largest buffer is indexed (gather/scatter), "
               "N = the next largest")
        return numels[1], how
    return top, "no sizes recorded: N = the largest buffer"


def _gemm_flops(ts: list[Tensor]) -> float | None:
    """2*M*N*K of a template GEMM: an [M, K] and a [K, N] (or [N, K]) operand and an [M, N]
    output."""
    two = [t.shape for t in ts if len(t.shape) == 2]
    for a in two:
        for b in two:
            if a is b:
                continue
            for n in ({b[1]} if a[1] == b[0] else set()) | ({b[0]} if a[1] == b[1] else set()):
                if any(o == (a[0], n) for o in two if o is not a and o is not b):
                    return 2.0 * a[0] * n * a[1]
    return None


def triton_kernel(dims: list, types: list, concrete: list = (), name: str = "") -> Cost:
    """Price one Inductor kernel launch (see the module doc)."""
    ts = [t for t in (tensor(dims, types, i) for i in range(len(dims))) if t is not None]
    if not ts:
        return unknown("inductor", "no buffer argument recorded")
    floats = [t for t in ts if t.dtype not in _INT and t.dtype != "bool"]
    dtype = max(floats or ts, key=lambda t: t.numel).dtype
    if category(name) == "tem":
        flops = _gemm_flops(ts)
        shape_note = "" if flops else "; GEMM shape not found"
        return Cost(float(sum(t.nbytes for t in ts)), flops, dtype, "inductor_template",
                    "Inductor template: every buffer read or written once" + shape_note)
    n, how = iteration_space(name, ts, _sizes(dims, types, list(concrete)))
    nbytes = sum(min(t.numel, n) * t.size for t in ts)
    clipped = sum(1 for t in ts if t.numel > n)
    clip_note = f"; {clipped} larger buffer(s) counted at N (gathered/scattered rows)"
    why = (f"estimate: Inductor kernel, each buffer counted up to its iteration space N={n} ({how})"
           + (clip_note if clipped else "")
           + "; in-place buffers counted once")
    return Cost(float(nbytes), float(n), dtype, "inductor", why)
