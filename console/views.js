// Building and updating the page.
//
// Every value that comes from the API (IDs, tool names, inputs, reasons) goes
// into the page as text: h() appends strings as text nodes and sets attributes
// with setAttribute; nothing here assigns innerHTML.
//
// Each agent row and pending item is built once and then updated in place, so
// a form the operator is typing in is never rebuilt by the 2 s refresh.

/** Create an element: h("p", {class: "x", testid: "y", onclick: fn}, "text", child). */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "testid") {
      el.dataset.testid = value;
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) el.append(child);
  }
  return el;
}

/** Set text, turning any value into a string (numbers as JSON wrote them). */
export function setText(el, value) {
  const text = value === null || value === undefined ? "" : String(value);
  if (el.textContent !== text) el.textContent = text;
}

export function show(el, visible) {
  el.hidden = !visible;
}

/** JS prints numbers the way RFC 8785 writes them, so String() shows 0.3 as 0.3. */
export const num = (n) => (typeof n === "number" ? String(n) : "–");

export const shortHash = (hash) => (typeof hash === "string" ? hash.slice(0, 12) : "–");

export function ago(iso, now = Date.now()) {
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return "";
  const secs = Math.max(0, Math.round((now - then) / 1000));
  if (secs < 60) return `${secs} s ago`;
  if (secs < 3600) return `${Math.floor(secs / 60)} min ago`;
  if (secs < 86400) return `${Math.floor(secs / 3600)} h ago`;
  return `${Math.floor(secs / 86400)} d ago`;
}

export function prettyJson(value) {
  return JSON.stringify(value === undefined ? null : value, null, 2);
}

export const errorText = (err) => (err.code ? `${err.code}: ${err.message}` : err.message);

/**
 * Bring a keyed list in `container` in line with `entries`: build rows for new
 * keys (inserted in entry order), update the others in place, drop the gone.
 * Existing rows are never moved, so focus and typed text survive.
 */
export function syncKeyed(container, rows, entries, keyOf, create) {
  const seen = new Set();
  let prev = null;
  for (const entry of entries) {
    const key = keyOf(entry);
    seen.add(key);
    let row = rows.get(key);
    if (!row) {
      row = create(entry);
      rows.set(key, row);
      container.insertBefore(row.el, prev ? prev.el.nextSibling : container.firstChild);
    }
    row.update(entry);
    prev = row;
  }
  for (const [key, row] of rows) {
    if (!seen.has(key)) {
      row.el.remove();
      rows.delete(key);
    }
  }
}

function cell(name, label, ...children) {
  return h("div", { class: `cell ${name}` }, h("span", { class: "label" }, label), ...children);
}

function bar(testid) {
  const fill = h("span", { class: "bar-fill" });
  const el = h("span", { class: "bar", testid, role: "img" }, fill);
  return {
    el,
    set(part, whole, label) {
      const ratio = whole > 0 ? Math.min(1, Math.max(0, part / whole)) : part > 0 ? 1 : 0;
      fill.style.width = `${(ratio * 100).toFixed(1)}%`;
      el.setAttribute("aria-label", label);
      el.classList.toggle("high", ratio >= 0.8);
    },
  };
}

/** A form's error line: shows `{code}: {error}` from the API, or a local message. */
function errorLine(testid) {
  const el = h("p", { class: "form-error", role: "alert", testid, hidden: true });
  return {
    el,
    set(message) {
      setText(el, message);
      show(el, Boolean(message));
    },
  };
}

/**
 * One agent of GET /v1/agents. `actions` has verify(id) and terminate(id, reason, by),
 * both returning promises, and operatorName() for the default "by".
 */
