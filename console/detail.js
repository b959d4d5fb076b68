// An agent's page: its status, the actions waiting for the operator (the
// inbox's cards, to approve or reject here), its policy (GET .../policy), its
// decision history folded from its log, its scars and its last log records;
// or, for a quarantined agent, what is wrong and what to do about it.

import { History, reasonText, whoText } from "./history.js";
import { timeEl } from "./times.js";
import { errorLine, h, num, prettyJson, setText, shortHash, show } from "./views.js";

/** Records read when the page opens: the history covers the actions they hold. */
export const HISTORY_RECORDS = 2000;
const LOG_PAGE = 5000; // the most guardd answers at once

function fact(label, testid, ...value) {
  return h("div", {}, h("dt", {}, label), h("dd", { testid }, ...value));
}

const secs = (n) => `${num(n)} s`;

function ruleText(rule) {
  if (!rule) return "refused (not in the policy)";
  const parts = [`cost ${num(rule.cost)}`, rule.requires_approval ? "needs approval" : "no approval"];
  if (rule.max_calls !== null && rule.max_calls !== undefined) parts.push(`at most ${num(rule.max_calls)} calls`);
  // A timeout means something only for a tool whose calls wait for approval.
  if (rule.requires_approval && rule.approval_timeout_secs !== undefined) {
    parts.push(`approval timeout ${secs(rule.approval_timeout_secs)}`);
  }
  return parts.join(" · ");
}

/** A tool's approval timeout: its own, else the policy's; none for a tool that needs no approval. */
function toolTimeout(p, rule) {
  if (!rule.requires_approval) return "–";
  if (rule.approval_timeout_secs !== undefined) return secs(rule.approval_timeout_secs);
  if (p.approval_timeout_secs !== undefined) return `${secs(p.approval_timeout_secs)} (the policy's)`;
  return "none";
}

