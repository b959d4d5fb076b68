"""The operator console: static files served by guardd at ``/``."""

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent

__all__ = ["STATIC_DIR"]
