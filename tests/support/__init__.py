"""What every test folder shares, loaded by tests/conftest.py (`pytest_plugins`) or imported by name.

- `ports`: `free_port()`, `wait_port()`.
- `procs`: the one process scanner: the processes a test started, found by the marker in their
  environment (`RANKZERO_TEST_RUN`), and stopping a process group we started. Never by name.
- `databases`: fixtures `sqlite_url`, `pg_url`, `database_url`.
- `settings`: `API_TOKEN`, fixtures `api_settings`, `auth_headers`; `settings_env()` for child processes.
- `services`: the service under test: fixtures `live_api`, `service` (+ `service_options`), `workers`
  (real Celery worker subprocesses), `web_service` (`rankzero up` for the browser tests); `Client`.
- `servers`: Redis and PostgreSQL servers of a test's own (fixtures `redis_server`, `pg_cluster`).
- `jobs`: job specs (`fake_spec`, `slow_spec`, `DIGITS_SPEC`), waiting, and reading a job's results.
- `rows`: rows written straight into a database, as the worker would write them.
- `browser`: chromium through Playwright (fixtures `browser`, `new_page`, `page`), `shot()`.
- `trainer_runs`: launching the trainer (bounded), reading its events, comparing weights.
- `commands`: the executables of the venv running the tests.
- `fake_trainer`, `slow_model`: programs the workers' subprocesses run (a stand-in trainer, user code).
"""
