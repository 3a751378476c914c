"""Bytes and FLOPs: per op from shapes and dtypes, per kernel through its launching op;
model-config budgets."""
