"""The fault tests' `service`: a live API and real Celery workers running the real trainer under
torchrun, with the slowed-down MLP (tests/support/slow_model.py) allowed as user code. Servers of
their own to break come from tests/support/servers.py (`redis_server`, `pg_cluster`).

Every process a test starts carries its `workers.marker` and is SIGKILLed at the end (after a
SIGCONT), so a failing test never leaves ranks behind.
"""

from __future__ import annotations

import pytest

from tests.support.jobs import USER_CODE
from tests.support.services import DEFAULT_SETTINGS, ServiceOptions


@pytest.fixture
def service_options() -> ServiceOptions:
    return ServiceOptions(
        settings={**DEFAULT_SETTINGS, "cancel_grace_s": 10.0, "allowed_code": USER_CODE}, fake_trainer=False
    )
