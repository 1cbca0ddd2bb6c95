"""Metrics from an arbitrary script's console, with no configuration (issue 36; docs/your-code.md).

    tokens.py  one line → its `key value` pairs, `N/M` fractions and table headers (pure, linear in the line)
    steps.py   per job: which number is the step (a step/iter counter, `N/M` progress with a stable M, or
               epoch plus batch-in-epoch), and the total when the line says it
    gate.py    per job: a series only for a key that repeats with a number over several lines; what was
               recognised (names, an example line) and, when nothing was, a pattern suggested from the most
               frequent numeric line
    reader.py  the three together: lines in, (step, name, value) points out

Pure: no I/O. worker/console_metrics.py feeds it a job's console; the API replays a stored console with a
pattern added later (api/routes/console_patterns.py).
"""
