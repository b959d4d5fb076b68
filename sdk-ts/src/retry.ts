/** When and how long to wait before sending a request again. */

export interface RetryOptions {
  /** Sends at most, the first included (default 4). */
  readonly attempts?: number;
  /** Seconds before the second attempt, doubled for each one after (default 0.2). */
  readonly baseDelay?: number;
  /** The longest wait between attempts, in seconds (default 5). */
  readonly maxDelay?: number;
}

/**
 * Connection failures and 503 answers are retried; any other HTTP answer,
 * 4xx above all, never is. A request that may already have reached the
 * service (the connection dropped while waiting for the answer) is sent again
 * only when repeating it is safe: reads, action requests (one
 * `Idempotency-Key` for all attempts), outcome reports, cancels and policy
 * updates. The wait before attempt n+1 is `baseDelay * 2^(n-1)`, capped at
 * `maxDelay`, with up to half of it taken off at random so that many clients
 * do not come back at the same instant.
 */
export class Retry {
  readonly attempts: number;
  readonly baseDelay: number;
  readonly maxDelay: number;

  constructor(options: RetryOptions = {}) {
    const { attempts = 4, baseDelay = 0.2, maxDelay = 5 } = options;
    if (!Number.isInteger(attempts) || attempts < 1) throw new RangeError(`attempts must be an integer >= 1, not ${attempts}`);
    if (!(baseDelay >= 0)) throw new RangeError(`baseDelay must be >= 0 seconds, not ${baseDelay}`);
    if (!(maxDelay >= 0)) throw new RangeError(`maxDelay must be >= 0 seconds, not ${maxDelay}`);
    this.attempts = attempts;
    this.baseDelay = baseDelay;
    this.maxDelay = maxDelay;
  }

  /** Seconds to wait after failed attempt number `attempt` (1-based). */
  delay(attempt: number): number {
    const full = Math.min(this.maxDelay, this.baseDelay * 2 ** (attempt - 1));
    return full * (1 - Math.random() / 2);
  }

  mayRetry(attempt: number): boolean {
    return attempt < this.attempts;
  }
}
