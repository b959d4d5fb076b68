"""Adapters that guard every tool of an agent written with a framework.

One module per framework (``client_sdk.integrations.pydantic_ai``, ...), each
importing its framework and nothing else of it elsewhere: installing the
client alone stays as light as it is, and each framework comes with its own
extra (``pip install './sdk[pydantic-ai]'``). What they share, free of any
framework, is ``_common``: ask guardd about one tool call, wait for an
operator, report the outcome, and word a refusal the model can act on.
See docs/integrations.md.
"""
