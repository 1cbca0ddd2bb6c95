"""A user's own webhooks (issue 37 part 5): where one may point, its secret, and sending one request to it.

A member registers hers (api/routes/webhooks.py, `rankzero webhooks add`); her jobs' and sweeps' events are
delivered to it (worker/notify_sender.py), signed like the server's webhooks (core/notify.py) but with the
hook's own secret, which she is shown once, when she adds it.

A hook's URL is http(s), and the addresses its host resolves to must be public: loopback, link-local (the
clouds' metadata service, 169.254.169.254), private, shared and reserved addresses would let a member make
the service call its own network for her. The address is checked when the hook is added and again before
each delivery (a name may resolve elsewhere later); the server's setting RANKZERO_WEBHOOK_ALLOW_PRIVATE,
which only whoever runs the service sets, lets such addresses through (a receiver on this network, tests).
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

import httpx

from core import notify

MAX_PER_USER = 10
MAX_URL_CHARS = 2000
MAX_ERROR_CHARS = 500
ALLOW_SETTING = "RANKZERO_WEBHOOK_ALLOW_PRIVATE"


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def url_shape_refusal(url: str) -> str | None:
    """Why `url` is not a webhook URL at all (scheme, host, length), or None. Pure."""
    if len(url) > MAX_URL_CHARS:
        return f"a webhook URL is at most {MAX_URL_CHARS} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError as exc:
        return f"not a URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return f"a webhook URL is http:// or https://, not {parts.scheme + '://' if parts.scheme else url!r}"
    if not parts.hostname:
        return "a webhook URL names a host: https://host/path"
    if parts.username or parts.password:
        return "a webhook URL carries no user name or password: put a secret in its path or query instead"
    return None


def address_refusal(host: str, addresses: Iterable[str], allow_private: bool) -> str | None:
    """Why a hook whose `host` resolves to `addresses` may not be called, or None. Pure: every address must
    be public (an IPv4-mapped IPv6 address is judged as the IPv4 one) unless `allow_private`."""
    if allow_private:
        return None
    for text in addresses:
        ip = ipaddress.ip_address(text.split("%")[0])  # an IPv6 zone (fe80::1%eth0) is link-local anyway
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        judged = mapped or ip
        if not judged.is_global or judged.is_multicast:
            return (
                f"{host} resolves to {text}, a loopback, link-local, private or reserved address: a webhook "
                f"reaches public addresses only (an admin may allow such addresses with {ALLOW_SETTING}=true)"
            )
    return None


def resolve(host: str) -> list[str]:
    """The addresses `host` resolves to now (none when it does not resolve)."""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in found})


def refusal(url: str, allow_private: bool) -> str | None:
    """Why a hook at `url` may not be added or called now, or None (a name that does not resolve yet is
    let through: it is checked again before each delivery)."""
    if (why := url_shape_refusal(url)) is not None:
        return why
    host = urlsplit(url).hostname or ""
    return None if allow_private else address_refusal(host, resolve(host), allow_private)


def send(
    client: httpx.Client, url: str, raw: bytes, secret: str, event: str, delivery: str
) -> tuple[int | None, str | None]:
    """POST one signed body: (the receiver's status, or None and why there was no answer; the error text,
    the receiver's answer on a status that is not 2xx)."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "rankzero-webhook",
        notify.SIGNATURE_HEADER: notify.sign(secret, raw),
        notify.EVENT_HEADER: event,
        notify.DELIVERY_HEADER: delivery,
    }
    try:
        r = client.post(url, content=raw, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
    return r.status_code, None if r.is_success else f"HTTP {r.status_code}: {r.text[:200]}"