export function agentRow(agentId, actions) {
  const state = h("span", { class: "state", testid: "agent-state" });
  const stateDetail = h("span", { class: "state-detail", testid: "agent-state-detail" });
  const budgetBar = bar("budget-bar");
  const budgetText = h("span", { class: "figure", testid: "budget-text" });
  const scarBar = bar("scar-bar");
  const scarText = h("span", { class: "figure", testid: "scar-score" });
  const allowed = h("span", { testid: "count-allowed" });
  const denied = h("span", { testid: "count-denied" });
  const pending = h("span", { testid: "count-pending" });
  const counts = h(
    "span",
    { class: "figure counts" },
    allowed,
    " allowed · ",
    denied,
    " denied · ",
    pending,
    " pending",
  );

  const verifyResult = h("div", { class: "verify-result", testid: "verify-result", hidden: true });
  const verifyButton = h("button", { type: "button", testid: "verify-button" }, "Verify log");
  const terminateButton = h(
    "button",
    { type: "button", class: "danger", testid: "terminate-button" },
    "Terminate…",
  );

  // Terminate: step 1 asks reason and name, step 2 asks for confirmation.
  const reasonInput = h("input", {
    testid: "terminate-reason",
    required: true,
    maxlength: 1000,
    placeholder: "why this agent must stop",
  });
  const byInput = h("input", {
    testid: "terminate-by",
    required: true,
    maxlength: 128,
    placeholder: "your name",
  });
  const askStep = h(
    "div",
    { class: "step" },
    h("label", {}, "Reason", reasonInput),
    h("label", {}, "Operator", byInput),
    h("div", { class: "buttons" },
      h("button", { type: "submit", class: "danger", testid: "terminate-continue" }, "Continue"),
      h("button", { type: "button", class: "quiet", testid: "terminate-cancel", onclick: closeTerminate }, "Cancel"),
    ),
  );
  const confirmText = h("p", { testid: "terminate-confirm-text" });
  const confirmButton = h(
    "button",
    { type: "button", class: "danger", testid: "terminate-confirm" },
    "Yes, terminate permanently",
  );
  const confirmStep = h(
    "div",
    { class: "step confirm", testid: "terminate-confirm-step", hidden: true },
    confirmText,
    h("div", { class: "buttons" },
      confirmButton,
      h("button", { type: "button", class: "quiet", testid: "terminate-back", onclick: () => step(1) }, "Back"),
    ),
  );
  const terminateError = errorLine("terminate-error");
  const terminateForm = h(
    "form",
    { class: "terminate-form", testid: "terminate-form", hidden: true },
    askStep,
    confirmStep,
    terminateError.el,
  );

  function step(n) {
    show(askStep, n === 1);
    show(confirmStep, n === 2);
    (n === 1 ? reasonInput : confirmButton).focus();
  }
  function closeTerminate() {
    terminateForm.reset();
    terminateError.set("");
    show(terminateForm, false);
  }

  terminateButton.addEventListener("click", () => {
    if (!byInput.value) byInput.value = actions.operatorName();
    show(terminateForm, true);
    step(1);
  });
  terminateForm.addEventListener("submit", (event) => {
    event.preventDefault();
    terminateError.set("");
    setText(
      confirmText,
      `Terminate agent ${agentId} permanently? Reason: “${reasonInput.value}”, by ${byInput.value}. ` +
        "This cannot be undone.",
    );
    step(2);
  });
  confirmButton.addEventListener("click", async () => {
    confirmButton.disabled = true;
    try {
      await actions.terminate(agentId, reasonInput.value, byInput.value);
      closeTerminate();
    } catch (err) {
      terminateError.set(errorText(err));
      step(1);
    } finally {
      confirmButton.disabled = false;
    }
  });

  verifyButton.addEventListener("click", async () => {
    verifyButton.disabled = true;
    verifyResult.className = "verify-result";
    setText(verifyResult, "Verifying…");
    show(verifyResult, true);
    try {
      const report = await actions.verify(agentId);
      verifyResult.classList.add(report.ok ? "ok" : "failed");
      verifyResult.replaceChildren(...verifyReport(report));
    } catch (err) {
      verifyResult.classList.add("failed");
      setText(verifyResult, `Could not verify: ${errorText(err)}`);
    } finally {
      verifyButton.disabled = false;
    }
  });

  const el = h(
    "article",
    { class: "agent", testid: "agent", "data-agent-id": agentId },
    h(
      "div",
      { class: "agent-main" },
      cell("id", "Agent", h("a", { href: `#/agents/${encodeURIComponent(agentId)}`, testid: "agent-id" }, agentId)),
      cell("state-cell", "State", state, stateDetail),
      cell("figures", "Budget", budgetBar.el, budgetText),
      cell("figures", "Scars", scarBar.el, scarText),
      cell("figures", "Actions", counts),
      h("div", { class: "cell buttons" }, verifyButton, terminateButton),
    ),
    h("div", { class: "agent-panel" }, verifyResult, terminateForm),
  );

  return {
    el,
    update(entry) {
      const s = entry.status;
      const quarantined = entry.state !== "active" || !s;
      const kind = quarantined ? "quarantined" : s.alive ? "alive" : "terminated";
      setText(state, kind);
      state.dataset.state = kind;
      el.dataset.state = kind;
      setText(
        stateDetail,
        quarantined ? (entry.error ?? "") : s.alive ? "" : (s.termination_reason ?? ""),
      );
      if (!quarantined) {
        budgetBar.set(s.spent, s.budget, `spent ${num(s.spent)} of ${num(s.budget)}`);
        setText(budgetText, `${num(s.spent)} spent · ${num(s.remaining)} left of ${num(s.budget)}`);
        scarBar.set(s.scar_score, s.scar_limit, `scar score ${num(s.scar_score)} of ${num(s.scar_limit)}`);
        setText(scarText, `${num(s.scar_score)} / ${num(s.scar_limit)}`);
        setText(allowed, num(s.actions_allowed));
        setText(denied, num(s.actions_denied));
        setText(pending, num(s.actions_pending));
      }
      show(terminateButton, kind === "alive");
      if (kind !== "alive" && !terminateForm.hidden && !terminateForm.contains(document.activeElement)) {
        closeTerminate();
      }
    },
  };
}

