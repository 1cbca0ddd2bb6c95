"""Sweeps: a search over a job spec's hyperparameters, run as ordinary jobs (docs/sweeps.md).

    space.py   the sweep spec (parameter space, method, metric, trials, parallelism, early stopping) and
               how one trial's values become a job spec (torch-free, no database)
    decide.py  what to do now, as a pure function of what the rows say: new trials (Optuna's samplers,
               rebuilt in memory from our rows each time), trials to prune (Optuna's pruners), the end
    driver.py  load → decide → apply, one pass per scheduler tick (worker/scheduler.py)
    store.py   the rows: create a sweep, read one with its trials, cancel / pause / resume

Importing the package imports nothing heavy: Optuna is imported by decide.py only.
"""
