/**
 * `verifyReceipt`: check, offline and before acting, that the guard allowed
 * this exact call.
 *
 * A receipt is the two signed log lines of one allowed action, as they are in
 * the agent's log: its `action_requested` record, then its `action_allowed`
 * record, which names the request by hash (`request_hash`) and the agent by
 * its log ID (`log_id`). The log's own signatures are the proof. The checks
 * and their order follow docs/log-format.md ("Decision receipts") and
 * docs/receipts.md, and every refusal gives the same `reason` as the Python
 * client's `verify_receipt`: both are held to the shared vectors of
 * tests/data/receipt-vectors.json.
 */

import { createHash, createPublicKey, type KeyObject, verify } from "node:crypto";

import canonicalize from "canonicalize";

import { ReceiptError } from "./errors.js";

const SIGNING_PREFIX = Buffer.from("guard-log/1 record\n"); // then the 32 raw bytes of the record's hash
const REQUESTED = "action_requested";
const ALLOWED = "action_allowed";
const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const TS = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?Z$/;

type LogLine = Record<string, unknown>;

export interface VerifyReceiptOptions {
  /** The agent the call is for. */
  readonly agentId: string;
  /** The tool about to run. */
  readonly tool: string;
  /** Exactly the input about to run; compared in canonical form. */
  readonly input: unknown;
  /** The oldest allowance to accept, in seconds. */
  readonly maxAgeSecs: number;
  /** Another clock than the system's. */
  readonly now?: Date;
}

/**
 * Checks that `receipt` proves the guard (whose Ed25519 key is `publicKey`,
 * 64 lowercase hex: `GET /v1/public-key`, or `keys/audit.pub` of its data
 * directory, obtained through a channel you trust) allowed `agentId` to call
 * `tool` with exactly `input`, at most `maxAgeSecs` seconds ago. Returns the
 * action ID (`act-N`, unique within the agent: keep the IDs you acted on to
 * refuse a receipt used twice). Throws ReceiptError, whose `reason` says why,
 * when the receipt does not prove that; RangeError for a malformed
 * `publicKey` or `maxAgeSecs`, which are the caller's mistakes.
 */
