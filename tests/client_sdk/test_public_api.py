"""The package's public names: sorted, complete, and nothing private."""

from __future__ import annotations

import inspect

import client_sdk
from client_sdk import errors


def test_all_is_sorted():
    assert client_sdk.__all__ == sorted(client_sdk.__all__)


def test_all_names_every_public_name_and_nothing_else():
    public = {
        name
        for name, value in vars(client_sdk).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert set(client_sdk.__all__) == public


def test_every_exception_in_errors_is_exported():
    exceptions = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, Exception)
    }
    assert exceptions <= set(client_sdk.__all__)
