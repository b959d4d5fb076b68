"""The routes of guardd, one Quart blueprint per resource.

Each module is importable and testable alone: ``agents`` (create, list,
status, token, policy, scars, terminate), ``actions`` (ask, view, long-poll,
outcome, approve, reject, cancel, pending), ``grants``, ``log`` (read,
verify), ``console`` (its static files) and ``meta`` (health, readiness,
metrics, public key, the OpenAPI document). What they share is in
``common``; ``guardd.app`` registers them. A new route goes in the module of
its resource, keeps its URL rule as metrics and the OpenAPI document name
it, and gets its operation in ``guardd.openapi``.
"""
