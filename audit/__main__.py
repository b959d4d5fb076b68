"""``python -m audit``: the same as the ``audit`` command."""

from audit.cli import main

raise SystemExit(main())
