// The console: sign-in (single sign-on in sso.js, or the admin token), routing (#/agents, #/pending, #/agents/<id>), the 2 s
// refresh, the pending inbox (filters, decided cards, tab title, notifications).

import * as api from "./api.js";
import { agentDetail } from "./detail.js";
import { grantsView } from "./grants.js";
import { disableNotifications, enableNotifications, notify, notifyState } from "./notify.js";
import { passkeyFor, passkeysView } from "./passkeys.js";
import { PendingCards, decidedElsewhere, ownDecision, pendingKey, unknownDecision } from "./pending.js";
import * as sso from "./sso.js";
import { paintTimes, setTime, timeText } from "./times.js";
import { agentRow, errorText, h, setText, show, syncKeyed } from "./views.js";

const REFRESH_MS = 2000;
const TICK_MS = 1000; // ages and countdowns move between refreshes
const LOG_TAIL = 50;
const OPERATOR_KEY = "guard.operator"; // the operator's name; never the token
const TITLE = document.title;

const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);

const agentRows = new Map();
let detail = null;
let timer = null;
let refreshing = false;
let changes = 0; // bumped around every approve, reject, terminate: marks overlapping refreshes stale
let lastUpdate = null;
let agentsById = new Map(); // the last GET /v1/agents, for the pending cards and the agent's page
let knownPending = null; // keys of the pending actions seen so far; null before the first list
let lastPending = []; // the last pending entries, for an agent's page when it opens
let viaSso = false; // whether this session signed in with single sign-on (else a token typed in)
let tokenKind = "admin token"; // what was typed in: the admin token or an operator token

const operatorInput = $("operator-name");

function operatorName() {
  return operatorInput.value.trim();
}

/**
 * The approver's name. Without one nothing is sent: the error goes on the
 * card, and the name field (focused, so the page scrolls up to it) says why.
 */
function requireOperator() {
  const name = operatorName();
  if (!name) {
    setText(
      $("operator-needed"),
      "Nothing was decided: enter your name here first. Every decision is signed into the agent's log with it.",
    );
    show($("operator-needed"), true);
    operatorInput.setAttribute("aria-invalid", "true");
    operatorInput.focus();
    throw new Error("Not decided: enter your operator name at the top of the page first.");
  }
  return name;
}

/** A confirmation: it stays in view until the operator dismisses it or another replaces it. */
function flash(message) {
  setText($("flash-text"), message);
  show($("flash"), true);
}

$("flash-dismiss").addEventListener("click", () => show($("flash"), false));

// ---- sign-in -------------------------------------------------------------

function showLogin(message) {
  clearInterval(timer);
  timer = null;
  for (const id of ["nav", "operator", "agents-view", "pending-view", "passkeys-view", "detail-view", "offline-banner", "api-error"]) {
    show($(id), false);
  }
  show($("login"), true);
  setText($("login-error"), message ?? "");
  show($("login-error"), Boolean(message));
  const input = $("token-input");
  input.value = "";
  input.focus();
}

// How an operator authenticated (GET /v1/me's via), as the header says it.
const VIA_TEXT = {
  oidc: "via single sign-on",
  operator_token: "via an operator token",
  admin_token: "via the admin token (break-glass)",
};

// Why a control is missing: said once in the header, for the highest role held.
const ROLE_NOTE = {
  "": "You hold no role here: an admin must map your groups to a role before you can see or decide anything.",
  viewer: "Viewer: you can see everything; approving, rejecting and grants need the approver role, terminating an agent the admin role.",
  approver: "Approver: terminating an agent needs the admin role.",
  admin: "",
};

let askingWho = false;

/** Type the operator's name for them: decisions are recorded under the name they authenticated with. */
function fixName(name) {
  operatorInput.value = name;
  operatorInput.readOnly = true;
}

/**
 * Who is signed in and what they may do: the page offers only that. Until
 * GET /v1/me answers, no control that changes anything is shown (style.css
 * hides them while body[data-roles] lacks the role); the refresh asks again
 * when it could not answer.
 */
