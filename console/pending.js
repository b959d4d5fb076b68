// One card of the pending list: an action held for approval, what the operator
// needs to decide it (the agent's budget left, how long it has waited, when it
// expires), the decision forms; and, once it has left pending, here or
// elsewhere, who decided what and why. A decided card stays readable until the
// operator dismisses it.
//
// The decision row is a list of small forms (decisionForms): a new kind of
// decision is one more form there, nothing else changes.

import { grantForm } from "./grants.js";
import { reasonText, whoText } from "./history.js";
import { setTime, timeEl } from "./times.js";
import { errorLine, errorText, h, num, prettyJson, setText, show, syncKeyed } from "./views.js";

function fact(label, ...value) {
  return h("div", {}, h("dt", {}, label), h("dd", {}, ...value));
}

/** A fact that only means something while the action waits. */
function liveFact(label, ...value) {
  return h("div", { class: "while-pending" }, h("dt", {}, label), h("dd", {}, ...value));
}

function approveForm(entry, actions, decide) {
  const note = h("input", { testid: "approve-note", maxlength: 1000, placeholder: "note (optional)" });
  const form = h(
    "form",
    { class: "decide approve-form", testid: "approve-form" },
    h("label", {}, "Note", note),
    h("button", { type: "submit", class: "approve", testid: "approve-button" }, "Approve"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    decide(() => actions.approve(entry, note.value));
  });
  return form;
}

function rejectForm(entry, actions, decide) {
  const reason = h("input", {
    testid: "reject-reason",
    required: true,
    maxlength: 1000,
    placeholder: "reason (required)",
  });
  const scar = h(
    "select",
    { testid: "reject-scar" },
    h("option", { value: "" }, "no scar"),
    h("option", { value: "minor" }, "minor (1)"),
    h("option", { value: "moderate" }, "moderate (3)"),
    h("option", { value: "severe" }, "severe (10)"),
    h("option", { value: "fatal" }, "fatal (terminates)"),
  );
  const form = h(
    "form",
    { class: "decide reject-form", testid: "reject-form" },
    h("label", {}, "Reason", reason),
    h("label", {}, "Scar", scar),
    h("button", { type: "submit", class: "danger", testid: "reject-button" }, "Reject"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    decide(() => actions.reject(entry, reason.value, scar.value || undefined));
  });
  return form;
}

/** The forms of the decision row, in order. */
function decisionForms(entry, actions, decide) {
  return [
    approveForm(entry, actions, decide),
    rejectForm(entry, actions, decide),
    grantForm(entry, actions, decide),
  ];
}

/** What the agent's budget says about this action: left, and whether it is enough. */
function budgetText(cost, agent) {
  const s = agent?.status;
  if (!s) return { text: "unknown", warn: false };
  if (!s.alive) {
    return { text: `agent terminated (${s.termination_reason ?? ""}): approving it is denied`, warn: true };
  }
  const left = `${num(s.remaining)} left of ${num(s.budget)}`;
  if (typeof cost === "number" && typeof s.remaining === "number" && cost > s.remaining) {
    return { text: `${left}: not enough for this action`, warn: true };
  }
  return { text: left, warn: false };
}

/**
 * A pending entry plus its agent_id. `actions` has approve(entry, note),
 * reject(entry, reason, scar), approveAndGrant(entry, note, grant) and dismiss(entry). update(entry) takes the
 * entry again, with `agent`: its agent's row of GET /v1/agents; settle(how, said)
 * turns it into a decided card (see ownDecision and decidedElsewhere).
 */
