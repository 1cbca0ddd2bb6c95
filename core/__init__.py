"""What the API and the workers share: settings, the database (engine, tables, migrations), the job
state machine and the only writer of job rows (`core.jobs`), sending a job to the queue, and the
capacity check. It imports neither `api` nor `worker` (an import-linter contract enforces it)."""
