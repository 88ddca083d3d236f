"""The local authorizer remembers a verified dev token for the rest of the current second only,
and never past its expiry."""

from __future__ import annotations

import pytest

from leasefence_tools.local import tokens

SECRET = "token-cache-secret-0123456789abcdef"


@pytest.fixture
def clock(monkeypatch):
    now = [1_900_000_000.2]
    monkeypatch.setattr(tokens.time, "time", lambda: now[0])
    monkeypatch.setattr(tokens, "_verified", (0, {}))
    import jwt

    monkeypatch.setattr(jwt.api_jwt, "datetime", _Frozen(now))  # PyJWT's clock: the same
    return now


def test_a_token_expires_on_time_though_it_was_verified_a_moment_before(clock, monkeypatch):
    token = tokens.mint("t", ttl_seconds=1, secret=SECRET, now=clock[0] - 0.2)  # exp: 1_900_000_001
    import jwt

    calls = []
    real = jwt.decode
    monkeypatch.setattr(jwt, "decode", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = tokens.verify(token, SECRET)
    first["tenant_id"] = "changed"  # a copy: the cache keeps its own
    clock[0] += 0.7  # the same second: verified once
    assert tokens.verify(token, SECRET)["tenant_id"] == "t"
    assert len(calls) == 1
    clock[0] += 0.2  # the next second, exp <= now: expired, as PyJWT decides
    with pytest.raises(tokens.TokenError, match="expired"):
        tokens.verify(token, SECRET)
    with pytest.raises(tokens.TokenError):
        tokens.verify(token, "another-secret-0123456789abcdef-0123")


def test_a_token_with_a_fractional_expiry_is_checked_every_time(clock, monkeypatch):
    token = tokens.mint("t", secret=SECRET, now=clock[0], extra_claims={"exp": clock[0] + 1.5})
    assert tokens.verify(token, SECRET)["tenant_id"] == "t"
    assert tokens._verified[1] == {}
    clock[0] += 0.9  # past its expiry (PyJWT reads 1_900_000_001.7 as 1_900_000_001)
    with pytest.raises(tokens.TokenError, match="expired"):
        tokens.verify(token, SECRET)


class _Frozen:
    """``datetime.datetime`` for PyJWT's clock, reading the test's."""

    def __init__(self, clock):
        import datetime

        self._clock, self._real = clock, datetime.datetime

    def now(self, tz=None):
        return self._real.fromtimestamp(self._clock[0], tz=tz)

    def __getattr__(self, name):
        return getattr(self._real, name)
