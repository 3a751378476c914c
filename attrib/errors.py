"""Errors that reach the user as one line: the file and what is wrong with it.

Both are ValueErrors (bad input, as Python's own convention has it), so a caller that already
handles ValueError handles them; the CLI prints `str()` and exits 2.
"""

from __future__ import annotations


class TraceError(ValueError):
    """Bad or unreadable input. `str()` is the one-line message the CLI prints."""

    def __init__(self, path: object, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):  # pickled whole (a worker process's error reaches its parent)
        return type(self), (self.path, self.problem)


class UsageError(ValueError):
    """A bad argument (an unknown phase or arch, a negative context...). `str()` is the one-line
    message."""