function policyView(p) {
  const rate = p.rate_limit
    ? `${num(p.rate_limit.max_actions)} actions per ${secs(p.rate_limit.window_secs)}`
    : "none";
  const timeout =
    p.approval_timeout_secs !== undefined
      ? secs(p.approval_timeout_secs)
      : "none: held actions wait until decided";
  const tools = Object.entries(p.tools ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return [
    h(
      "dl",
      { class: "status" },
      fact("Budget", "policy-budget", num(p.budget)),
      fact("Scar limit", "policy-scar-limit", num(p.scar_limit)),
      fact("Rate limit", "policy-rate-limit", rate),
      fact("Approval timeout", "policy-approval-timeout", timeout),
      fact("Any other tool", "policy-default", ruleText(p.default)),
    ),
    tools.length
      ? h(
          "table",
          { class: "policy", testid: "policy-tools" },
          h("thead", {}, h("tr", {}, ...["Tool", "Cost", "Approval", "Max calls", "Approval timeout"].map((t) => h("th", {}, t)))),
          h(
            "tbody",
            {},
            ...tools.map(([name, rule]) =>
              h(
                "tr",
                { testid: "policy-tool", "data-tool": name },
                h("td", { "data-label": "Tool" }, h("code", { testid: "policy-tool-name" }, name)),
                h("td", { "data-label": "Cost", testid: "policy-tool-cost" }, num(rule.cost)),
                h(
                  "td",
                  { "data-label": "Approval", testid: "policy-tool-approval" },
                  rule.requires_approval ? "needs approval" : "no",
                ),
                h("td", { "data-label": "Max calls", testid: "policy-tool-max-calls" }, rule.max_calls ?? "no limit"),
                h("td", { "data-label": "Approval timeout", testid: "policy-tool-timeout" }, toolTimeout(p, rule)),
              ),
            ),
          ),
        )
      : h("p", { class: "empty" }, "No tools listed."),
  ];
}

/** How an action's decision reads, and who took it. */
function decisionLine(a) {
  switch (a.decision) {
    case "requested":
      return "requested (no decision in the records read)";
    case "pending":
      return "waiting for approval";
    case "allowed":
      return `allowed · cost ${num(a.cost)} · ${num(a.remaining)} left`;
    case "rejected":
      return `rejected: ${a.reason.reason}`;
    case "cancelled":
      return a.reason.reason !== undefined ? `cancelled: ${a.reason.reason}` : "cancelled (no reason given)";
    default:
      if (a.reason?.code === "approval_expired") {
        return `denied · approval_expired: nobody decided within ${secs(a.reason.timeout_secs)}`;
      }
      return `denied · ${reasonText(a.reason)}`;
  }
}

/** Who decided, when someone did: the approver, or who cancelled it. */
function whoFact(a) {
  if (!a.held) return a.decision === "allowed" ? fact("Approval", "history-by", "not needed") : null;
  if (a.decision === "cancelled") return fact("Cancelled by", "history-by", whoText(a.by, a.by_id));
  if (a.by) return fact("Approver", "history-by", whoText(a.by, a.by_id));
  if (a.reason?.code === "approval_expired") return fact("Approver", "history-by", "nobody, in time");
  return null;
}

/** One action of the history, rebuilt whole when a record about it arrives (it holds no form). */
function historyItem() {
  const el = h("article", { class: "history-item", testid: "history-item" });
  return {
    el,
    update(a) {
      el.dataset.actionId = a.action_id;
      el.dataset.decision = a.decision === "denied" && a.reason?.code === "approval_expired" ? "expired" : a.decision;
      const facts = [
        fact("Requested", "history-requested-at", timeEl(a.requested_at)),
        a.decided_at ? fact("Decided", "history-decided-at", timeEl(a.decided_at)) : null,
        whoFact(a),
        a.note !== undefined ? fact("Note", "history-note", a.note) : null,
        a.outcome
          ? fact(
              "Outcome",
              "history-outcome",
              `${a.outcome.outcome} (reported by ${a.outcome.by})${a.outcome.detail ? `: ${a.outcome.detail}` : ""} · `,
              timeEl(a.outcome.ts),
            )
          : null,
      ];
      const parts = [
        h(
          "header",
          {},
          h("span", { class: "action-id", testid: "history-action-id" }, a.action_id),
          h("code", { class: "tool", testid: "history-tool" }, a.tool),
          h("span", { class: "cost" }, "cost ", h("span", { testid: "history-cost" }, num(a.cost))),
          h("span", { class: "decision", testid: "history-decision", "data-decision": el.dataset.decision }, el.dataset.decision),
        ),
        h("p", { class: "decision-line", testid: "history-reason" }, decisionLine(a)),
        h("dl", { class: "facts" }, ...facts),
        a.scars.length
          ? h(
              "ul",
              { class: "history-scars" },
              ...a.scars.map((s) =>
                h(
                  "li",
                  { testid: "history-scar", "data-severity": s.severity },
                  h("span", { class: `severity ${s.severity}` }, s.severity),
                  ` scar: ${s.reason} (by ${s.by})`,
                ),
              ),
            )
          : null,
        h("pre", { class: "input", testid: "history-input" }, prettyJson(a.input)),
      ];
      el.replaceChildren(...parts.filter(Boolean));
    },
  };
}

function quarantineHelp(agentId, message, listError) {
  return [
    h("strong", {}, "This agent is quarantined."),
    h(
      "p",
      { testid: "quarantine-reason" },
      // Not "at startup": on a shared store a log is verified when it is first used.
      `Its log failed verification: ${listError ?? message}. ` +
        "guardd decides nothing for it, and answers every request about it with 503 quarantined, " +
        "until its log is whole again.",
    ),
    h("p", {}, "What to do:"),
    h(
      "ol",
      { testid: "quarantine-steps" },
      h(
        "li",
        {},
        "Restore ",
        h("code", {}, `agents/${agentId}.jsonl`),
        " in guardd's data directory from a backup (or repair it). ",
        "The line named above is the first one that does not verify.",
      ),
      h("li", {}, "Restart guardd: it verifies every log again when it starts."),
    ),
    h("p", { class: "meta" }, "The operations guide (docs/operations.md, “A tampered log”) has the details."),
  ];
}

/**
 * The shadow policy of an agent (a candidate decided beside the policy in
 * force, never enforced) and how often the two agreed; null: none is set.
 */
function shadowView(shadow) {
  if (shadow === null) {
    return [h("p", { class: "empty", testid: "shadow-none" }, "No shadow policy is being tried.")];
  }
  const from =
    shadow.policy_ref === null ? "a policy of its own" : `${shadow.policy_ref} version ${num(shadow.version)}`;
  const disagree = Object.entries(shadow.disagree).sort(([a], [b]) => (a < b ? -1 : 1));
  const total = disagree.reduce((sum, [, n]) => sum + n, 0);
  return [
    h(
      "dl",
      { class: "status" },
      fact("Candidate", "shadow-from", from),
      fact("Since", "shadow-since", timeEl(shadow.since)),
      fact("Agreed", "shadow-agree", `${num(shadow.agree)} of ${num(shadow.agree + total)} requests`),
    ),
    disagree.length
      ? h(
          "ul",
          { class: "shadow-disagree", testid: "shadow-disagree-list" },
          ...disagree.map(([key, n]) => {
            const [live, theirs] = key.split("->");
            return h("li", { testid: "shadow-disagree", "data-key": key }, `${live} here, ${theirs} in shadow: ${num(n)}`);
          }),
        )
      : h("p", { class: "empty", testid: "shadow-no-disagreement" }, "No disagreement yet."),
    shadow.recent_disagreements.length
      ? h(
          "p",
          { class: "meta", testid: "shadow-recent" },
          "Last disagreements: ",
          shadow.recent_disagreements.join(", "),
        )
      : h("span"),
    h("details", {}, h("summary", {}, "The candidate policy"), ...policyView(shadow.policy)),
  ];
}

/**
 * The detail view of one agent. `grants` is its grantsView; `pending` a
 * PendingCards list (pending.js) for its waiting actions, which app.js keeps
 * in line with the inbox through setPending(entries).
 */
export function agentDetail(agentId, logTail, grants, pending) {
  const status = h("dl", { class: "status", testid: "detail-status" });
  const quarantine = h("div", { class: "quarantine", role: "alert", testid: "detail-quarantined", hidden: true });
  const policy = h("div", { class: "policy-view", testid: "detail-policy" }, h("p", { class: "empty" }, "Loading…"));
  const shadowBox = h("div", { class: "shadow-view", testid: "detail-shadow" }, h("p", { class: "empty" }, "Loading…"));
  const history = h("div", { class: "history", testid: "history-list" });
  const noHistory = h("p", { class: "empty", testid: "history-empty" }, "No actions yet.");
  const historyNote = h("p", { class: "meta", testid: "history-note", hidden: true });
  const scars = h("ol", { class: "scars", testid: "detail-scars" });
  const noScars = h("p", { class: "empty", testid: "detail-no-scars" }, "No scars.");
  const logBody = h("tbody", { testid: "log-records" });
  const error = errorLine("detail-error");
  const loading = h("p", { class: "empty", role: "status", testid: "detail-loading" }, "Loading…");
  const waiting = h(
    "div",
    { class: "detail-pending", testid: "detail-pending", hidden: true },
    h("h3", {}, "Waiting for your decision"),
    pending.el,
  );
  const content = h(
    "div",
    { hidden: true }, // until the status has loaded
    status,
    waiting,
    h("h3", {}, "Policy"),
    policy,
    h("h3", {}, "Grants"),
    grants.el,
    h("h3", {}, "Shadow policy"),
    shadowBox,
    h("h3", {}, "Decisions, newest first"),
    historyNote,
    noHistory,
    history,
    h("h3", {}, "Scars"),
    noScars,
    scars,
    h("h3", {}, `Last ${logTail} log records, newest first`),
    h(
      "table",
      { class: "log", testid: "log-table" },
      h("thead", {}, h("tr", {}, h("th", {}, "Seq"), h("th", {}, "Kind"), h("th", {}, "Time"), h("th", {}, "Hash"))),
      logBody,
    ),
  );
  const el = h("div", { class: "detail", "data-agent-id": agentId }, error.el, loading, quarantine, content);
  const folded = new History();
  const items = new Map(); // action_id -> history item
  let lastSeq = null;

  const view = {
    el,
    agentId,
    pending,
    needsPolicy: true,
    /** This agent's pending entries; returns the cards that left pending elsewhere. */
    setPending(entries) {
      const gone = pending.sync(entries);
      view.pendingChanged();
      return gone;
    },
    pendingChanged() {
      show(waiting, pending.rows.size > 0);
    },
    /** seq after which to ask for records: the newest shown, or the history window before head. */
    logAfter(head) {
      if (lastSeq === null && head.seq >= HISTORY_RECORDS) {
        setText(
          historyNote,
          `Actions requested in the last ${HISTORY_RECORDS} records; older ones are in the full log.`,
        );
        show(historyNote, true);
      }
      return lastSeq ?? Math.max(-1, head.seq - HISTORY_RECORDS);
    },
    logLimit: () => (lastSeq === null ? HISTORY_RECORDS : LOG_PAGE),
    setError(message) {
      error.set(message);
      if (message) show(loading, false);
    },
    /**
     * The list says this node has not loaded the agent yet: the page's first
     * request loads it (its log read and verified), which a long log makes slow.
     */
    notLoaded() {
      setText(loading, "Not loaded on this node yet: loading it now (its log is read and verified)…");
    },
    setPolicy(p) {
      view.needsPolicy = false;
      policy.replaceChildren(...policyView(p));
    },
    setGrants(list) {
      grants.update(list);
    },
    /** The shadow policy's view (GET .../shadow), or null when none is set. */
    setShadow(shadow) {
      shadowBox.replaceChildren(...shadowView(shadow));
    },
    quarantined(message, listError) {
      quarantine.replaceChildren(...quarantineHelp(agentId, message, listError));
      show(quarantine, true);
      show(loading, false);
      show(content, false);
      error.set("");
    },
    update(s) {
      show(quarantine, false);
      show(loading, false);
      const state = s.alive ? "alive" : `terminated: ${s.termination_reason ?? ""}`;
      status.replaceChildren(
        fact("State", "detail-state", state),
        fact("Budget", "detail-budget", `${num(s.spent)} spent · ${num(s.remaining)} left of ${num(s.budget)}`),
        fact("Scar score", "detail-scar-score", `${num(s.scar_score)} / ${num(s.scar_limit)}`),
        fact("Actions", "detail-counts",
          `${num(s.actions_allowed)} allowed · ${num(s.actions_denied)} denied · ${num(s.actions_pending)} pending`),
        fact("Head", "detail-head", `seq ${num(s.head?.seq)} · `,
          h("code", { title: s.head?.hash ?? "" }, shortHash(s.head?.hash))),
        fact("Public key", "detail-public-key", h("code", { class: "wrap" }, s.public_key ?? "")),
      );
      scars.replaceChildren(
        ...(s.scars ?? []).map((scar) =>
          h(
            "li",
            { testid: "scar", "data-severity": scar.severity },
            h("span", { class: `severity ${scar.severity}` }, scar.severity),
            " ",
            h("span", { testid: "scar-reason" }, scar.reason),
            h("span", { class: "meta" }, ` · seq ${num(scar.seq)}`, scar.action_id ? ` · ${scar.action_id}` : ""),
          ),
        ),
      );
      show(noScars, !(s.scars ?? []).length);
      show(content, true);
    },
    addRecords(records) {
      const changed = new Set();
      for (const r of records) {
        if (lastSeq !== null && r.seq <= lastSeq) continue; // already shown
        lastSeq = Math.max(lastSeq ?? -1, r.seq);
        if (r.kind === "policy") view.needsPolicy = true;
        const entry = folded.add(r);
        if (entry) changed.add(entry);
        logBody.prepend(
          h(
            "tr",
            { testid: "log-record", "data-kind": r.kind, "data-seq": r.seq },
            h("td", {}, num(r.seq)),
            h("td", {}, h("code", {}, r.kind)),
            h("td", {}, timeEl(r.ts)),
            h("td", {}, h("code", { title: r.hash ?? "" }, shortHash(r.hash))),
          ),
        );
      }
      while (logBody.rows.length > logTail) logBody.lastElementChild.remove();
      // Entries in request order: each new one goes on top, so the newest is first.
      for (const entry of [...changed].sort((a, b) => a.seq - b.seq)) {
        let item = items.get(entry.action_id);
        if (!item) {
          item = historyItem();
          items.set(entry.action_id, item);
          history.prepend(item.el);
        }
        item.update(entry);
      }
      show(noHistory, items.size === 0);
    },
  };
  return view;
}
