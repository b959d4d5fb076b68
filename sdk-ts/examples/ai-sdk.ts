import { GuardClient } from "guardd-client";
import { guardTools, withdrawDeclined } from "guardd-client/ai";
import { generateText, jsonSchema, type LanguageModel, type ModelMessage, tool } from "ai";

const guard = new GuardClient(); // GUARD_URL, GUARD_AGENT_TOKEN

const tools = guardTools(guard, {
  send_email: tool({
    description: "Send an email",
    inputSchema: jsonSchema<{ to: string; body: string }>({
      type: "object",
      properties: { to: { type: "string" }, body: { type: "string" } },
      required: ["to", "body"],
    }),
    execute: async ({ to }) => `sent to ${to}`,
  }),
});

/** One turn of the conversation. A call guardd holds ends it with a
 * tool-approval-request, which the app shows; the user's answer goes back
 * in `messages`, and the call runs once the operator has approved it too. */
export async function turn(model: LanguageModel, messages: ModelMessage[]) {
  await withdrawDeclined(tools, messages); // the user said no: off the operator's queue
  const result = await generateText({ model, tools, messages });
  const approvals = result.content.filter((part) => part.type === "tool-approval-request");
  return { messages: [...messages, ...result.response.messages], approvals };
}