export function pendingItem(entry, actions) {
  const { agent_id: agentId, action } = entry;
  const error = errorLine("pending-error");
  const decisions = h("div", { class: "decisions", testid: "pending-decisions" });

  async function decide(run) {
    error.set("");
    const buttons = [...decisions.querySelectorAll("button")];
    for (const b of buttons) b.disabled = true;
    try {
      await run();
    } catch (err) {
      error.set(errorText(err));
    } finally {
      for (const b of buttons) b.disabled = false;
    }
  }
  decisions.append(...decisionForms(entry, actions, decide));

  const budget = h("span", { testid: "pending-budget" });
  const expiresAt = timeEl(entry.expires_at, "pending-expires-at");
  const noExpiry = h("span", { testid: "pending-no-expiry" }, "never (no approval timeout)");
  const approvals = h("span", { testid: "pending-approvals" });
  const approvalsFact = liveFact("Approvals", approvals);

  const settledText = h("p", { class: "settled-text", testid: "settled-text" });
  const settledSaid = h("p", { class: "settled-said", testid: "settled-said", hidden: true });
  const settledPanel = h(
    "div",
    { class: "settled", role: "status", testid: "pending-settled", hidden: true },
    settledText,
    settledSaid,
    h("button", { type: "button", testid: "dismiss-button", onclick: () => actions.dismiss(entry) }, "Dismiss"),
  );

  const el = h(
    "article",
    {
      class: "pending-item",
      testid: "pending-item",
      "data-agent-id": agentId,
      "data-action-id": action.action_id,
      "data-tool": action.tool,
    },
    h(
      "header",
      {},
      h("code", { class: "tool", testid: "pending-tool" }, action.tool),
      h("span", { class: "cost" }, "cost ", h("span", { testid: "pending-cost" }, num(action.cost))),
    ),
    h(
      "dl",
      { class: "facts" },
      fact("Agent", h("a", { href: `#/agents/${encodeURIComponent(agentId)}`, testid: "pending-agent" }, agentId)),
      fact("Action", h("span", { testid: "pending-action-id" }, action.action_id)),
      liveFact("Budget", budget),
      fact("Waiting since", timeEl(entry.requested_at, "pending-requested-at")),
      liveFact("Expires", expiresAt, noExpiry),
      approvalsFact,
    ),
    h("pre", { class: "input", testid: "pending-input" }, prettyJson(action.input)),
    decisions,
    error.el,
    settledPanel,
  );

  const row = {
    el,
    settled: false,
    update(e) {
      const b = budgetText(e.action.cost, e.agent);
      setText(budget, b.text);
      budget.classList.toggle("warn", b.warn);
      setText(el.querySelector('[data-testid="pending-cost"]'), num(e.action.cost));
      setTime(expiresAt, e.expires_at);
      show(expiresAt, Boolean(e.expires_at));
      show(noExpiry, !e.expires_at);
      setText(approvals, approvalsText(e));
      show(approvalsFact, e.approvals_required !== undefined);
    },
    /** It left pending: `how` is {outcome, nodes}; `said` is the server's own words, if any. */
    settle(how, said) {
      const hadFocus = el.contains(document.activeElement);
      row.settled = true;
      el.dataset.settled = how.outcome;
      show(decisions, false);
      error.set("");
      settledText.replaceChildren(...how.nodes);
      setText(settledSaid, said ? `The server said: ${said}` : "");
      show(settledSaid, Boolean(said));
      show(settledPanel, true);
      if (hadFocus) settledPanel.querySelector("button").focus();
    },
  };
  return row;
}

export const pendingKey = (agentId, actionId) => `${agentId}/${actionId}`;

/**
 * A list of pending cards, oldest first: the inbox's, or one agent's on its
 * page. makeActions(list) gives the actions of its cards (pendingItem).
 * sync(entries) builds new cards and updates the others in place; a card whose
 * action is no longer pending stays, and those not decided here are returned,
 * for the caller to say what became of them.
 */
export class PendingCards {
  constructor(container, makeActions) {
    this.el = container;
    this.rows = new Map();
    this.actions = makeActions(this);
  }

  sync(entries) {
    const gone = [];
    syncKeyed(
      this.el,
      this.rows,
      entries,
      (e) => pendingKey(e.agent_id, e.action.action_id),
      (e) => pendingItem(e, this.actions),
      (row) => {
        if (!row.settled) gone.push(row);
        return true;
      },
    );
    return gone;
  }