async function showWho() {
  const token = api.getToken();
  $("sign-out").textContent = api.signedIn() ? "Sign out" : "Forget token";
  if (!token) {
    delete document.body.dataset.roles;
    delete document.body.dataset.via;
    show($("signed-in"), false);
    show($("role-note"), false);
    operatorInput.readOnly = false;
    operatorInput.value = localStorage.getItem(OPERATOR_KEY) ?? "";
    return;
  }
  const who = sso.person();
  if (who) {
    fixName(who.name); // at once; GET /v1/me confirms it
    setText($("signed-in-name"), who.name);
    show($("signed-in"), true);
  } else if (operatorInput.readOnly) {
    operatorInput.readOnly = false;
    operatorInput.value = localStorage.getItem(OPERATOR_KEY) ?? "";
  }
  if (askingWho) return;
  askingWho = true;
  let me;
  try {
    me = await api.get("/v1/me");
  } catch (err) {
    handleError(err);
    return;
  } finally {
    askingWho = false;
  }
  if (api.getToken() !== token) return; // signed out or in as someone else meanwhile: they were asked for
  const roles = Array.isArray(me?.roles) ? me.roles : [];
  document.body.dataset.roles = roles.join(" ");
  document.body.dataset.via = me.via;
  const breakGlass = me.via === "admin_token";
  // The admin token names nobody: its holder types a name, recorded as given.
  if (!breakGlass) fixName(me.name);
  setText($("signed-in-name"), breakGlass ? "the admin token" : me.name);
  setText($("signed-in-roles"), roles.length ? `(${roles.join(", ")})` : "(no role)");
  setText($("signed-in-via"), VIA_TEXT[me.via] ?? `via ${me.via}`);
  show($("signed-in"), true);
  const note = ROLE_NOTE[roles[0] ?? ""] ?? "";
  setText($("role-note"), note);
  show($("role-note"), note !== "");
}

function start() {
  viaSso = api.signedIn();
  tokenKind = (api.getToken() ?? "").startsWith("opr_") ? "operator token" : "admin token";
  show($("login"), false);
  show($("nav"), true);
  show($("operator"), true);
  showWho();
  route();
  refresh();
  clearInterval(timer);
  timer = setInterval(refresh, REFRESH_MS);
}

setInterval(() => paintTimes(), TICK_MS);

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token-input").value.trim();
  if (!token) return;
  api.setToken(token);
  start();
});

$("sign-out").addEventListener("click", () => {
  const signedIn = api.signedIn();
  api.clearToken();
  showWho();
  showLogin(signedIn ? "Signed out." : "Token forgotten. Enter it again to continue.");
});

$("sso-signin").addEventListener("click", () => {
  sso.signIn().catch((err) => showLogin(`Single sign-on failed: ${err.message}`));
});

sso.onChange(() => {
  if (sso.token()) showWho();
  else if (!api.getToken()) showLogin("Your single sign-on session ended. Sign in again.");
});

operatorInput.value = localStorage.getItem(OPERATOR_KEY) ?? "";
operatorInput.addEventListener("input", () => {
  localStorage.setItem(OPERATOR_KEY, operatorName());
  if (operatorName()) {
    show($("operator-needed"), false);
    operatorInput.removeAttribute("aria-invalid");
  }
});

// ---- errors --------------------------------------------------------------

/** Errors of the refresh loop and of operator actions end here. */
function handleError(err) {
  if (err instanceof api.Unauthorized) {
    const wasSignedIn = viaSso;
    showWho();
    if (wasSignedIn) showLogin(`The server refused your sign-in (${errorText(err)}). Sign in again.`);
    else showLogin(`The server refused the ${tokenKind} (${errorText(err)}). Enter it again.`);
  } else if (err instanceof api.Unreachable) {
    const since = lastUpdate ? ` Showing data from ${timeText(lastUpdate.toISOString())}.` : "";
    setText(
      $("offline-banner"),
      `Cannot reach the guard server at ${location.origin} (${err.message}). Retrying every 2 s.${since}`,
    );
    show($("offline-banner"), true);
  } else if (err instanceof api.ApiError) {
    setText($("api-error"), `The server answered with an error: ${errorText(err)}`);
    show($("api-error"), true);
  } else {
    setText($("api-error"), `Console error: ${err.message}`);
    show($("api-error"), true);
    console.error(err);
  }
}

