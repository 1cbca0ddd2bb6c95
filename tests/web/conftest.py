"""The browser tests' own fixtures; the service (`web_service`) and chromium (`browser`, `page`,
`new_page`) come from tests/support.

- `db`: a SQLModel session on the web service's database, for seeding rows the way the worker would.
- screenshots of an earlier run are removed once per run (tests/support/parallel.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.services import WebService

pytestmark = pytest.mark.browser


@pytest.fixture
def db(web_service: WebService) -> Iterator[object]:
    from sqlmodel import Session

    from core.db import get_engine

    with Session(get_engine(web_service.database_url)) as session:
        yield session
