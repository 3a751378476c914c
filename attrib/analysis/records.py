"""The analysis' records (msgspec Structs: a class is made in microseconds, where a dataclass
compiles six methods at import) as plain values."""

from __future__ import annotations

import copy
from typing import Any

import msgspec


def as_dict(obj: Any) -> Any:
    """A record as a dict of its fields in order, recursively through records, lists, tuples
    and dicts (each kept as its type); other values copied (`dataclasses.asdict`'s rules)."""
    if isinstance(obj, msgspec.Struct):
        return {f: as_dict(getattr(obj, f)) for f in obj.__struct_fields__}
    if isinstance(obj, (list, tuple)):
        return type(obj)(as_dict(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((as_dict(k), as_dict(v)) for k, v in obj.items())
    return copy.deepcopy(obj)
