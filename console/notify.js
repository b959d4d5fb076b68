// Desktop notifications of new pending approvals, through the browser's
// Notification API. The browser is asked for permission only when the
// operator clicks "Notify me", never on load; the choice to be notified is
// kept in localStorage, the permission by the browser.

const KEY = "guard.notify";

const supported = () => typeof window.Notification === "function";

/** "unsupported", "denied" (blocked in the browser), "on", or "off". */
export function notifyState() {
  if (!supported()) return "unsupported";
  const permission = Notification.permission;
  if (permission === "denied") return "denied";
  return permission === "granted" && localStorage.getItem(KEY) === "on" ? "on" : "off";
}

/** Turn notifications on; asks the browser's permission if it was never given. */
export async function enableNotifications() {
  if (!supported()) return notifyState();
  let permission = Notification.permission;
  if (permission === "default") permission = await Notification.requestPermission();
  if (permission === "granted") localStorage.setItem(KEY, "on");
  return notifyState();
}

export function disableNotifications() {
  localStorage.removeItem(KEY);
}

/** Show one notification if they are on; a click brings the console's pending list forward. */
export function notify(title, body, tag) {
  if (notifyState() !== "on") return;
  try {
    const n = new Notification(title, { body, tag });
    n.addEventListener("click", () => {
      window.focus();
      location.hash = "#/pending";
      n.close();
    });
  } catch (err) {
    // Some browsers only show notifications from a service worker: the page still works.
    console.warn("cannot show a desktop notification:", err);
  }
}
