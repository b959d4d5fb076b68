"""Agents' runtime: the signed log, policies, decisions and agent actors."""
