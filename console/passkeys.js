// Passkeys: the operator's own (register, list) and the signature of a
// decision that a tool's rule wants signed (approval_passkey).
//
// A registration and an approval are WebAuthn ceremonies of the browser:
// guardd answers the options as JSON, the browser's authenticator makes the
// credential or the assertion, and its toJSON() goes back to guardd. The
// challenge of an approval is the binding of that very decision (agent log,
// action, request hash, decision, approver), so the signature proves it to
// anyone holding the logs (docs/log-format.md).

import * as api from "./api.js";
import { errorText, h, setText } from "./views.js";

/**
 * The assertion for `decision` ("approve" or "reject") of an action, when its
 * tool's rule wants one; undefined when it does not, or when the caller can
 * hold no passkey (the admin token) or has none: guardd then says what is
 * missing.
 */
export async function passkeyFor(agentId, actionId, decision) {
  let options;
  try {
    options = await api.get(
      api.path`/v1/agents/${agentId}/actions/${actionId}/approval-options?decision=${decision}`,
    );
  } catch (err) {
    if (err instanceof api.ApiError && err.code === "forbidden") return undefined;
    throw err;
  }
  if (!options.passkey_required) return undefined;
  const credential = await navigator.credentials.get({
    publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options),
  });
  if (credential === null) throw new Error("No passkey was used: the decision was not sent.");
  return credential.toJSON();
}

/** Register a passkey on this device; resolves to the passkey guardd recorded. */
async function register() {
  const options = await api.post("/v1/operators/passkeys/options");
  const credential = await navigator.credentials.create({
    publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options),
  });
  if (credential === null) throw new Error("No passkey was made.");
  return api.post("/v1/operators/passkeys", credential.toJSON());
}

function passkeyRow(passkey) {
  return h(
    "li",
    { testid: "passkey", "data-status": passkey.status },
    h("code", { testid: "passkey-id" }, passkey.credential_id),
    ` ${passkey.alg === -8 ? "EdDSA" : "ES256"} · ${passkey.status} · registered ${passkey.registered_at}`,
  );
}

/** The Passkeys view: the caller's passkeys and a button to register one. */
export function passkeysView() {
  const list = h("ul", { class: "passkeys", testid: "passkeys-list" });
  const status = h("p", { class: "hint", role: "status", testid: "passkeys-status" });
  async function load() {
    try {
      const { passkeys } = await api.get("/v1/operators/passkeys");
      list.replaceChildren(...passkeys.map(passkeyRow));
      setText(status, passkeys.length ? "" : "No passkey yet.");
    } catch (err) {
      setText(status, errorText(err));
    }
  }
  const button = h(
    "button",
    {
      type: "button",
      testid: "passkey-register",
      onclick: async () => {
        button.disabled = true;
        try {
          const made = await register();
          setText(status, `Passkey ${made.credential_id} registered.`);
          await load();
          setText(status, `Passkey ${made.credential_id} registered.`);
        } catch (err) {
          setText(status, errorText(err));
        } finally {
          button.disabled = false;
        }
      },
    },
    "Register a passkey",
  );
  const el = h(
    "div",
    { testid: "passkeys-body" },
    h(
      "p",
      { class: "hint" },
      "A passkey signs your approvals of the calls a policy marks approval_passkey: ",
      "the signature covers that very call, and anyone holding the logs can check it.",
    ),
    button,
    status,
    list,
  );
  return { el, load };
}
