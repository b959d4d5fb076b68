// Single sign-on: the Authorization Code flow with PKCE, as a public client,
// straight against the OpenID provider that guardd trusts (GET /v1/auth/config).
//
// The tokens live in this module's memory only: never in storage, never in a
// URL. Only what must survive the round trip to the provider (the PKCE
// verifier, the state and the nonce) waits in sessionStorage, and is removed
// when the provider sends the browser back. The ID token is the bearer token
// guardd checks; it is renewed with the refresh token a minute before it
// expires, or, without one, by signing in again.

const PENDING_KEY = "guard.ssoPending"; // {verifier, state, nonce}: never a token
// Set while this tab is signed in: a reload signs in again at once (the
// provider's own session usually answers without asking). Never a token.
const RESUME_KEY = "guard.ssoResume";
const RENEW_BEFORE_S = 60;
const MIN_RENEW_S = 10; // never sooner: a token that looks spent must not renew in a loop
const TIMEOUT_MS = 10000;

let config = null; // {issuer, client_id, scopes}, or null without single sign-on
let provider = null; // the provider's discovery document
let tokens = null; // {id_token, refresh_token?, exp}
let claims = null; // the ID token's claims, for display (guardd checks the signature)
let renewTimer = null;
const listeners = new Set();

function b64url(bytes) {
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function random() {
  return b64url(crypto.getRandomValues(new Uint8Array(32)));
}

async function challenge(verifier) {
  return b64url(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier))));
}

function decodeClaims(jwt) {
  const part = jwt.split(".")[1] ?? "";
  const text = atob(part.replace(/-/g, "+").replace(/_/g, "/"));
  return JSON.parse(new TextDecoder().decode(Uint8Array.from(text, (c) => c.charCodeAt(0))));
}

