"""A job's own Python packages (spec `environment`): resolved once per job into a lock, built once per host
into a cached environment layered over the service's, and run with that environment's interpreter.

- `requirements.py`: what the job asks for (its spec and its bundle's file), normalised and hashed (pure).
- `lock.py`: a lock's packages, what of it the service already has, the cache key (pure).
- `uv.py`: running uv (resolve, create, install) with its output in the attempt's environment log.
- `cache.py`: this host's cache: one build per entry at a time, read-only entries, LRU eviction.
- `record.py`: the job's environment row (the lock, the state, the figures).
- `prepare.py`: what node 0 and the followers call before a launch (`prepare` → `Ready`).

docs/your-code.md "Bring your own packages" is the user's side of it.
"""

from worker.environments.prepare import EnvironmentFailed, Ready, for_attempt, prepare

__all__ = ["EnvironmentFailed", "Ready", "for_attempt", "prepare"]
