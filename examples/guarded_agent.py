"""A guarded agent: every tool call asks guardd first. Needs a running guardd (see README)."""

import threading
import time
import uuid

from client_sdk import ActionDenied, AdminClient, GuardClient

admin = AdminClient()  # GUARD_URL; admin token from GUARD_ADMIN_TOKEN, .env or guard-data/keys
agent_id = f"demo-{uuid.uuid4().hex[:8]}"
tools = {"search": {"cost": 1}, "send_email": {"cost": 2, "requires_approval": True}}
created = admin.create_agent(agent_id, {"budget": 10, "scar_limit": 10, "tools": tools})
agent = GuardClient(created.token)


@agent.guarded
def search(query: str) -> str:
    return f"3 results for {query!r}"


@agent.guarded
def send_email(to: str, body: str) -> str:
    return f"sent to {to}"


def operator() -> None:  # nobody is at the console, so approve the pending e-mail ourselves
    while not (pending := admin.list_pending(agent_id)):
        time.sleep(0.1)
    admin.approve(agent_id, pending[0].action.action_id, approver="example")


print(search("guard rails"))
threading.Thread(target=operator, daemon=True).start()
print(send_email("ops@example.com", body="hello"))  # held until approved
try:
    agent.guarded(lambda: None, name="delete_database")()  # not in the policy
except ActionDenied as denied:
    print(denied)  # .code, .reason and .action_id hold the same, for programs
print(f"spent {agent.status().spent} of 10")
