"""Test doubles shared by the whole suite (stand-in servers, not fixtures: see tests/conftest.py)."""
