"""The bridge between run directories and the database: Celery tasks that supervise torchrun. No torch here."""
