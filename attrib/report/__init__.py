"""The analysis document and its renderers, one module per output format."""
