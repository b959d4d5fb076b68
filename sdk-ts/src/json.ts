/**
 * JSON at the wire: money exact both ways, and inputs the service can log.
 *
 * Money (`budget`, `spent`, `remaining`, `cost`) is a decimal string in every
 * typed result, e.g. `"0.3"`. The service's money has at most 6 decimal places
 * and is below 10^9, so at most 15 significant digits: a JavaScript number
 * holds every such value exactly enough that `String(n)` gives back the very
 * text the service wrote (the shortest text that reads back as the same
 * double; any other text of 15 digits or fewer would read back differently).
 * Money sent (`cost`) may be a number or a decimal string, written into the
 * body as a JSON number, character for character.
 */

import { ToolInputError } from "./errors.js";

/** Money as the client accepts it: a number, or a decimal string such as `"0.1"`. */
export type Money = number | string;

const DECIMAL = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?$/;
// Integers a double can hold exactly; between 2^53 and 10^21 a whole number would
// be written as an integer the service refuses (docs/api.md, "Strict JSON").
const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const EXPONENT_FORM = 1e21;

/** `value` checked and written as the JSON number it stands for. */
export function moneyText(value: Money, what: string): string {
  if (typeof value === "string") {
    if (!DECIMAL.test(value)) {
      throw new TypeError(`${what} must be a decimal number such as "0.5", not ${JSON.stringify(value)}`);
    }
    return value;
  }
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new TypeError(`${what} must be a finite number or a decimal string, not ${String(value)}`);
  }
  return String(value);
}

/** A money value of an answer as its exact decimal text. */
export function moneyFromJson(value: number): string {
  return String(value);
}

/**
 * Why `value` cannot be sent as the JSON the service logs, and the place
 * inside it (`path` is the value's own name); null if it can. Accepted: null, booleans, well-formed
 * strings, finite numbers (whole ones within 2^53-1 or from 10^21), arrays,
 * and plain objects; an object member whose value is `undefined` is left out,
 * as `JSON.stringify` does.
 */
export function jsonSafetyProblem(value: unknown, path: string): JsonProblem | null {
  switch (typeof value) {
    case "boolean":
      return null;
    case "string":
      return value.isWellFormed() ? null : problem(path, "holds a lone surrogate");
    case "number":
      if (!Number.isFinite(value)) return problem(path, `is ${value}, not a finite number`);
      if (Number.isInteger(value) && Math.abs(value) > MAX_SAFE && Math.abs(value) < EXPONENT_FORM) {
        return problem(path, `is an integer beyond 2^53-1 (${value})`);
      }
      return null;
    case "object": {
      if (value === null) return null;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const item: unknown = value[i];
          if (item === undefined) return problem(`${path}[${i}]`, "is undefined, which JSON cannot carry");
          const found = jsonSafetyProblem(item, `${path}[${i}]`);
          if (found) return found;
        }
        return null;
      }
      const proto: unknown = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        const name = (value as { constructor?: { name?: string } }).constructor?.name ?? "object";
        return problem(path, `is a ${name}, which JSON cannot carry as it is`);
      }
      for (const [key, item] of Object.entries(value)) {
        if (item === undefined) continue;
        const found = jsonSafetyProblem(item, `${path}${memberPath(key)}`);
        if (found) return found;
      }
      return null;
    }
    default:
      return problem(path, `is ${value === undefined ? "undefined" : `a ${typeof value}`}, which JSON cannot carry`);
  }
}

/** Where in a value JSON fails, and how: `input.to` `holds a lone surrogate`. */
export interface JsonProblem {
  readonly at: string;
  readonly what: string;
}

function problem(at: string, what: string): JsonProblem {
  return { at, what };
}

function memberPath(key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/** Throws ToolInputError when `input` of `tool` cannot be sent. */
export function checkInput(tool: string, input: unknown): void {
  const found = jsonSafetyProblem(input, "input");
  if (found) {
    throw new ToolInputError(`input of tool ${JSON.stringify(tool)} is not JSON-safe: ${found.at} ${found.what}`, found.at);
  }
}

/**
 * A JSON object's text from `fields` (each written with JSON.stringify,
 * members whose value is undefined left out) and `money` (each written as the
 * number it is, never passing through a double).
 */
export function objectText(fields: Record<string, unknown>, money: Record<string, string | undefined> = {}): string {
  const parts: string[] = [];
  for (const [key, value] of Object.entries(fields)) {
    if (value !== undefined) parts.push(`${JSON.stringify(key)}:${JSON.stringify(value)}`);
  }
  for (const [key, text] of Object.entries(money)) {
    if (text !== undefined) parts.push(`${JSON.stringify(key)}:${text}`);
  }
  return `{${parts.join(",")}}`;
}
