import { ActionDenied, GuardClient } from "guardd-client";

// GUARD_URL and GUARD_AGENT_TOKEN come from the environment (or ./.env).
const guard = new GuardClient();

// Each call asks guardd first, waits while an operator decides, runs, reports.
const sendInvoice = guard.guarded(
  async ({ to, amount }: { to: string; amount: number }) => {
    console.log(`invoice of ${amount} sent to ${to}`);
    return "sent";
  },
  { tool: "send_invoice", approvalTimeout: 300 },
);

try {
  console.log(await sendInvoice({ to: "ops@example.com", amount: 12.5 }));
} catch (error) {
  if (!(error instanceof ActionDenied)) throw error;
  console.log(`not sent: ${error.code}`);
}
