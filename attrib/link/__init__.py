"""Linking: kernel <-> runtime launch <-> CPU op <-> nn.Module path; graph replays aligned with
their capture."""
