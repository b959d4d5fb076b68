"""Errors raised by the audit tool.

The tree::

    AuditError                          caught once in audit.cli.main: one line on stderr, exit 2
    ├── UsageError (ValueError)         an option or argument that cannot be used
    └── InputError                      the file cannot be read as a log
        ├── UnreadableFile (OSError)    missing, a directory, no permission
        └── UnknownFormat (ValueError)  empty, not UTF-8, or neither a log nor a saved log response

A file that reads as a log but fails verification is not an error here:
``audit verify`` reports it as FAILED and exits 1.
"""

from __future__ import annotations


class AuditError(Exception):
    """Base of every error the audit tool raises on purpose."""


class UsageError(AuditError, ValueError):
    pass


class InputError(AuditError):
    pass


class UnreadableFile(InputError, OSError):
    pass


class UnknownFormat(InputError, ValueError):
    pass
