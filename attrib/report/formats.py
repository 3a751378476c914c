"""The output formats of each command, by name: what the command line offers before it imports any
renderer (a fast start). The renderers' registries hold the same names (tests/test_cli.py)."""

TABLE_FORMATS = ("csv", "csv-safe", "parquet", "xlsx")  # analyze/report: tables written as files
COMPARE_FORMATS = ("table", "json", "md", "html")
SLOPE_FORMATS = ("table", "json", "html")
LADDER_FORMATS = ("table", "json", "md", "html")
