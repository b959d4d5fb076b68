/**
 * The only place that touches the network: sends a `Request` with `fetch`,
 * again after a failure as far as the retry policy and the request allow.
 */

import { setTimeout as sleep } from "node:timers/promises";

import { errorFromResponse, InvalidResponse, TransportError } from "./errors.js";
import type { Request } from "./requests.js";
import type { Retry } from "./retry.js";
import { traceHeaders } from "./trace.js";

export const USER_AGENT = "guardd-client-ts/0.1.0";

// Failures before any byte of the request left: always safe to send again.
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

// The operating system's words for the usual failures, as the Python client says them.
const REASONS: Readonly<Record<string, string>> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset by peer",
  EHOSTUNREACH: "no route to host",
  ENETUNREACH: "network is unreachable",
  ENOTFOUND: "name or service not known",
  EAI_AGAIN: "temporary failure in name resolution",
  EPIPE: "broken pipe",
  ETIMEDOUT: "connection timed out",
  UND_ERR_CONNECT_TIMEOUT: "connection timed out",
};

interface Failure {
  readonly reason: string;
  readonly sent: boolean;
}

function describe(error: unknown, timeout: number): Failure {
  if (error instanceof Error && error.name === "TimeoutError") {
    return { reason: `no answer within ${timeout}s`, sent: true };
  }
  let seen: unknown = error;
  while (seen instanceof Error) {
    // fetch will not connect to some ports at all (6000, 6665, ...: those browsers block).
    if (seen.message === "bad port") return { reason: "fetch refuses to connect to this port", sent: false };
    const code = (seen as { code?: unknown }).code;
    if (typeof code === "string" && (REASONS[code] || NOT_SENT.has(code))) {
      return { reason: REASONS[code] ?? seen.message, sent: !NOT_SENT.has(code) };
    }
    if (seen.cause === undefined) break;
    seen = seen.cause;
  }
  const text = seen instanceof Error ? seen.message : String(seen);
  return { reason: text ? text[0]!.toLowerCase() + text.slice(1) : "connection failed", sent: true };
}

/**
 * What a TransportError says: the address tried first, then what was asked.
 * `sent` means the service may have received the request before the
 * connection failed, so it may have acted on it.
 */
export function transportMessage(baseUrl: string, request: Request<unknown>, attempts: number, failure: Failure): string {
  const what = `${request.method} ${request.path}, ${attempts} attempt${attempts > 1 ? "s" : ""}`;
  if (failure.sent) {
    return `no answer from guardd at ${baseUrl}: ${failure.reason} (${what}; the service may have received the request)`;
  }
  return `cannot reach guardd at ${baseUrl}: ${failure.reason} (${what})`;
}

/** Waits `seconds`; if `signal` aborts first, throws its reason. */
async function pause(seconds: number, signal: AbortSignal | undefined): Promise<void> {
  try {
    await sleep(seconds * 1000, undefined, signal ? { signal } : {});
  } catch (error) {
    throw signal?.aborted ? signal.reason : error;
  }
}

export class Sender {
  readonly baseUrl: string;
  readonly retry: Retry;
  readonly timeout: number;
  readonly #headers: Readonly<Record<string, string>>;

  constructor(baseUrl: string, token: string, timeout: number, retry: Retry) {
    this.baseUrl = baseUrl;
    this.retry = retry;
    this.timeout = timeout;
    this.#headers = { Authorization: `Bearer ${token}`, Accept: "application/json", "User-Agent": USER_AGENT };
  }

  /** The answer to `request`, parsed; `signal` gives the wait up (its reason is thrown). */
  async send<T>(request: Request<T>, signal?: AbortSignal): Promise<T> {
    const url = new URL(this.baseUrl + request.path);
    for (const [key, value] of Object.entries(request.params ?? {})) url.searchParams.set(key, value);
    // The caller's span when it sends: every attempt belongs to it.
    const headers: Record<string, string> = { ...this.#headers, ...request.headers, ...traceHeaders() };
    if (request.body !== undefined) headers["Content-Type"] = "application/json";
    // The service may hold a long-poll for `wait` seconds before it answers.
    const timeout = this.timeout + (request.wait ?? 0);
    let attempt = 0;
    let seen = false; // an earlier attempt may have reached the service
    for (;;) {
      attempt += 1;
      signal?.throwIfAborted();
      const deadline = AbortSignal.timeout(Math.ceil(timeout * 1000));
      let status: number;
      let text: string;
      try {
        const response = await fetch(url, {
          method: request.method,
          headers,
          body: request.body ?? null,
          signal: signal ? AbortSignal.any([signal, deadline]) : deadline,
        });
        status = response.status;
        text = await response.text();
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        const failure = describe(error, timeout);
        if ((failure.sent && !request.resendable) || !this.retry.mayRetry(attempt)) {
          throw new TransportError(transportMessage(this.baseUrl, request, attempt, failure), this.baseUrl, { cause: error });
        }
        seen ||= failure.sent;
        await pause(this.retry.delay(attempt), signal);
        continue;
      }
      if (status === 503 && this.retry.mayRetry(attempt)) {
        await pause(this.retry.delay(attempt), signal);
        continue;
      }
      if (status < 200 || status >= 300) throw errorFromResponse(status, text, seen);
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        throw new InvalidResponse(`${request.method} ${request.path}: body is not JSON`);
      }
      try {
        return request.parse(body);
      } catch (error) {
        if (error instanceof InvalidResponse) throw new InvalidResponse(`${request.method} ${request.path}: ${error.message}`);
        throw error;
      }
    }
  }
}
