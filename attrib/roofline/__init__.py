"""The device database and detection; achieved GB/s and TFLOP/s, roofline and gap; per-phase
figures."""
