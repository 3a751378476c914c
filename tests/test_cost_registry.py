"""The cost-model registry (attrib.cost.registry): one signature, each op name registered once, and
the models that need a kernel name or context priced through it; the collective's dtype label."""

from __future__ import annotations

import math

import orjson
import polars as pl

from attrib.trace import as_text
from attrib.cost import serving as sv
from attrib.cost.dtypes import Cost
from attrib.cost.registry import BY_NAME, CONTEXT, MODELS, Call, CostModel, shape_model
from attrib.pipeline import attribute
from collectors import load

from conftest import FIXTURES

TP2 = FIXTURES / "captured" / "tp2_decode_rank0.pt.trace.json.gz"


def test_each_op_name_has_one_shape_model():
    names = [n for m in MODELS if m.from_shapes for n in m.ops]
    assert len(names) == len(set(names)) == len(BY_NAME)
    assert shape_model("triton_poi_fused_add_0") is not None
    assert shape_model("aten::linear") is BY_NAME["aten::linear"]
    assert shape_model("vllm::moe_forward") is None   # needs a model config: a context model
    assert {m.label or m.price.__name__ for m in CONTEXT} >= {"collective (bus bytes)"}


def test_one_signature_prices_a_new_model():
    # a cost model is `price(Call) -> Cost`, registered by one CostModel line
    m = CostModel(lambda c: Cost(float(len(c.dims)), None, None, "mine"), ops=("my::op",))
    assert m.from_shapes and m.price(Call("my::op", [[1], [2]], [], [])).bytes == 2.0


def _all_reduce_dims():
    ops = load(TP2).ops.filter(pl.col("name") == "record_param_comms")
    dims = next(orjson.loads(d) for d in ops["input_dims"] if d and orjson.loads(d)[0])
    return dims


def test_fp8_collective_is_labelled_fp8_and_sized_one_byte():
    """The TP=2 capture's all-reduces are ncclDevKernel_AllReduce_Sum_bf16_RING_LL; the same buffer
    all-reduced as fp8 (f8e4m3) moves half the bytes and is fp8 (it was labelled fp32 while sized at
    1 byte)."""
    dims = _all_reduce_dims()
    numel = math.prod(dims[0][0])
    bf16 = sv.collective(dims, "AllReduce", "bf16", 2)
    fp8 = sv.collective(dims, "AllReduce", "f8e4m3", 2)
    i8 = sv.collective(dims, "AllReduce", "i8", 2)
    assert bf16.dtype == "bf16" and bf16.bytes == numel * 2 * 1.0   # 2(n-1)/n = 1 at n = 2
    assert (fp8.dtype, fp8.bytes) == ("fp8_e4m3fn", bf16.bytes / 2)
    assert (i8.dtype, i8.bytes) == ("int8", bf16.bytes / 2)


def test_collectives_priced_through_the_registry_on_the_tp_capture():
    a = attribute(load(TP2))
    coll = as_text(a.kernels).filter(pl.col("name").str.contains("AllReduce") & (pl.col("phase") == "decode"))
    assert coll.height == 6 * 8 and coll["cost_model"].unique().to_list() == ["collective (bus bytes)"]
    assert coll["bytes"].to_list() == [8 * 2048 * 2.0] * coll.height
    assert coll["dtype"].unique().to_list() == ["bf16"]
