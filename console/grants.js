// Bounded grants: "approve this and grant…" on a pending card, and the list of
// an agent's grants (with what is left and a revoke button) on its page.
//
// A grant lets the agent's held calls of one tool through at once, up to a
// number of calls and/or an amount of budget, until it expires; the operator
// may tie it to values of this call's input (ticked keys must hold exactly
// those values). Every value from the API goes into the page as text (h()).

import { setTime, timeEl } from "./times.js";
import { errorLine, errorText, h, num, setText, show, syncKeyed } from "./views.js";

const MINUTE = 60;

/** The top-level keys of an input object and their values, for the "matching" ticks. */
function matchable(input) {
  if (input === null || typeof input !== "object" || Array.isArray(input)) return [];
  return Object.entries(input);
}

function numberField(testid, label, props = {}) {
  const input = h("input", { type: "number", testid, inputmode: "decimal", ...props });
  return { input, el: h("label", {}, label, input) };
}

/**
 * The "approve this and grant…" form of a pending card. On submit it calls
 * actions.approveAndGrant(entry, note, grant) with grant = {max_calls?,
 * max_cost?, ttl_secs, input_match?}, inside decide() (which disables the
 * card's buttons and shows an error).
 */
export function grantForm(entry, actions, decide) {
  const { action } = entry;
  const calls = numberField("grant-calls", "Calls", { min: 1, step: 1, value: 10 });
  const cost = numberField("grant-cost", "Cost up to", { min: 0, step: "any", placeholder: "no limit" });
  const minutes = numberField("grant-minutes", "For minutes", { min: 1, step: 1, value: 60, required: true });
  const note = h("input", { testid: "grant-note", maxlength: 1000, placeholder: "note (optional)" });
  const ticks = matchable(action.input).map(([key, value]) => {
    const box = h("input", { type: "checkbox", testid: "grant-match", "data-key": key });
    const shown = JSON.stringify(value);
    return {
      key,
      value,
      box,
      el: h(
        "label",
        { class: "match" },
        box,
        " ",
        h("code", {}, key),
        " = ",
        h("code", {}, shown.length > 60 ? `${shown.slice(0, 59)}…` : shown),
      ),
    };
  });
  const matching = ticks.length
    ? h("fieldset", { class: "grant-match" }, h("legend", {}, "Only calls whose input has"), ...ticks.map((t) => t.el))
    : h("p", { class: "meta" }, "Any input of this tool.");
  const form = h(
    "form",
    { class: "grant-fields" },
    h("p", { class: "meta" }, `Later calls of ${action.tool} are allowed at once, within these bounds:`),
    calls.el,
    cost.el,
    minutes.el,
    matching,
    h("label", {}, "Note", note),
    h("button", { type: "submit", class: "approve", testid: "grant-button" }, "Approve and grant"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    decide(async () => {
      const grant = { ttl_secs: Number(minutes.input.value) * MINUTE };
      if (calls.input.value !== "") grant.max_calls = Number(calls.input.value);
      if (cost.input.value !== "") grant.max_cost = Number(cost.input.value);
      const ticked = ticks.filter((t) => t.box.checked);
      if (ticked.length) grant.input_match = Object.fromEntries(ticked.map((t) => [t.key, t.value]));
      await actions.approveAndGrant(entry, note.value, grant);
    });
  });
  return h(
    "details",
    { class: "decide grant-form", testid: "grant-form" },
    h("summary", { testid: "grant-open" }, "Approve this and grant…"),
    form,
  );
}

function left(grant) {
  const parts = [];
  if (grant.max_calls !== null) parts.push(`${num(grant.calls_left)} of ${num(grant.max_calls)} calls`);
  if (grant.max_cost !== null) parts.push(`${num(grant.cost_left)} of ${num(grant.max_cost)} budget`);
  return parts.join(" · ");
}

function grantRow(agentId, actions) {
  const id = h("code", { testid: "grant-id" });
  const tool = h("code", { testid: "grant-tool" });
  const status = h("span", { class: "state", testid: "grant-status" });
  const leftText = h("span", { testid: "grant-left" });
  const match = h("span", { testid: "grant-input-match" });
  const by = h("span", { testid: "grant-by" });
  const expires = timeEl(null, "grant-expires");
  const error = errorLine("grant-error");
  const revoke = h("button", { type: "button", class: "danger", testid: "grant-revoke" }, "Revoke");
  const el = h(
    "li",
    { class: "grant", testid: "grant" },
    h("div", {}, id, " ", tool, " ", status),
    h("div", { class: "meta" }, "left: ", leftText, " · by ", by, " · expires ", expires, match),
    revoke,
    error.el,
  );
  let grantId = null;
  revoke.addEventListener("click", async () => {
    error.set("");
    revoke.disabled = true;
    try {
      await actions.revokeGrant(agentId, grantId);
    } catch (err) {
      error.set(errorText(err));
    } finally {
      revoke.disabled = false;
    }
  });
  return {
    el,
    update(g) {
      grantId = g.grant_id;
      el.dataset.grantId = g.grant_id;
      el.dataset.status = g.status;
      setText(id, g.grant_id);
      setText(tool, g.tool);
      setText(status, g.status);
      setText(leftText, left(g));
      setText(by, g.by);
      setTime(expires, g.expires_at);
      setText(match, g.input_match ? ` · input ${JSON.stringify(g.input_match)}` : "");
      show(revoke, g.status !== "revoked" && g.status !== "expired");
    },
  };
}

/** The grants of one agent's page; update(grants) takes GET .../grants' list. */
export function grantsView(agentId, actions) {
  const list = h("ol", { class: "grants", testid: "grants-list" });
  const none = h("p", { class: "empty", testid: "grants-empty" }, "No grants.");
  const rows = new Map();
  return {
    el: h("div", { class: "grants-view", testid: "detail-grants" }, none, list),
    update(grants) {
      syncKeyed(list, rows, grants, (g) => g.grant_id, () => grantRow(agentId, actions));
      show(none, grants.length === 0);
    },
  };
}