/** For operator actions: a 401 or an unreachable server also goes to the page-wide handler. */
async function act(run) {
  try {
    return await run();
  } catch (err) {
    if (err instanceof api.Unauthorized || err instanceof api.Unreachable) handleError(err);
    throw err;
  }
}

/** An action that changes state: refreshes that overlap it are discarded as stale. */
async function change(run) {
  changes += 1;
  try {
    return await act(run);
  } finally {
    changes += 1;
  }
}

// ---- operator actions ----------------------------------------------------

const agentActions = {
  operatorName,
  verify: (id) => act(() => api.get(api.path`/v1/agents/${id}/verify`)),
  async revokeGrant(id, grantId) {
    const by = requireOperator();
    const grant = await change(() => api.post(api.path`/v1/agents/${id}/grants/${grantId}/revoke`, { by }));
    flash(`${grant.grant_id} of ${id} revoked`);
    refresh();
  },
  async terminate(id, reason, by) {
    if (!reason.trim() || !by.trim()) throw new Error("Reason and operator name are required.");
    await change(() => api.post(api.path`/v1/agents/${id}/terminate`, { reason, by: by.trim() }));
    flash(`Agent ${id} terminated: ${reason}`);
    refresh();
  },
};

/** The confirmation line of a decision made here, with what the operator wrote. */
function describeDecision(kind, d, body) {
  let text = d?.decision ?? "done";
  if (d?.decision === "allowed") text = `allowed (cost ${d.cost}, ${d.remaining} left)`;
  if (d?.decision === "denied") text = `denied (${d.reason?.code ?? "no reason"})`;
  if (d?.decision === "pending_approval") text = `approval recorded (${d.approvals?.length ?? "?"} of ${d.approvals_required ?? "?"})`;
  if (kind === "reject") return `${text}: “${body.reason}”${body.scar ? `, ${body.scar} scar` : ""}`;
  return body.note ? `${text}, note: “${body.note}”` : text;
}

// The lists of pending cards: the inbox, and the agent's page while it is open.
// A card for the same action may be in both; a decision settles both.
const cardLists = new Set();

const cardsOf = (agentId, actionId) =>
  [...cardLists].map((list) => list.rows.get(pendingKey(agentId, actionId))).filter(Boolean);

/** Ask the server what became of an action that left pending elsewhere, and say so on its cards. */
async function settleElsewhere(rows, agentId, actionId, said) {
  for (const row of rows) row.settled = true; // asked once
  let how;
  try {
    const action = await act(() => api.get(api.path`/v1/agents/${agentId}/actions/${actionId}`));
    how = decidedElsewhere(action);
  } catch (err) {
    how = unknownDecision(errorText(err));
  }
  for (const row of rows) row.settle(how, said);
}

/** Run an approve or reject; a 409 means someone or something decided first: the card says who. */
async function decideOn(entry, kind, url, body) {
  const { agent_id: agentId, action } = entry;
  let decision;
  try {
    decision = await change(() => api.post(url, body));
  } catch (err) {
    const rows = cardsOf(agentId, action.action_id);
    if (err instanceof api.ApiError && err.code === "invalid_state" && rows.length) {
      await settleElsewhere(rows, agentId, action.action_id, err.message);
      refresh();
      return;
    }
    throw err;
  }
  for (const row of cardsOf(agentId, action.action_id)) {
    row.settle(ownDecision(kind, decision, body));
  }
  flash(`${action.action_id} of ${agentId}: ${describeDecision(kind, decision, body)}`);
  refresh();
}

