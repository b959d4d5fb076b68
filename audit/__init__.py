"""``audit``: verify and show Agent Action Guard logs offline.

The command line is ``audit.cli.main``; the log format is docs/log-format.md.
"""

from audit.cli import main

__all__ = ["main"]
