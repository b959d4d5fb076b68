// The console: sign-in, routing (#/agents, #/pending, #/agents/<id>) and the 2 s refresh.

import * as api from "./api.js";
import { agentDetail, agentRow, errorText, pendingItem, setText, show, syncKeyed } from "./views.js";

const REFRESH_MS = 2000;
const LOG_TAIL = 50;
const OPERATOR_KEY = "guard.operator"; // the operator's name; never the token

const $ = (testid) => document.querySelector(`[data-testid="${testid}"]`);

const agentRows = new Map();
const pendingRows = new Map();
let detail = null;
let timer = null;
let refreshing = false;
let changes = 0; // bumped around every approve, reject, terminate: marks overlapping refreshes stale
let lastUpdate = null;
let flashTimer = null;

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

function flash(message) {
  const el = $("flash");
  setText(el, message);
  show(el, true);
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => show(el, false), 8000);
}

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
    const since = lastUpdate ? ` Showing data from ${lastUpdate.toLocaleTimeString()}.` : "";
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

function decided(entry, decision) {
  const { agent_id: agentId, action } = entry;
  pendingRows.get(`${agentId}/${action.action_id}`)?.el.remove();
  pendingRows.delete(`${agentId}/${action.action_id}`);
  flash(`${action.action_id} of ${agentId}: ${describeDecision(decision)}`);
  refresh();
}

const pendingActions = {
  async approve(entry, note) {
    const body = { approver: requireOperator() };
    if (note.trim()) body.note = note;
    const url = api.path`/v1/agents/${entry.agent_id}/actions/${entry.action.action_id}/approve`;
    decided(entry, await change(() => api.post(url, body)));
  },
  async reject(entry, reason, scar) {
    const body = { approver: requireOperator(), reason };
    if (!reason.trim()) throw new Error("A reason is required to reject.");
    if (scar) body.scar = scar;
    const url = api.path`/v1/agents/${entry.agent_id}/actions/${entry.action.action_id}/reject`;
    decided(entry, await change(() => api.post(url, body)));
  },
};

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
  syncKeyed(
    $("pending-list"),
    pendingRows,
    entries,
    (e) => `${e.agent_id}/${e.action.action_id}`,
    (e) => pendingItem(e, pendingActions),
  );
  setText($("pending-count"), entries.length);
  $("pending-count").classList.toggle("zero", entries.length === 0);
  show($("pending-empty"), entries.length === 0);
}

async function refreshDetail(view) {
  try {
    const status = await api.get(api.path`/v1/agents/${view.agentId}`);
    const after = view.logAfter(status.head);
    const log = await api.get(`${api.path`/v1/agents/${view.agentId}/log`}?after=${after}&limit=${LOG_TAIL}`);
    if (detail !== view) return;
    view.update(status);
    view.addRecords(log.records);
    view.setError("");
  } catch (err) {
    if (err instanceof api.Unauthorized || err instanceof api.Unreachable) throw err;
    view.setError(errorText(err));
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
    renderAgents(agents);
    renderPending(results.flatMap((r) => r.value));
    if (detail) await refreshDetail(detail);
    lastUpdate = new Date();
    setText($("updated"), `updated ${lastUpdate.toLocaleTimeString()}`);
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
      detail = agentDetail(agentId, LOG_TAIL);
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
