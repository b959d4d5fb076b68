// Building and updating the page.
//
// Every value that comes from the API (IDs, tool names, inputs, reasons) goes
// into the page as text: h() appends strings as text nodes and sets attributes
// with setAttribute; nothing here assigns innerHTML.
//
// Each agent row and pending item is built once and then updated in place, so
// a form the operator is typing in is never rebuilt by the 2 s refresh.
// The pending card is in pending.js, the agent's page in detail.js.

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

export function prettyJson(value) {
  return JSON.stringify(value === undefined ? null : value, null, 2);
}

export const errorText = (err) => (err.code ? `${err.code}: ${err.message}` : err.message);

/**
 * Bring a keyed list in `container` in line with `entries`: build rows for new
 * keys (inserted in entry order), update the others in place, drop the gone.
 * Existing rows are never moved, so focus and typed text survive. A gone row
 * stays where it is when keep(row, key) says so (a card still to be read).
 */
export function syncKeyed(container, rows, entries, keyOf, create, keep = () => false) {
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
    if (!seen.has(key) && !keep(row, key)) {
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
export function errorLine(testid) {
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
      const kind = agentKind(entry);
      setText(state, kind);
      state.dataset.state = kind;
      el.dataset.state = kind;
      setText(stateDetail, stateDetailText(kind, entry));
      // Only a loaded agent has figures; the others' rows hide them (style.css).
      if (kind === "alive" || kind === "terminated") {
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

/**
 * What a row of GET /v1/agents shows: alive or terminated (with a status),
 * unloaded (guardd has not read its log yet: a node on a shared store, or one
 * loading agents on first use before its sweep came to it; no status, and
 * nothing wrong with it), or quarantined (its log failed verification, or an
 * entry without a status).
 */
function agentKind(entry) {
  if (entry.state === "unloaded") return "unloaded";
  const s = entry.status;
  if (entry.state !== "active" || !s) return "quarantined";
  return s.alive ? "alive" : "terminated";
}

function stateDetailText(kind, entry) {
  switch (kind) {
    case "unloaded":
      return "not loaded on this node yet: its page loads it";
    case "quarantined":
      return entry.error ?? "";
    case "terminated":
      return entry.status.termination_reason ?? "";
    default:
      return "";
  }
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

