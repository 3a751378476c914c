"""attrib's version: a leaf every layer may import (the package root resolves `analyze`, the
app)."""

__version__ = "0.1.0"
