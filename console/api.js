// Talking to guardd: the bearer token and fetch.
//
// The token is a signed-in person's ID token (sso.js keeps it in memory only)
// or, as break-glass, the admin token, kept in sessionStorage (this tab only).
// It leaves the page only in the Authorization header, never in a URL. A 401
// forgets it.

import * as sso from "./sso.js";

const TOKEN_KEY = "guard.adminToken";
const TIMEOUT_MS = 10000;

/** The server answered with an error body {error, code}. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** 401: the token is missing or wrong; it has been forgotten. */
export class Unauthorized extends ApiError {}

/** No answer at all: the server is down, unreachable or too slow. */
export class Unreachable extends Error {}

export function getToken() {
  return sso.token() ?? sessionStorage.getItem(TOKEN_KEY);
}

/** Whether the token is a signed-in person's (not the admin token). */
export function signedIn() {
  return sso.token() !== null;
}

export function setToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  if (sso.token() !== null) sso.forget();
}

/** Build a path from fixed parts and values; values are URL-encoded. */
export function path(strings, ...values) {
  return strings.reduce(
    (out, part, i) => out + part + (i < values.length ? encodeURIComponent(values[i]) : ""),
    "",
  );
}

/** Call the API; resolves to the parsed JSON body or throws one of the errors above. */
export async function request(method, url, body) {
  const token = getToken();
  if (!token) throw new Unauthorized(401, "unauthorized", "Not signed in.");
  const headers = { Authorization: `Bearer ${token}`, Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      redirect: "error",
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
  } catch (err) {
    throw new Unreachable(err.name === "TimeoutError" ? "no answer within 10 s" : err.message);
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    // not JSON: keep null and report the status below
  }
  if (response.ok) return data;
  const code = typeof data?.code === "string" ? data.code : `http_${response.status}`;
  const message = typeof data?.error === "string" ? data.error : response.statusText;
  if (response.status === 401) {
    clearToken();
    throw new Unauthorized(response.status, code, message);
  }
  throw new ApiError(response.status, code, message);
}

export const get = (url) => request("GET", url);
export const post = (url, body) => request("POST", url, body);