function verifyReport(report) {
  if (report.ok) {
    return [
      h("strong", { testid: "verify-status" }, "OK"),
      ` · ${num(report.records)} records · head seq `,
      h("span", { testid: "verify-head-seq" }, num(report.head?.seq)),
      " · ",
      h("code", { title: report.head?.hash ?? "", testid: "verify-head-hash" }, shortHash(report.head?.hash)),
    ];
  }
  const f = report.failure ?? {};
  return [
    h("strong", { testid: "verify-status" }, "FAILED"),
    ` · ${num(report.records)} records · line `,
    h("span", { testid: "verify-line" }, num(f.line)),
    " · seq ",
    h("span", { testid: "verify-seq" }, num(f.seq)),
    " · ",
    h("span", { testid: "verify-reason" }, f.reason ?? ""),
  ];
}

/**
 * One pending approval. `entry` is a pending entry plus its agent_id.
 * `actions` has approve(entry, note) and reject(entry, reason, scar).
 */
export function pendingItem(entry, actions) {
  const { agent_id: agentId, action } = entry;
  const since = h("span", { class: "ago", testid: "pending-ago" });

  const note = h("input", { testid: "approve-note", maxlength: 1000, placeholder: "note (optional)" });
  const approveButton = h("button", { type: "submit", class: "approve", testid: "approve-button" }, "Approve");
  const approveForm = h(
    "form",
    { class: "decide approve-form", testid: "approve-form" },
    h("label", {}, "Note", note),
    approveButton,
  );

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
  const rejectButton = h("button", { type: "submit", class: "danger", testid: "reject-button" }, "Reject");
  const rejectForm = h(
    "form",
    { class: "decide reject-form", testid: "reject-form" },
    h("label", {}, "Reason", reason),
    h("label", {}, "Scar", scar),
    rejectButton,
  );
  const error = errorLine("pending-error");

  async function decide(run) {
    error.set("");
    approveButton.disabled = rejectButton.disabled = true;
    try {
      await run();
    } catch (err) {
      error.set(errorText(err));
    } finally {
      approveButton.disabled = rejectButton.disabled = false;
    }
  }
  approveForm.addEventListener("submit", (event) => {
    event.preventDefault();
    decide(() => actions.approve(entry, note.value));
  });
  rejectForm.addEventListener("submit", (event) => {
    event.preventDefault();
    decide(() => actions.reject(entry, reason.value, scar.value || undefined));
  });

  const el = h(
    "article",
    {
      class: "pending-item",
      testid: "pending-item",
      "data-agent-id": agentId,
      "data-action-id": action.action_id,
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
      h("div", {}, h("dt", {}, "Agent"),
        h("dd", {}, h("a", { href: `#/agents/${encodeURIComponent(agentId)}`, testid: "pending-agent" }, agentId))),
      h("div", {}, h("dt", {}, "Action"), h("dd", { testid: "pending-action-id" }, action.action_id)),
      h("div", {}, h("dt", {}, "Requested"),
        h("dd", {}, h("time", { datetime: entry.requested_at, testid: "pending-requested-at" }, entry.requested_at),
          " (", since, ")")),
    ),
    h("pre", { class: "input", testid: "pending-input" }, prettyJson(action.input)),
    h("div", { class: "decisions" }, approveForm, rejectForm),
    error.el,
  );
  return {
    el,
    update(e) {
      setText(since, ago(e.requested_at));
    },
  };
}

