// An agent's decision history, folded from its log records (see docs/records.md):
// one entry per action, with what was asked, what was decided, by whom and why,
// its outcome and the scars it brought.

/** How an operator authenticated, from the by_id their records carry (docs/log-format.md). */
export function howText(byId) {
  if (byId === "admin-token") return "admin token";
  if (byId.startsWith("token:")) return `operator token ${byId.slice(6)}`;
  if (byId.startsWith("oidc:")) return `signed in at ${byId.slice(5).split("#")[0]}`;
  return byId;
}

/** Who decided and how: "alice (operator token tok-1f…)"; an older record names who only. */
export function whoText(by, byId) {
  return byId === undefined ? by : `${by} (${howText(byId)})`;
}

/** How a decision reads: "denied · insufficient_budget (cost 5, remaining 2)". */
export function reasonText(reason) {
  if (!reason || typeof reason !== "object") return "";
  const { code, ...rest } = reason;
  const fields = Object.entries(rest).map(([k, v]) => `${k} ${typeof v === "string" ? v : JSON.stringify(v)}`);
  return fields.length ? `${code} (${fields.join(", ")})` : String(code);
}

/**
 * The history of one agent. add() takes records in seq order (any slice of
 * the log); records about an action whose request is before the slice are
 * skipped, as the request is what names the tool and input.
 */
export class History {
  constructor() {
    /** action_id -> entry, in request order */
    this.actions = new Map();
  }

  /** Fold one record; returns the entry it changed, or null. */
  add(r) {
    if (r.kind === "action_requested") {
      const entry = {
        action_id: r.action_id,
        seq: r.seq,
        tool: r.tool,
        input: r.input,
        cost: r.cost,
        requested_at: r.ts,
        decision: "requested",
        held: false,
        scars: [],
      };
      this.actions.set(r.action_id, entry);
      return entry;
    }
    const entry = typeof r.action_id === "string" ? this.actions.get(r.action_id) : undefined;
    if (!entry) return null;
    switch (r.kind) {
      case "approval_required":
        Object.assign(entry, { decision: "pending", held: true, cost: r.cost });
        break;
      case "action_allowed":
        Object.assign(entry, { decision: "allowed", cost: r.cost, remaining: r.remaining, decided_at: r.ts });
        if (r.approved_by !== undefined) entry.by = r.approved_by;
        if (r.by_id !== undefined) entry.by_id = r.by_id;
        if (r.note !== undefined) entry.note = r.note;
        break;
      case "action_denied":
        Object.assign(entry, { decision: "denied", reason: r.reason, decided_at: r.ts });
        if (r.by !== undefined) entry.by = r.by;
        if (r.by_id !== undefined) entry.by_id = r.by_id;
        break;
      case "action_rejected":
        Object.assign(entry, {
          decision: "rejected",
          reason: { code: "rejected", reason: r.reason },
          by: r.by,
          decided_at: r.ts,
        });
        if (r.by_id !== undefined) entry.by_id = r.by_id;
        break;
      case "approval_expired":
        // Denied by guardd itself: nobody decided in time. Not a rejection.
        Object.assign(entry, {
          decision: "denied",
          reason: { code: "approval_expired", timeout_secs: r.timeout_secs },
          decided_at: r.ts,
        });
        break;
      case "action_cancelled":
        Object.assign(entry, { decision: "cancelled", by: r.by, decided_at: r.ts });
        if (r.by_id !== undefined) entry.by_id = r.by_id;
        entry.reason = r.reason !== undefined ? { code: "cancelled", reason: r.reason } : { code: "cancelled" };
        break;
      case "outcome":
        entry.outcome = { outcome: r.outcome, by: r.by, detail: r.detail, ts: r.ts };
        break;
      case "scar":
        entry.scars.push({ severity: r.severity, reason: r.reason, by: r.by, seq: r.seq });
        break;
      default:
        return null;
    }
    return entry;
  }
}
