"""The token bucket behind claim and create rates."""

from tempo.rate import TokenBucket


def test_a_bucket_starts_full_and_refills_at_its_rate_up_to_its_burst():
    bucket = TokenBucket(10, 5, now_ms=0)
    assert bucket.available(0) == 5
    bucket.take(0, 5)
    assert bucket.available(0) == 0
    assert bucket.wait_ms(0, 1) == 100
    assert bucket.available(99) == 0
    assert bucket.available(100) == 1
    assert bucket.available(10_000) == 5  # never more than the burst


def test_a_take_larger_than_the_bucket_is_a_debt_paid_off_first():
    bucket = TokenBucket(2, 4, now_ms=0)
    assert bucket.wait_ms(0, 10) == 0  # a full bucket lets a large batch go
    bucket.take(0, 10)
    assert bucket.available(1000) == 0
    assert bucket.wait_ms(1000, 1) == 2500  # 6 owed + 1 at 2/s: 3.5 s from 0
    assert bucket.available(3500) == 1


def test_a_clock_stepped_back_neither_adds_nor_takes():
    bucket = TokenBucket(1, 2, now_ms=10_000)
    bucket.take(10_000, 2)
    assert bucket.available(5_000) == 0
    assert bucket.available(11_000) == 1


def test_fractional_rates_come_out_whole():
    bucket = TokenBucket(0.5, 1, now_ms=0)
    bucket.take(0, 1)
    assert bucket.wait_ms(0, 1) == 2000
    assert bucket.available(1999) == 0 and bucket.available(2000) == 1