/** The detail view of one agent: status, scars, and the last log records. */
export function agentDetail(agentId, logTail) {
  const status = h("dl", { class: "status", testid: "detail-status" });
  const scars = h("ol", { class: "scars", testid: "detail-scars" });
  const noScars = h("p", { class: "empty", testid: "detail-no-scars" }, "No scars.");
  const logBody = h("tbody", { testid: "log-records" });
  const error = errorLine("detail-error");
  const content = h(
    "div",
    { hidden: true }, // until the status has loaded
    status,
    h("h3", {}, "Scars"),
    noScars,
    scars,
    h("h3", {}, `Last ${logTail} log records, newest first`),
    h(
      "table",
      { class: "log", testid: "log-table" },
      h("thead", {}, h("tr", {}, h("th", {}, "Seq"), h("th", {}, "Kind"), h("th", {}, "Time (ts)"), h("th", {}, "Hash"))),
      logBody,
    ),
  );
  const el = h("div", { class: "detail", "data-agent-id": agentId }, error.el, content);
  let lastSeq = null;

  function fact(label, testid, ...value) {
    return h("div", {}, h("dt", {}, label), h("dd", { testid }, ...value));
  }

  return {
    el,
    agentId,
    /** seq after which to ask for records: the newest shown, or a tail before head. */
    logAfter(head) {
      return lastSeq ?? Math.max(-1, head.seq - logTail);
    },
    setError(message) {
      error.set(message);
    },
    update(s) {
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
      for (const r of records) {
        if (lastSeq !== null && r.seq <= lastSeq) continue; // already shown
        logBody.prepend(
          h(
            "tr",
            { testid: "log-record", "data-kind": r.kind, "data-seq": r.seq },
            h("td", {}, num(r.seq)),
            h("td", {}, h("code", {}, r.kind)),
            h("td", {}, r.ts ?? ""),
            h("td", {}, h("code", { title: r.hash ?? "" }, shortHash(r.hash))),
          ),
        );
        lastSeq = Math.max(lastSeq ?? -1, r.seq);
      }
      while (logBody.rows.length > logTail) logBody.lastElementChild.remove();
    },
  };
}
