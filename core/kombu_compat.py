"""A workaround for kombu's Redis transport (seen with kombu 5.7.0) losing the worker on a broker outage.

When Redis goes away while a task is running with acks_late, Celery closes the broken connection;
kombu's channel close then tries to requeue the unacked message through a new connection pool built
from `connection.client`, which is already None, and raises AttributeError. That is not one of the
transport's connection errors, so Celery calls it "Unrecoverable" and the worker exits once its
running jobs end: it never reconnects and takes no new job. (The same happens to the task's ack.)

Raising the transport's own ConnectionError instead lets both paths do what they do for any broker
error: the close is ignored, the ack is logged as not done, and the consumer reconnects. The unacked
message stays in Redis's unacked set (visibility_timeout brings it back; the job claim makes that harmless).
"""

from __future__ import annotations

from typing import Any

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    import redis
    from kombu.transport import redis as kombu_redis

    original = kombu_redis.Channel._connparams

    def _connparams(self: Any, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection is closed")
        return original(self, asynchronous=asynchronous)

    kombu_redis.Channel._connparams = _connparams
    _installed = True
