"""Capture-only stand-in for the device (no polars there): capture and wrap, nothing else."""
__all__ = ["capture", "wrap"]


def capture(*args, **kwargs):
    from collectors.torch_capture import capture as _capture
    return _capture(*args, **kwargs)


def wrap(*args, **kwargs):
    from collectors.torch_capture import wrap as _wrap
    return _wrap(*args, **kwargs)