/** What a pending card can do, wherever it is shown. */
const decisions = {
  async approve(entry, note) {
    const body = { approver: requireOperator() };
    if (note.trim()) body.note = note;
    const passkey = await passkeyFor(entry.agent_id, entry.action.action_id, "approve");
    if (passkey !== undefined) body.passkey = passkey;
    const url = api.path`/v1/agents/${entry.agent_id}/actions/${entry.action.action_id}/approve`;
    await decideOn(entry, "approve", url, body);
  },
  async reject(entry, reason, scar) {
    const body = { approver: requireOperator(), reason };
    if (!reason.trim()) throw new Error("A reason is required to reject.");
    if (scar) body.scar = scar;
    const passkey = await passkeyFor(entry.agent_id, entry.action.action_id, "reject");
    if (passkey !== undefined) body.passkey = passkey;
    const url = api.path`/v1/agents/${entry.agent_id}/actions/${entry.action.action_id}/reject`;
    await decideOn(entry, "reject", url, body);
  },
  /** Grant first (a bad grant leaves the action pending), then approve this one. */
  async approveAndGrant(entry, note, grant) {
    const body = { tool: entry.action.tool, by: requireOperator(), ...grant };
    if (note.trim()) body.note = note;
    if (body.max_calls === undefined && body.max_cost === undefined) {
      throw new Error("A grant needs a bound: a number of calls, a cost, or both.");
    }
    const issued = await change(() => api.post(api.path`/v1/agents/${entry.agent_id}/grants`, body));
    flash(`${issued.grant_id} issued for ${issued.tool} of ${entry.agent_id}`);
    await decisions.approve(entry, note);
  },
};

/** The actions of the cards of `list`; `dismissed` runs after one is dismissed. */
const cardActions = (dismissed) => (list) => ({
  ...decisions,
  dismiss(entry) {
    list.dismiss(entry);
    dismissed();
  },
});

const inbox = new PendingCards($("pending-list"), cardActions(() => applyFilter()));
cardLists.add(inbox);

// ---- pending: filters and notifications ----------------------------------

const filterAgent = $("filter-agent");
const filterTool = $("filter-tool");

/** Offer the values of `values` (sorted), keeping the one chosen even when nothing has it now. */
function syncOptions(select, values, allLabel) {
  const chosen = select.value;
  const wanted = [...new Set([...values, ...(chosen ? [chosen] : [])])].sort();
  const have = [...select.options].slice(1).map((o) => o.value);
  if (have.join("\n") === wanted.join("\n")) return; // unchanged: leave an open list alone
  const options = wanted.map((v) => {
    const o = document.createElement("option");
    o.value = v;
    o.textContent = v;
    return o;
  });
  const all = document.createElement("option");
  all.value = "";
  all.textContent = allLabel;
  select.replaceChildren(all, ...options);
  select.value = chosen;
}

/** Show the cards that match the filters; oldest first is their order either way. */
function applyFilter() {
  const agent = filterAgent.value;
  const tool = filterTool.value;
  let waiting = 0;
  let shown = 0;
  for (const row of inbox.rows.values()) {
    const match = (!agent || row.el.dataset.agentId === agent) && (!tool || row.el.dataset.tool === tool);
    show(row.el, match);
    if (!row.settled) {
      waiting += 1;
      if (match) shown += 1;
    }
  }
  const filtered = Boolean(agent || tool);
  setText($("filter-count"), filtered ? `${shown} of ${waiting} waiting shown` : "");
  setText(
    $("pending-empty"),
    filtered && waiting ? "Nothing waiting matches these filters." : "Nothing is waiting for a decision.",
  );
  show($("pending-empty"), shown === 0);
}

filterAgent.addEventListener("change", applyFilter);
filterTool.addEventListener("change", applyFilter);
$("filter-clear").addEventListener("click", () => {
  filterAgent.value = "";
  filterTool.value = "";
  applyFilter();
});

const NOTIFY_TEXT = {
  on: "Desktop notifications are on: one for each new pending action.",
  off: "",
  denied: "Notifications are blocked for this page in the browser's settings.",
  unsupported: "This browser cannot show desktop notifications.",
};

function showNotifyState() {
  const state = notifyState();
  const button = $("notify-button");
  setText(button, state === "on" ? "Stop notifications" : "Notify me");
  show(button, state === "on" || state === "off");
  setText($("notify-state"), NOTIFY_TEXT[state]);
}

$("notify-button").addEventListener("click", async () => {
  if (notifyState() === "on") disableNotifications();
  else await enableNotifications(); // the browser asks the operator here, and only here
  showNotifyState();
});
showNotifyState();

function announce(entries) {
  const keys = new Set(entries.map((e) => pendingKey(e.agent_id, e.action.action_id)));
  const fresh = knownPending ? entries.filter((e) => !knownPending.has(pendingKey(e.agent_id, e.action.action_id))) : [];
  knownPending = keys;
  for (const e of fresh) {
    notify(
      `Approval needed: ${e.action.tool}`,
      `${e.agent_id} asks for ${e.action.tool} (${e.action.action_id}, cost ${e.action.cost})`,
      pendingKey(e.agent_id, e.action.action_id),
    );
  }
}

