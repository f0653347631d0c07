"""Helpers shared by the live-component and end-to-end tests."""

from __future__ import annotations

from helpers.polling import eventually  # noqa: F401  (re-exported for the tests here)
