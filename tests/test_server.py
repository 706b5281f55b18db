"""`tempo serve`'s composition root: how it sizes the connection bound to the
process's open-file limit (docs/operations.md "Limits")."""

import resource

import pytest

from tempo import limits, server


class FakeLimits:
    def __init__(self, soft: int, hard: int, *, may_raise: bool = True):
        self.soft, self.hard, self.may_raise = soft, hard, may_raise
        self.set_to: tuple[int, int] | None = None

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def setrlimit(self, which: int, value: tuple[int, int]) -> None:
        if not self.may_raise:
            raise ValueError("not allowed")
        self.set_to = value
        self.soft = value[0]


@pytest.fixture
def fake(monkeypatch):
    def install(soft: int, hard: int, **kwargs) -> FakeLimits:
        fake_limits = FakeLimits(soft, hard, **kwargs)
        monkeypatch.setattr(server.resource, "getrlimit", fake_limits.getrlimit)
        monkeypatch.setattr(server.resource, "setrlimit", fake_limits.setrlimit)
        return fake_limits

    return install


def test_a_high_enough_limit_is_left_alone(fake):
    limits_now = fake(100_000, 100_000)
    assert server._connections_max(4096) == 4096
    assert limits_now.set_to is None


def test_a_low_soft_limit_is_raised_towards_the_hard_one(fake):
    limits_now = fake(1024, 65536)
    assert server._connections_max(4096) == 4096
    assert limits_now.set_to == (4096 + limits.fds_reserved, 65536)


def test_a_low_hard_limit_lowers_the_bound_to_fit(fake, caplog):
    limits_now = fake(1024, 2048)
    assert server._connections_max(4096) == 2048 - limits.fds_reserved
    assert limits_now.set_to == (2048, 2048)
    assert f"at most {2048 - limits.fds_reserved} connections instead of 4096" in caplog.text


def test_a_limit_that_cannot_be_raised_lowers_the_bound(fake):
    fake(1024, 65536, may_raise=False)
    assert server._connections_max(4096) == 1024 - limits.fds_reserved