// ---- refresh -------------------------------------------------------------

async function pendingOf(agentId) {
  const { pending } = await api.get(api.path`/v1/agents/${agentId}/actions/pending`);
  return pending.map((entry) => ({ ...entry, agent_id: agentId }));
}

function renderAgents(agents) {
  syncKeyed($("agents-list"), agentRows, agents, (a) => a.agent_id, (a) => agentRow(a.agent_id, agentActions));
  show($("agents-empty"), agents.length === 0);
  renderUnloaded(agents.filter((a) => a.state === "unloaded").map((a) => a.agent_id));
}

// ---- pending: agents not loaded on this node -------------------------------
// guardd lists them without reading their logs (a node of a shared store, or
// one loading on first use), so what they hold is not known here until one is
// loaded: the inbox says so rather than look complete, and loads them on request.

const LOAD_AT_ONCE = 4; // the node verifies each log it loads: a few at a time
let unloadedIds = [];
let loadingUnloaded = false;

function renderUnloaded(ids) {
  unloadedIds = ids;
  const n = ids.length;
  setText(
    $("pending-unloaded-text"),
    `${n} ${n === 1 ? "agent is" : "agents are"} not loaded on this node yet: ` +
      `actions ${n === 1 ? "it holds" : "they hold"} for approval are not listed until loaded.`,
  );
  show($("pending-unloaded"), n > 0);
}

async function loadUnloaded() {
  if (loadingUnloaded) return;
  loadingUnloaded = true;
  const button = $("pending-load-button");
  button.disabled = true;
  const queue = [...unloadedIds];
  try {
    // Asking for an agent's pending actions loads it; the next refresh lists them.
    const worker = async () => {
      while (queue.length) await pendingOf(queue.shift()).catch(() => null);
    };
    await Promise.all(Array.from({ length: LOAD_AT_ONCE }, worker));
  } finally {
    loadingUnloaded = false;
    button.disabled = false;
    refresh();
  }
}

$("pending-load-button").addEventListener("click", loadUnloaded);

/** Cards whose action left pending without a decision made here: say what happened, once per action. */
function settleGone(rows) {
  const byAction = new Map();
  for (const row of rows) {
    const key = pendingKey(row.el.dataset.agentId, row.el.dataset.actionId);
    byAction.set(key, [...(byAction.get(key) ?? []), row]);
  }
  for (const same of byAction.values()) {
    settleElsewhere(same, same[0].el.dataset.agentId, same[0].el.dataset.actionId);
  }
}

/** The agent's page shows that agent's pending cards, as the inbox does. */
function detailPending(view) {
  return view.setPending(lastPending.filter((e) => e.agent_id === view.agentId));
}

function renderPending(entries) {
  entries.sort(
    (a, b) =>
      a.requested_at.localeCompare(b.requested_at) ||
      a.agent_id.localeCompare(b.agent_id) ||
      a.seq - b.seq,
  );
  for (const e of entries) e.agent = agentsById.get(e.agent_id);
  lastPending = entries;
  settleGone([...inbox.sync(entries), ...(detail ? detailPending(detail) : [])]);
  syncOptions(filterAgent, entries.map((e) => e.agent_id), "all agents");
  syncOptions(filterTool, entries.map((e) => e.action.tool), "all tools");
  applyFilter();
  setText($("pending-count"), entries.length);
  $("pending-count").classList.toggle("zero", entries.length === 0);
  document.title = entries.length ? `(${entries.length}) ${TITLE}` : TITLE;
  announce(entries);
}

/** The agent's shadow policy and its counts, or null when none is set (404). */
async function shadowOf(agentId) {
  try {
    return await api.get(api.path`/v1/agents/${agentId}/shadow`);
  } catch (err) {
    if (err.code === "not_found") return null;
    throw err;
  }
}

