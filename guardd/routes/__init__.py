"""The routes of guardd, one Quart blueprint per resource.

Each module is importable and testable alone: ``agents`` (create, list,
status, token, policy, scars, terminate), ``actions`` (ask, view, long-poll,
outcome, approve, reject, cancel, pending), ``grants``, ``log`` (read,
verify), ``hooks`` (Claude Code's HTTP hook, on the token's agent),
``operators`` (who calls, operator tokens), ``console`` (its static files)
and ``meta`` (health, readiness, metrics,
public key, the OpenAPI document). What they share is in
``common``; ``guardd.app`` registers them. A new route goes in the module of
its resource, declared with ``@blueprint.endpoint(...)`` right above it
(``guardd.endpoints``): that declaration is its operation in the OpenAPI
document, and says what the route is handed (its caller, its agent, its
parameters and its body, parsed). Its URL rule is what metrics name it by.
"""
