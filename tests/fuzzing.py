"""Hypothesis strategies shared by the decoder fuzz tests: random bytes and
valid encodings mutated by bit flips, truncation and extension."""

from hypothesis import strategies as st

# Examples per decoder fuzz test: all of them together stay well under a
# minute on two shared cores. The tests are derandomized, so CI tries the
# same cases every run; raise this locally to explore further.
examples_max = 300


@st.composite
def mutated(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid encoding with one to four bit flips, or cut short, or with
    bytes appended, or random bytes spliced in."""
    data = bytearray(draw(valid))
    how = draw(st.sampled_from(["flip", "truncate", "extend", "splice"]))
    if how == "flip" and data:
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= 1 << draw(st.integers(0, 7))
    elif how == "truncate":
        del data[draw(st.integers(0, len(data))):]
    elif how == "extend":
        data += draw(st.binary(min_size=1, max_size=16))
    else:
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def garbage(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Random bytes, or a mutated valid encoding."""
    return st.one_of(st.binary(max_size=256), mutated(valid))