async function refreshDetail(view) {
  try {
    const status = await api.get(api.path`/v1/agents/${view.agentId}`);
    if (view.needsPolicy) {
      const policy = await api.get(api.path`/v1/agents/${view.agentId}/policy`);
      if (detail !== view) return;
      view.setPolicy(policy);
    }
    const { grants } = await api.get(api.path`/v1/agents/${view.agentId}/grants`);
    if (detail !== view) return;
    view.setGrants(grants);
    const shadow = await shadowOf(view.agentId);
    if (detail !== view) return;
    view.setShadow(shadow);
    const after = view.logAfter(status.head);
    const log = await api.get(`${api.path`/v1/agents/${view.agentId}/log`}?after=${after}&limit=${view.logLimit()}`);
    if (detail !== view) return;
    view.update(status);
    view.addRecords(log.records);
    view.setError("");
  } catch (err) {
    if (err instanceof api.Unauthorized || err instanceof api.Unreachable) throw err;
    if (detail !== view) return;
    if (err.code === "quarantined") view.quarantined(err.message, agentsById.get(view.agentId)?.error);
    else view.setError(errorText(err));
  }
}

async function refresh() {
  if (refreshing || !api.getToken()) return;
  if (document.body.dataset.roles === undefined) showWho(); // GET /v1/me did not answer yet
  refreshing = true;
  const changesBefore = changes;
  let stale = false;
  try {
    const { agents } = await api.get("/v1/agents");
    // Only agents that have something waiting are asked for their pending list.
    const waiting = agents.filter((a) => a.state === "active" && a.status.actions_pending > 0);
    const results = await Promise.allSettled(waiting.map((a) => pendingOf(a.agent_id)));
    const failed = results.find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
    stale = changes !== changesBefore;
    if (stale) return; // an approval or termination happened meanwhile: ask again
    agentsById = new Map(agents.map((a) => [a.agent_id, a]));
    renderAgents(agents);
    renderPending(results.flatMap((r) => r.value));
    if (detail) await refreshDetail(detail);
    lastUpdate = new Date();
    setTime($("updated-at"), lastUpdate.toISOString());
    show($("offline-banner"), false);
    show($("api-error"), false);
  } catch (err) {
    handleError(err);
  } finally {
    refreshing = false;
    if (stale) refresh();
  }
}

// ---- routing -------------------------------------------------------------

function agentInHash() {
  const match = location.hash.match(/^#\/agents\/(.+)$/);
  try {
    return match ? decodeURIComponent(match[1]) : null;
  } catch {
    return null; // a malformed escape: show the list
  }
}

function route() {
  const agentId = agentInHash();
  const views = { "#/pending": "pending", "#/passkeys": "passkeys" };
  const view = agentId !== null ? "detail" : (views[location.hash] ?? "agents");
  for (const section of document.querySelectorAll("section.view")) {
    show(section, section.dataset.view === view);
  }
  for (const link of document.querySelectorAll("nav.tabs a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (view === "passkeys") {
    const passkeys = passkeysView();
    $("passkeys-slot").replaceChildren(passkeys.el);
    passkeys.load();
  }
  if (view === "detail") {
    if (detail?.agentId !== agentId) {
      if (detail) cardLists.delete(detail.pending);
      const cards = new PendingCards(
        h("div", { class: "pending", testid: "detail-pending-list" }),
        cardActions(() => detail?.pendingChanged()),
      );
      detail = agentDetail(agentId, LOG_TAIL, grantsView(agentId, agentActions), cards);
      cardLists.add(cards);
      setText($("detail-id"), agentId);
      $("detail-body").replaceChildren(detail.el);
      if (agentsById.get(agentId)?.state === "unloaded") detail.notLoaded();
      detailPending(detail);
      refreshDetail(detail).catch(handleError);
    }
  } else {
    if (detail) cardLists.delete(detail.pending);
    detail = null;
    $("detail-body").replaceChildren();
  }
}

window.addEventListener("hashchange", () => {
  if (api.getToken()) route();
});

async function boot() {
  if (await sso.available()) {
    show($("sso"), true);
    try {
      if (await sso.finish()) {
        start();
        return;
      }
    } catch (err) {
      sso.forget();
      showLogin(`Single sign-on failed: ${err.message}`);
      return;
    }
    if (sso.resumable() && !api.getToken()) {
      sso.signIn().catch((err) => {
        sso.forget();
        showLogin(`Single sign-on failed: ${err.message}`);
      });
      return;
    }
  }
  if (api.getToken()) start();
  else showLogin();
}

boot();
