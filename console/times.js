// One time format for the whole console: the local date and time with a
// relative age ("2026-03-01 14:05:09 · 3 min ago"); hovering shows the exact
// UTC value the server wrote (the element's title and datetime).
//
// Every time on the page is a <time class="when"> made by timeEl(); paintTimes()
// redraws them all once a second, so ages and countdowns move without a refetch.

const pad = (n) => String(n).padStart(2, "0");

/** The local date and time of `ms`, to the second. */
export function localTime(ms) {
  const d = new Date(ms);
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

/** A duration, to the second below an hour: "45 s", "4 min 10 s", "2 h 5 min", "3 d 4 h". */
export function duration(secs) {
  const s = Math.max(0, Math.round(secs));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/**
 * Relative to now: an age in the past, coarse ("45 s ago", "3 min ago", "2 h ago",
 * "3 d ago"); a countdown to the future, to the second ("in 4 min 10 s").
 */
export function relative(ms, now = Date.now()) {
  const secs = Math.round((now - ms) / 1000);
  if (secs < 0) return `in ${duration(-secs)}`;
  if (secs < 60) return `${secs} s ago`;
  if (secs < 3600) return `${Math.floor(secs / 60)} min ago`;
  if (secs < 86400) return `${Math.floor(secs / 3600)} h ago`;
  return `${Math.floor(secs / 86400)} d ago`;
}

/** Milliseconds since the epoch of a server time (RFC 3339, UTC), or NaN. */
export const parse = (iso) => (typeof iso === "string" ? Date.parse(iso) : NaN);

/** The text of a time element: "local · relative". */
export function timeText(iso, now = Date.now()) {
  const ms = parse(iso);
  if (Number.isNaN(ms)) return iso ?? "";
  return `${localTime(ms)} · ${relative(ms, now)}`;
}

/** A <time> showing `iso` in the one format; its title is the exact UTC value. */
export function timeEl(iso, testid) {
  const el = document.createElement("time");
  el.className = "when";
  if (testid) el.dataset.testid = testid;
  setTime(el, iso);
  return el;
}

/** Point an existing time element at another instant. */
export function setTime(el, iso) {
  const value = iso ?? "";
  if (el.getAttribute("datetime") !== value) {
    el.setAttribute("datetime", value);
    el.title = value;
  }
  paintTime(el);
}

// Drawn as two parts, "local · relative", each kept on one line: a narrow
// screen wraps between them, never inside a date or a countdown.
function paintTime(el, now = Date.now()) {
  const iso = el.getAttribute("datetime");
  const ms = parse(iso);
  if (Number.isNaN(ms)) {
    if (el.textContent !== (iso ?? "")) el.textContent = iso ?? "";
    return;
  }
  const local = localTime(ms);
  const rel = relative(ms, now);
  if (el.textContent === `${local} · ${rel}`) return;
  const part = (text) => {
    const span = document.createElement("span");
    span.className = "part";
    span.textContent = text;
    return span;
  };
  el.replaceChildren(part(local), " · ", part(rel));
}

/** Redraw every time of the one format under `root` (their relative ages move). */
export function paintTimes(root = document, now = Date.now()) {
  for (const el of root.querySelectorAll("time.when")) paintTime(el, now);
}
