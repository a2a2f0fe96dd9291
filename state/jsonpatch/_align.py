"""Sequence alignment for list diffs: Myers' O((N+M)D) shortest edit script on hashable keys."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

Run = tuple[int, int, int, int]
Runs = list[Run]
Pairs = list[tuple[int, int]]


def differing_runs(a: Sequence[Hashable], b: Sequence[Hashable], max_edits: int) -> Runs | None:
    """Runs (i1, i2, j1, j2) where b[j1:j2] replaces a[i1:i2] around an LCS; None past max_edits."""
    common = Counter(a) & Counter(b)
    if len(a) + len(b) - 2 * sum(common.values()) > max_edits:
        return None  # even a perfect alignment would need too many edits
    matches = _matches(a, b, max_edits)
    if matches is None:
        return None
    runs = []
    i = j = 0
    for x, y in matches + [(len(a), len(b))]:
        if x != i or y != j:
            runs.append((i, x, j, y))
        i, j = x + 1, y + 1
    return runs


def _matches(a: Sequence[Hashable], b: Sequence[Hashable], max_edits: int) -> Pairs | None:
    """Matched index pairs of a shortest edit script (Myers 1986, greedy forward pass)."""
    n, m = len(a), len(b)
    offset = max_edits + 1
    furthest = [0] * (2 * max_edits + 3)  # furthest x reached on each diagonal k = x - y
    trace = []
    for d in range(max_edits + 1):
        trace.append(furthest[:])
        for k in range(-d, d + 1, 2):
            here = k + offset
            if k == -d or (k != d and furthest[here - 1] < furthest[here + 1]):
                x = furthest[here + 1]
            else:
                x = furthest[here - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            furthest[here] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m, offset)
    return None


def _backtrack(trace: list[list[int]], x: int, y: int, offset: int) -> Pairs:
    """Walk the saved frontiers back from the end, collecting the diagonal (matching) steps."""
    pairs = []
    for d in range(len(trace) - 1, -1, -1):
        furthest = trace[d]
        k = x - y
        here = k + offset
        if k == -d or (k != d and furthest[here - 1] < furthest[here + 1]):
            previous_k = k + 1
        else:
            previous_k = k - 1
        previous_x = furthest[previous_k + offset]
        previous_y = previous_x - previous_k
        while x > previous_x and y > previous_y:
            x -= 1
            y -= 1
            pairs.append((x, y))
        x, y = previous_x, previous_y
    pairs.reverse()
    return pairs
