"""When and how long to wait before sending a request again."""

from __future__ import annotations

import random

import attrs


@attrs.frozen
class Retry:
    """Retry policy: ``attempts`` sends at most, backoff from ``base_delay`` seconds.

    Connection failures and 503 answers are retried; any other HTTP answer,
    4xx above all, never is. A request that may already have reached the
    service (the connection dropped while waiting for the answer) is sent again
    only when repeating it is safe: reads, action requests (they carry one
    ``Idempotency-Key`` for all attempts) and outcome reports.
    The wait before attempt n+1 is ``base_delay * 2**(n-1)``, capped at
    ``max_delay``, with up to half of it taken off at random so that many
    clients do not come back at the same instant.
    """

    attempts: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    base_delay: float = attrs.field(default=0.2, validator=attrs.validators.ge(0))
    max_delay: float = attrs.field(default=5.0, validator=attrs.validators.ge(0))

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        full = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        # Jitter spreads clients apart; it needs no cryptographic randomness.
        return float(full * (1 - random.random() / 2))  # noqa: S311

    def may_retry(self, attempt: int) -> bool:
        return attempt < self.attempts