  dismiss(entry) {
    const key = pendingKey(entry.agent_id, entry.action.action_id);
    this.rows.get(key)?.el.remove();
    this.rows.delete(key);
  }
}

/** What the operator wrote with a decision: the note of an approval, the scar of a rejection. */
function written(kind, body) {
  if (kind === "reject") return body.scar ? ` · ${body.scar} scar` : "";
  return body.note ? ` · note: “${body.note}”` : "";
}

/**
 * A settled card for a decision made here, from the decision the server
 * answered and the body sent (approver, note or reason, scar).
 */
export function ownDecision(kind, decision, body) {
  const who = `${body.approver} (you)`;
  const at = timeEl(new Date().toISOString(), "settled-at");
  const reason = decision?.reason;
  const also = written(kind, body);
  if (kind === "reject") {
    return {
      outcome: "rejected",
      nodes: [h("strong", {}, "Rejected"), ` by ${who}: ${reason?.reason ?? body.reason}${also} · `, at],
    };
  }
  if (decision?.decision === "pending_approval") {
    return {
      outcome: "recorded",
      nodes: [
        h("strong", {}, "Approval recorded"),
        ` by ${who}: ${approvalsText(decision)}; it waits for more · `,
        at,
      ],
    };
  }
  if (decision?.decision === "allowed") {
    return {
      outcome: "allowed",
      nodes: [
        h("strong", {}, "Approved"),
        ` by ${who}: allowed, cost ${num(decision.cost)}, ${num(decision.remaining)} left${also} · `,
        at,
      ],
    };
  }
  return {
    outcome: "denied",
    nodes: [h("strong", {}, "Denied"), ` when approved by ${who}: ${reasonText(reason)}${also} · `, at],
  };
}

/** "1 of 2: ann (operator token tok-…)": the approvals a quorum has so far. */
export function approvalsText(e) {
  const given = e.approvals ?? [];
  const names = given.map((a) => whoText(a.by, a.by_id ?? undefined)).join(", ");
  return `${given.length} of ${e.approvals_required}${names ? `: ${names}` : ""}`;
}

/** A settled card for an action decided by someone or something else (GET .../actions/:id). */
export function decidedElsewhere(action) {
  const reason = action.reason ?? {};
  const at = () => timeEl(action.decided_at, "settled-at");
  const lead = (text) => h("strong", {}, text);
  if (action.status === "allowed" || action.status === "completed") {
    return {
      outcome: "allowed",
      nodes: [
        lead("Approved elsewhere"),
        ` by ${action.approved_by ?? "an operator"} at `,
        at(),
        action.note ? `: “${action.note}”` : "",
        ` · allowed, cost ${num(action.cost)}`,
      ],
    };
  }
  if (action.status === "cancelled") {
    return {
      outcome: "cancelled",
      nodes: [lead("Cancelled"), ` by ${reason.by ?? "its caller"} at `, at(), reason.reason ? `: ${reason.reason}` : ""],
    };
  }
  if (reason.code === "rejected") {
    return {
      outcome: "rejected",
      nodes: [lead("Rejected elsewhere"), ` by ${reason.by} at `, at(), `: ${reason.reason}`],
    };
  }
  if (reason.code === "approval_expired") {
    return {
      outcome: "expired",
      nodes: [
        lead("Expired"),
        " at ",
        at(),
        `: nobody decided within ${num(reason.timeout_secs)} s, so it was denied (approval_expired)`,
      ],
    };
  }
  return {
    outcome: "denied",
    nodes: [
      lead("Denied"),
      ` (${reasonText(reason)}) at `,
      at(),
      action.approved_by ? ` when ${action.approved_by} approved it` : "",
    ],
  };
}

/** A settled card for an action no longer pending whose decision could not be read. */
export function unknownDecision(message) {
  return {
    outcome: "unknown",
    nodes: [h("strong", {}, "No longer pending"), ` (its decision could not be read: ${message})`],
  };
}
