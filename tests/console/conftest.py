"""Console metrics of real script jobs: the same real launcher and bundle upload as tests/scripts."""

from __future__ import annotations

from tests.scripts.conftest import service_options, upload

__all__ = ["service_options", "upload"]
