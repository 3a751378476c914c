"""Errors that reach the user as one line: the file and what is wrong with it."""

from __future__ import annotations


class TraceError(Exception):
    """Bad or unreadable input. `str()` is the one-line message the CLI prints."""

    def __init__(self, path: object, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class UsageError(ValueError):
    """A bad argument (an unknown phase or arch, a negative context...). `str()` is the one-line
    message."""
