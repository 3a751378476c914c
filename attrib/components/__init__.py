"""Kernel -> model component (the fixed taxonomy), with the evidence that decided it."""
