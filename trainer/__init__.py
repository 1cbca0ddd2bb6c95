"""The trainer: runs under torchrun; a spec file in, a run directory out. Knows nothing of HTTP, Celery or SQL."""
