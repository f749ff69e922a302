"""Building the Redis client and turning its errors into one-line messages.

redis-py retries failed commands by default (10 times, exponential backoff). That would
re-run non-idempotent scripts behind our back and stall a heartbeat past its lease, so the
client here never retries: callers retry themselves, with idempotent scripts (tokens).
"""

from __future__ import annotations

import urllib.parse

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from scaler.research.model import InputError, redact_url

# Worth retrying: the server restarts, loads its AOF, or the network blips.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
)
_SCHEMES = ("redis", "rediss", "unix")


def connect(url: str, *, timeout_s: float = 5.0) -> redis.Redis:
    """A client for `url` (redis://[user:password@]host:port/db, rediss://, unix://).

    Connects lazily: the first command reports an unreachable server or a wrong password.
    Raises InputError for a URL that cannot be a Redis address.
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        parts = urllib.parse.urlsplit("")
    if parts.scheme not in _SCHEMES:
        raise InputError(
            f"--redis {redact_url(url)!r} is not a Redis URL (redis://[:password@]host:port/db)"
        )
    # redis-py reads a path that is not a number as database 0, silently: a typo there would
    # count (or fill) database 0's queue instead of the one meant.
    db = urllib.parse.unquote(parts.path).replace("/", "")
    if parts.scheme != "unix" and db and not (db.isascii() and db.isdigit()):
        raise InputError(
            f"--redis {redact_url(url)}: the path {parts.path!r} is not a database number "
            "(redis://[:password@]host:port/db)"
        )
    try:
        return redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
    except ValueError as e:
        raise InputError(f"--redis {redact_url(url)}: {_scrub(str(e), url)}") from None


def _scrub(msg: str, url: str) -> str:
    """Remove the password from an error message, should a library ever include it."""
    try:
        pw = urllib.parse.urlsplit(url).password
    except ValueError:
        pw = None
    if pw:
        msg = msg.replace(pw, "***").replace(urllib.parse.quote(pw, safe=""), "***")
    return " ".join(msg.split())[:300]


def is_auth_error(e: BaseException) -> bool:
    if isinstance(e, redis.exceptions.AuthenticationError | redis.exceptions.NoPermissionError):
        return True
    text = str(e)
    return isinstance(e, redis.exceptions.ResponseError) and text.startswith(
        ("NOAUTH", "WRONGPASS", "NOPERM")
    )


def describe(e: BaseException, url: str) -> str:
    """One line for a Redis failure, naming the server but never its password."""
    where = redact_url(url)
    # AuthenticationError is a ConnectionError subclass: test it first.
    if is_auth_error(e):
        return f"Redis at {where} refused the credentials (wrong or missing password/user)"
    if isinstance(e, redis.exceptions.BusyLoadingError):
        return f"Redis at {where} is loading its data set; try again"
    if isinstance(e, redis.exceptions.TimeoutError):
        return f"Redis at {where} did not answer in time"
    if isinstance(e, redis.exceptions.ConnectionError):
        return f"cannot reach Redis at {where}: {_scrub(str(e), url)}"
    return f"Redis at {where}: {_scrub(str(e), url)}"
