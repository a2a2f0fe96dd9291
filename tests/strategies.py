"""Hypothesis strategies the test modules share."""

from __future__ import annotations

from hypothesis import strategies as st

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4)
)
"""JSON scalars that round-trip exactly: integers within 2**53, finite floats, short text."""
