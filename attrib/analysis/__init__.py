"""The typed analysis of a trace: built from an Attribution, read by rules, renderers and the
API."""

from attrib.analysis.finding import Finding
from attrib.analysis.model import SCHEMA_ID, Analysis, Component, Device, Phase, TopKernel

__all__ = ["SCHEMA_ID", "Analysis", "Component", "Device", "Finding", "Phase", "TopKernel"]
