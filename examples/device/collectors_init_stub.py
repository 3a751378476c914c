"""Capture-only stand-in for the device (no polars there): capture, wrap, measure_device."""
__all__ = ["capture", "wrap", "measure_device"]


def capture(*args, **kwargs):
    from collectors.sampled import capture as _capture
    return _capture(*args, **kwargs)


def wrap(*args, **kwargs):
    from collectors.torch_capture import wrap as _wrap
    return _wrap(*args, **kwargs)


def measure_device(*args, **kwargs):
    from collectors.calibrate import measure
    return measure(*args, **kwargs)
