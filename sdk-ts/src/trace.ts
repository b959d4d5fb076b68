/**
 * W3C trace context on each request, so that guardd's spans are children of
 * the caller's span (docs/sdk-ts.md, "Traces").
 *
 * The client depends on no OpenTelemetry package and imports none: the
 * OpenTelemetry API keeps what a program registered (its context manager)
 * in one global slot, `Symbol.for("opentelemetry.js.api.1")`, and its
 * context keys are `Symbol.for(...)` too, so the current span can be read
 * from there whichever copy of `@opentelemetry/api` the program loaded.
 * Without OpenTelemetry that costs one property lookup a request.
 */

const API = Symbol.for("opentelemetry.js.api.1");
const SPAN_KEY = Symbol.for("OpenTelemetry Context Key SPAN");
const TRACE_ID = /^(?!0{32}$)[0-9a-f]{32}$/;
const SPAN_ID = /^(?!0{16}$)[0-9a-f]{16}$/;

interface SpanContextLike {
  readonly traceId?: unknown;
  readonly spanId?: unknown;
  readonly traceFlags?: unknown;
  readonly traceState?: { serialize?: () => string } | undefined;
}

interface OtelGlobal {
  readonly context?: { active?: () => { getValue?: (key: symbol) => unknown } | undefined };
}

/** The `traceparent` (and `tracestate`) of the caller's current span, if any. */
export function traceHeaders(): Record<string, string> | undefined {
  const api = (globalThis as Record<symbol, OtelGlobal | undefined>)[API];
  if (api === undefined) return undefined;
  let span: unknown;
  try {
    span = api.context?.active?.()?.getValue?.(SPAN_KEY);
  } catch {
    return undefined; // a context manager that fails is no reason to fail the request
  }
  const spanContext = (span as { spanContext?: () => SpanContextLike } | undefined)?.spanContext?.();
  if (spanContext === undefined) return undefined;
  const { traceId, spanId, traceFlags } = spanContext;
  if (typeof traceId !== "string" || !TRACE_ID.test(traceId)) return undefined;
  if (typeof spanId !== "string" || !SPAN_ID.test(spanId)) return undefined;
  const flags = typeof traceFlags === "number" ? traceFlags & 0xff : 0;
  const headers: Record<string, string> = { traceparent: `00-${traceId}-${spanId}-${flags.toString(16).padStart(2, "0")}` };
  const state = spanContext.traceState?.serialize?.();
  if (state) headers.tracestate = state;
  return headers;
}
