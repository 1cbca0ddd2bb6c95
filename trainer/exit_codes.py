"""The trainer's exit codes, declared once (the worker reads them the same way). Torch-free."""

EXIT_OK = 0
# EX_TEMPFAIL: stopped on SIGTERM after saving a checkpoint; the job resumes from it.
EXIT_STOPPED = 75