async function fetchJson(url, init = {}) {
  const response = await fetch(url, {
    ...init,
    cache: "no-store",
    credentials: "omit",
    redirect: "error",
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  let data = null;
  try {
    data = await response.json();
  } catch {
    // not JSON
  }
  if (!response.ok) {
    const said = data?.error_description ?? data?.error ?? response.statusText;
    throw new Error(`${url.split("?")[0]} answered ${response.status}: ${said}`);
  }
  return data;
}

function redirectUri() {
  return `${location.origin}/`;
}

async function discover() {
  if (!provider) {
    provider = await fetchJson(`${config.issuer.replace(/\/$/, "")}/.well-known/openid-configuration`);
  }
  return provider;
}

/** Whether guardd has single sign-on; learns its settings once. */
export async function available() {
  if (config !== null) return true;
  try {
    const response = await fetch("/v1/auth/config", { cache: "no-store", credentials: "omit" });
    if (!response.ok) return false;
    config = await response.json();
    return true;
  } catch {
    return false;
  }
}

/** The bearer token to send, or null when nobody signed in here. */
export function token() {
  return tokens?.id_token ?? null;
}

// What guardd accepts as an operator's name (guardd.bodies): at most 128
// characters, none of them control, invisible, bidirectional or separators.
const MAX_NAME = 128;
const UNWANTED_IN_NAME = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

function fitName(value) {
  return typeof value === "string" && value !== "" && [...value].length <= MAX_NAME && !UNWANTED_IN_NAME.test(value);
}

/**
 * Who signed in: {name, subject}, from the ID token; null when nobody did.
 * The name is the one guardd shows: email (when not said unverified), else
 * name, passing over one that no operator name may be, else sub.
 */
export function person() {
  if (!claims) return null;
  // An email the provider has not verified is passed over, as guardd does.
  const unverified = claims.email_verified === false || claims.email_verified === "false";
  const name = [unverified ? undefined : claims.email, claims.name].find(fitName) ?? claims.sub;
  return { name, subject: claims.sub };
}

/** Called with no argument whenever the tokens change (renewed, or gone). */
export function onChange(listener) {
  listeners.add(listener);
}

function changed() {
  for (const listener of listeners) listener();
}

/** Whether this tab was signed in before a reload: sign in again at once. */
export function resumable() {
  return sessionStorage.getItem(RESUME_KEY) === "1";
}

/** Forget the tokens (a 401, or signing out). */
export function forget() {
  sessionStorage.removeItem(RESUME_KEY);
  tokens = null;
  claims = null;
  clearTimeout(renewTimer);
  renewTimer = null;
  changed();
}

/** Leave for the provider's sign-in page. */
export async function signIn() {
  const doc = await discover();
  const pending = { verifier: random(), state: random(), nonce: random() };
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
  const params = new URLSearchParams({
    client_id: config.client_id,
    redirect_uri: redirectUri(),
    response_type: "code",
    scope: config.scopes.join(" "),
    state: pending.state,
    nonce: pending.nonce,
    code_challenge: await challenge(pending.verifier),
    code_challenge_method: "S256",
  });
  // OpenID Connect grants offline_access (a refresh token) only with prompt=consent.
  if (config.scopes.includes("offline_access")) params.set("prompt", "consent");
  location.assign(`${doc.authorization_endpoint}?${params}`);
}

function keep(answer, nonce) {
  if (typeof answer?.id_token !== "string") throw new Error("the provider sent no ID token");
  const idClaims = decodeClaims(answer.id_token);
  if (nonce !== undefined && idClaims.nonce !== nonce) throw new Error("the ID token's nonce does not match");
  tokens = {
    id_token: answer.id_token,
    refresh_token: answer.refresh_token ?? tokens?.refresh_token,
    renewAt: renewalDue(idClaims),
  };
  claims = idClaims;
  sessionStorage.setItem(RESUME_KEY, "1");
  scheduleRenewal();
  changed();
}

// When to renew, on this browser's clock: a minute before the token's own
// lifetime (exp - iat, both the provider's clock) is out, counted from now.
// Comparing exp with this clock instead renewed in a loop whenever the two
// clocks differed by more than the lifetime less a minute.
function renewalDue(idClaims) {
  const lifetime = Number.isFinite(idClaims.iat)
    ? idClaims.exp - idClaims.iat
    : idClaims.exp - Date.now() / 1000;
  const inS = lifetime > 2 * RENEW_BEFORE_S ? lifetime - RENEW_BEFORE_S : lifetime / 2;
  return Date.now() + Math.max(inS, MIN_RENEW_S) * 1000;
}

function scheduleRenewal() {
  clearTimeout(renewTimer);
  const inMs = Math.max(0, tokens.renewAt - Date.now());
  renewTimer = setTimeout(() => renew().catch(() => forget()), inMs);
}

/** A fresh ID token: with the refresh token if there is one, else a new sign-in. */
export async function renew() {
  if (!tokens?.refresh_token) {
    await signIn();
    return;
  }
  const doc = await discover();
  const answer = await fetchJson(doc.token_endpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", Accept: "application/json" },
    body: new URLSearchParams({
      grant_type: "refresh_token",
      refresh_token: tokens.refresh_token,
      client_id: config.client_id,
    }),
  });
  keep(answer);
}

/**
 * The end of the round trip: when the provider sent the browser back with a
 * code (or an error), exchange it for tokens and clean the address bar.
 * Resolves to true when someone signed in, false when there was nothing to
 * finish; throws when the provider refused.
 */
export async function finish() {
  const query = new URLSearchParams(location.search);
  if (!query.has("code") && !query.has("error")) return false;
  const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? "null");
  sessionStorage.removeItem(PENDING_KEY);
  history.replaceState(null, "", `${location.pathname}${location.hash}`);
  if (query.has("error")) {
    sessionStorage.removeItem(RESUME_KEY);
    throw new Error(`the provider refused: ${query.get("error_description") ?? query.get("error")}`);
  }
  if (!pending || query.get("state") !== pending.state) {
    throw new Error("this sign-in was not started here (state does not match): sign in again");
  }
  const doc = await discover();
  const answer = await fetchJson(doc.token_endpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded", Accept: "application/json" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code: query.get("code"),
      redirect_uri: redirectUri(),
      client_id: config.client_id,
      code_verifier: pending.verifier,
    }),
  });
  keep(answer, pending.nonce);
  return true;
}
