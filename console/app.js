// The console: sign-in, routing (#/agents, #/pending, #/agents/<id>), the 2 s
// refresh, the pending inbox (filters, decided cards, tab title, notifications).

import * as api from "./api.js";
import { agentDetail } from "./detail.js";
import { grantsView } from "./grants.js";
import { disableNotifications, enableNotifications, notify, notifyState } from "./notify.js";
import { decidedElsewhere, ownDecision, pendingItem, unknownDecision } from "./pending.js";
import { paintTimes, setTime, timeText } from "./times.js";
import { agentRow, errorText, setText, show, syncKeyed } from "./views.js";

const REFRESH_MS = 2000;
const TICK_MS = 1000; // ages and countdowns move between refreshes
const LOG_TAIL = 50;
const OPERATOR_KEY = "guard.operator"; // the operator's name; never the token
const TITLE = document.title;

const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);

const agentRows = new Map();
const pendingRows = new Map();
let detail = null;
let timer = null;
let refreshing = false;
let changes = 0; // bumped around every approve, reject, terminate: marks overlapping refreshes stale
let lastUpdate = null;
let agentsById = new Map(); // the last GET /v1/agents, for the pending cards and the agent's page
let knownPending = null; // keys of the pending actions seen so far; null before the first list

const operatorInput = $("operator-name");

function operatorName() {
  return operatorInput.value.trim();
}

/** The approver's name, or an error that points at the field to fill in. */
function requireOperator() {
  const name = operatorName();
  if (!name) {
    operatorInput.focus();
    throw new Error("Enter your operator name at the top of the page first.");
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
  for (const id of ["nav", "operator", "agents-view", "pending-view", "detail-view", "offline-banner", "api-error"]) {
    show($(id), false);
  }
  show($("login"), true);
  setText($("login-error"), message ?? "");
  show($("login-error"), Boolean(message));
  const input = $("token-input");
  input.value = "";
  input.focus();
}

function start() {
  show($("login"), false);
  show($("nav"), true);
  show($("operator"), true);
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
  api.clearToken();
  showLogin("Token forgotten. Enter it again to continue.");
});

operatorInput.value = localStorage.getItem(OPERATOR_KEY) ?? "";
operatorInput.addEventListener("input", () => localStorage.setItem(OPERATOR_KEY, operatorName()));

// ---- errors --------------------------------------------------------------

/** Errors of the refresh loop and of operator actions end here. */
function handleError(err) {
  if (err instanceof api.Unauthorized) {
    showLogin(`The server refused the admin token (${errorText(err)}). Enter it again.`);
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

function describeDecision(d) {
  if (d?.decision === "allowed") return `allowed (cost ${d.cost}, ${d.remaining} left)`;
  if (d?.decision === "denied") return `denied (${d.reason?.code ?? "no reason"})`;
  return d?.decision ?? "done";
}

const pendingKey = (agentId, actionId) => `${agentId}/${actionId}`;

/** Ask the server what became of an action that left pending elsewhere, and say so on its card. */
async function settleElsewhere(row, agentId, actionId, said) {
  row.settled = true; // asked once
  try {
    const action = await act(() => api.get(api.path`/v1/agents/${agentId}/actions/${actionId}`));
    row.settle(decidedElsewhere(action), said);
  } catch (err) {
    row.settle(unknownDecision(errorText(err)), said);
  }
}

/** Run an approve or reject; a 409 means someone or something decided first: the card says who. */
async function decideOn(entry, kind, url, body) {
  const { agent_id: agentId, action } = entry;
  const row = pendingRows.get(pendingKey(agentId, action.action_id));
  let decision;
  try {
    decision = await change(() => api.post(url, body));
  } catch (err) {
    if (err instanceof api.ApiError && err.code === "invalid_state" && row) {
      await settleElsewhere(row, agentId, action.action_id, err.message);
      refresh();
      return;
    }
    throw err;
  }
  row?.settle(ownDecision(kind, decision, body.approver));
  flash(`${action.action_id} of ${agentId}: ${describeDecision(decision)}`);
  refresh();
}

const pendingActions = {
  async approve(entry, note) {
    const body = { approver: requireOperator() };
    if (note.trim()) body.note = note;
    const url = api.path`/v1/agents/${entry.agent_id}/actions/${entry.action.action_id}/approve`;
    await decideOn(entry, "approve", url, body);
  },
  async reject(entry, reason, scar) {
    const body = { approver: requireOperator(), reason };
    if (!reason.trim()) throw new Error("A reason is required to reject.");
    if (scar) body.scar = scar;
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
    await pendingActions.approve(entry, note);
  },
  dismiss(entry) {
    const key = pendingKey(entry.agent_id, entry.action.action_id);
    pendingRows.get(key)?.el.remove();
    pendingRows.delete(key);
    applyFilter();
  },
};

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
  for (const row of pendingRows.values()) {
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
}

function renderPending(entries) {
  entries.sort(
    (a, b) =>
      a.requested_at.localeCompare(b.requested_at) ||
      a.agent_id.localeCompare(b.agent_id) ||
      a.seq - b.seq,
  );
  for (const e of entries) e.agent = agentsById.get(e.agent_id);
  const gone = [];
  syncKeyed(
    $("pending-list"),
    pendingRows,
    entries,
    (e) => pendingKey(e.agent_id, e.action.action_id),
    (e) => pendingItem(e, pendingActions),
    (row) => {
      // Left pending without a decision made here: keep the card and say what happened.
      if (!row.settled) gone.push(row);
      return true;
    },
  );
  for (const row of gone) settleElsewhere(row, row.el.dataset.agentId, row.el.dataset.actionId);
  syncOptions(filterAgent, entries.map((e) => e.agent_id), "all agents");
  syncOptions(filterTool, entries.map((e) => e.action.tool), "all tools");
  applyFilter();
  setText($("pending-count"), entries.length);
  $("pending-count").classList.toggle("zero", entries.length === 0);
  document.title = entries.length ? `(${entries.length}) ${TITLE}` : TITLE;
  announce(entries);
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
  const view = agentId !== null ? "detail" : location.hash === "#/pending" ? "pending" : "agents";
  for (const section of document.querySelectorAll("section.view")) {
    show(section, section.dataset.view === view);
  }
  for (const link of document.querySelectorAll("nav.tabs a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (view === "detail") {
    if (detail?.agentId !== agentId) {
      detail = agentDetail(agentId, LOG_TAIL, grantsView(agentId, agentActions));
      setText($("detail-id"), agentId);
      $("detail-body").replaceChildren(detail.el);
      refreshDetail(detail).catch(handleError);
    }
  } else {
    detail = null;
    $("detail-body").replaceChildren();
  }
}

window.addEventListener("hashchange", () => {
  if (api.getToken()) route();
});

if (api.getToken()) start();
else showLogin();