export function verifyReceipt(receipt: unknown, publicKey: string, options: VerifyReceiptOptions): string {
  const key = verifyKey(publicKey);
  const { agentId, tool, input, maxAgeSecs, now = new Date() } = options;
  if (typeof maxAgeSecs !== "number" || !(maxAgeSecs >= 0)) {
    throw new RangeError(`maxAgeSecs must be a number >= 0, not ${String(maxAgeSecs)}`);
  }
  if (!Array.isArray(receipt) || receipt.length !== 2) throw new ReceiptError("a receipt is a list of two record lines");
  const requested = record(receipt[0], 1);
  const allowed = record(receipt[1], 2);
  checkSignature(requested, 1, key);
  checkSignature(allowed, 2, key);
  if (requested.kind !== REQUESTED) throw new ReceiptError(`line 1 is ${String(requested.kind)}, not ${REQUESTED}`);
  if (allowed.kind !== ALLOWED) throw new ReceiptError(`line 2 is ${String(allowed.kind)}, not ${ALLOWED}`);
  if (!("request_hash" in allowed) || !("log_id" in allowed)) {
    throw new ReceiptError("the allowance names no request (written before receipts existed)");
  }
  if (allowed.request_hash !== requested.hash || allowed.action_id !== requested.action_id) {
    throw new ReceiptError("the allowance is for another request");
  }
  if (allowed.log_id !== agentId) throw new ReceiptError(`receipt is for agent ${repr(allowed.log_id)}, not ${repr(agentId)}`);
  if (requested.tool !== tool) throw new ReceiptError(`receipt is for tool ${repr(requested.tool)}, not ${repr(tool)}`);
  let given: string;
  try {
    given = canonical(input);
  } catch (error) {
    throw new ReceiptError(`input cannot be written as canonical JSON: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (canonical(requested.input ?? null) !== given) throw new ReceiptError("receipt is for another input");
  const age = now.getTime() / 1000 - timestamp(allowed);
  if (!(age <= maxAgeSecs)) {
    throw new ReceiptError(`receipt expired: allowed at ${String(allowed.ts)}, more than ${formatG(maxAgeSecs)} seconds ago`);
  }
  return allowed.action_id as string;
}

function verifyKey(publicKey: string): KeyObject | null {
  if (!isHex(publicKey, 64)) throw new RangeError("publicKey must be 64 lowercase hex characters (GET /v1/public-key)");
  try {
    return createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(publicKey, "hex").toString("base64url") }, format: "jwk" });
  } catch {
    return null; // 32 bytes that are no key: no signature verifies under it
  }
}

function isHex(value: unknown, length: number): value is string {
  return typeof value === "string" && value.length === length && /^[0-9a-f]*$/.test(value);
}

/** The canonical (RFC 8785) text of `value`; throws for what has none. */
function canonical(value: unknown): string {
  const problem = outsideDomain(value);
  if (problem) throw new TypeError(problem);
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError(`${typeof value} is not JSON`);
  return text;
}

/** Why RFC 8785 cannot write `value` though `canonicalize` would: a whole
 * number beyond 2^53-1 that it would write as a plain integer. */
function outsideDomain(value: unknown): string | null {
  if (typeof value === "number") {
    const size = Math.abs(value);
    return Number.isInteger(value) && size > MAX_SAFE && size < 1e21 ? `${value} is beyond 2^53-1` : null;
  }
  if (typeof value === "bigint") return `${value} is a bigint, not a JSON number`;
  if (typeof value === "object" && value !== null) {
    for (const item of Object.values(value)) {
      const problem = outsideDomain(item);
      if (problem) return problem;
    }
  }
  return null;
}

/** Line `n` (1 or 2) of a receipt, parsed, checked canonical and its hash
 * recomputed; its signature is checked by the caller. */
function record(line: unknown, n: number): LogLine {
  if (typeof line !== "string") throw new ReceiptError(`line ${n} is not a string`);
  let parsed: unknown;
  try {
    if (!line.isWellFormed()) throw new SyntaxError("lone surrogate");
    parsed = JSON.parse(line);
  } catch {
    throw new ReceiptError(`line ${n} is not valid JSON`);
  }
  const isObject = typeof parsed === "object" && parsed !== null && !Array.isArray(parsed);
  let text: string | null = null;
  if (isObject) {
    try {
      text = canonical(parsed);
    } catch {
      text = null; // e.g. a number RFC 8785 cannot write: never canonical
    }
  }
  if (!isObject || text !== line) {
    // JSON.parse keeps the last of two equal keys; strict JSON has no such object.
    if (hasDuplicateKey(line)) throw new ReceiptError(`line ${n} is not valid JSON`);
    throw new ReceiptError(isObject ? `line ${n} is not canonical JSON` : `line ${n} is not a JSON object`);
  }
  const rec = parsed as LogLine;
  if (typeof rec.kind !== "string" || typeof rec.ts !== "string" || typeof rec.action_id !== "string") {
    throw new ReceiptError(`line ${n} is malformed`);
  }
  if (!isHex(rec.hash, 64) || !isHex(rec.sig, 128)) throw new ReceiptError(`line ${n} is malformed`);
  const body = Object.fromEntries(Object.entries(rec).filter(([k]) => k !== "hash" && k !== "sig"));
  if (createHash("sha256").update(canonical(body)).digest("hex") !== rec.hash) {
    throw new ReceiptError(`line ${n}: hash does not match content`);
  }
  return rec;
}

function checkSignature(rec: LogLine, n: number, key: KeyObject | null): void {
  const message = Buffer.concat([SIGNING_PREFIX, Buffer.from(rec.hash as string, "hex")]);
  if (key === null || !verify(null, message, key, Buffer.from(rec.sig as string, "hex"))) {
    throw new ReceiptError(`line ${n}: signature does not verify`);
  }
}

/** Seconds since the epoch of line 2's `ts`, which the guard writes as
 * `2025-03-01T12:00:05.250000Z` (docs/log-format.md, "Common fields"). */
function timestamp(rec: LogLine): number {
  const match = TS.exec(rec.ts as string);
  if (match) {
    const [, y, mo, d, h, mi, s, fraction = ""] = match.map((part) => part ?? "") as string[];
    const ms = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s));
    const back = new Date(ms);
    // Date.UTC rolls 2025-02-30 over into March: such a date does not exist.
    if (back.getUTCDate() === Number(d) && back.getUTCHours() === Number(h) && back.getUTCMinutes() === Number(mi)) {
      return ms / 1000 + Number(`0.${fraction || "0"}`);
    }
  }
  throw new ReceiptError("line 2 is malformed");
}

/** A value as the Python client's messages show it (Python's `repr`), so both
 * clients give the very same reasons. */
function repr(value: unknown): string {
  if (typeof value === "string") {
    const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
    let out = quote;
    for (const ch of value) {
      const code = ch.codePointAt(0) as number;
      if (ch === "\\" || ch === quote) out += `\\${ch}`;
      else if (ch === "\n") out += "\\n";
      else if (ch === "\r") out += "\\r";
      else if (ch === "\t") out += "\\t";
      else if (ch !== " " && /[\p{C}\p{Z}]/u.test(ch)) {
        out += code < 0x100 ? `\\x${hex(code, 2)}` : code < 0x10000 ? `\\u${hex(code, 4)}` : `\\U${hex(code, 8)}`;
      } else out += ch;
    }
    return out + quote;
  }
  if (value === null || value === undefined) return "None";
  if (typeof value === "boolean") return value ? "True" : "False";
  return typeof value === "number" ? String(value) : JSON.stringify(value);
}

function hex(code: number, width: number): string {
  return code.toString(16).padStart(width, "0");
}

/** `value` as Python's `format(value, "g")` writes it: 6 significant digits,
 * trailing zeros dropped, exponent form below 1e-4 and from 1e6. */
export function formatG(value: number): string {
  if (value === 0 || !Number.isFinite(value)) return value === 0 ? "0" : value > 0 ? "inf" : "-inf";
  const [mantissa = "", exponentText = "0"] = value.toExponential(5).split("e");
  const exponent = Number(exponentText);
  const strip = (text: string): string => (text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text);
  if (exponent < -4 || exponent >= 6) {
    return `${strip(mantissa)}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  return strip(value.toFixed(5 - exponent));
}

/** Whether the JSON text `text` (valid JSON: JSON.parse read it) has an object with two equal keys. */
export function hasDuplicateKey(text: string): boolean {
  const objects: (Set<string> | null)[] = []; // null for an array
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === '"') {
      let end = i + 1;
      while (end < text.length && text[end] !== '"') end += text[end] === "\\" ? 2 : 1;
      let next = end + 1;
      while (text[next] === " " || text[next] === "\t" || text[next] === "\n" || text[next] === "\r") next++;
      const keys = objects.at(-1);
      if (text[next] === ":" && keys) {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        if (keys.has(key)) return true;
        keys.add(key);
      }
      i = end;
    } else if (ch === "{") objects.push(new Set());
    else if (ch === "[") objects.push(null);
    else if (ch === "}" || ch === "]") objects.pop();
  }
  return false;
}
