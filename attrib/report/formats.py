"""The output formats of each command, by name, its default first: what the command line offers
before it imports any renderer (a fast start). The renderers' registries hold the same names
(tests/test_cli.py)."""

TABLE_FORMATS = ("csv", "csv-safe", "parquet", "xlsx")  # analyze/report: tables written as files
FOLDER_FORMATS = ("csv", "csv-safe", "parquet")  # ... of which these write a folder (-o DIR)
ANALYZE_FORMATS = ("table", "json", *TABLE_FORMATS)
REPORT_FORMATS = ("md", "html", "json", *TABLE_FORMATS)
COMPARE_FORMATS = ("table", "json", "md", "html")
SLOPE_FORMATS = ("table", "json", "html")
LADDER_FORMATS = ("table", "json", "md", "html")
RANKS_FORMATS = ("table", "json", "md", "html")
TREND_FORMATS = ("table", "json", "html")
SWEEP_FORMATS = ("table", "json", "md", "html", "csv", "parquet")
CALIBRATE_FORMATS = ("toml", "json")

# the format -o's suffix names, in every command (a folder format is never read off a suffix)
SUFFIXES = ((".json", "json"), (".md", "md"), (".markdown", "md"), (".html", "html"),
            (".htm", "html"), (".xlsx", "xlsx"), (".csv", "csv"), (".parquet", "parquet"),
            (".toml", "toml"))
