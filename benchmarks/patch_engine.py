"""Benchmark our RFC 6902 engine against jsonpatch (and fastjsonpatch where it runs).

Run from the repository root:  .venv/bin/python benchmarks/jsonpatch.py
Prints applies/s of a 10-operation patch on 1 KB, 100 KB and 1 MB documents, diffs/s and patch
lengths for three diff scenarios, and our speed as a ratio of each other library's. About 20 s.
"""

from __future__ import annotations

import copy
import importlib
import json
import sys
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

from agent_state.jsonpatch import apply_patch, make_patch

BUDGET = 0.4  # seconds of timed calls per measurement (at least MIN_RUNS calls)
MIN_RUNS = 3
Patch = list[dict[str, Any]]


def import_fastjsonpatch() -> tuple[ModuleType | None, str]:
    """fastjsonpatch, or None with the reason it can't be measured here."""
    try:
        return importlib.import_module("fastjsonpatch"), ""
    except ImportError:
        if sys.version_info < (3, 12):
            return None, "n/a (needs Python 3.12)"
        return None, "n/a (not installed)"


def rate(call: Callable[[], object], per_call: int = 1) -> float:
    """Calls per second of call (times per_call), after one warm-up call."""
    call()
    runs = 0
    start = time.perf_counter()
    while True:
        call()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= BUDGET and runs >= MIN_RUNS:
            return runs * per_call / elapsed


def record(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "name": f"user{i}",
        "email": f"user{i}@example.org",
        "score": i * 0.5,
        "tags": ["alpha", "beta"],
        "active": i % 3 == 0,
        "profile": {"city": "Lisbon", "age": 20 + i % 50},
    }


def document(size: int) -> dict[str, Any]:
    """A state-like document of about size bytes of JSON: some settings and many records."""
    count = max(10, size // len(json.dumps(record(0))))
    return {
        "meta": {"version": 1, "name": "bench"},
        "settings": {"theme": "light", "language": "en"},
        "users": [record(i) for i in range(count)],
    }


def patch_and_inverse(doc: dict[str, Any]) -> tuple[Patch, Patch]:
    """Ten operations of every kind on distinct fields, and the ten that undo them."""
    n = len(doc["users"])
    i = [k * n // 10 for k in range(10)]
    users = doc["users"]
    patch: Patch = [
        {"op": "replace", "path": "/meta/version", "value": 2},
        {"op": "add", "path": f"/users/{i[1]}/flag", "value": True},
        {"op": "remove", "path": f"/users/{i[2]}/email"},
        {"op": "replace", "path": f"/users/{i[3]}/score", "value": 0.25},
        {"op": "add", "path": f"/users/{i[4]}/tags/0", "value": "vip"},
        {"op": "move", "from": f"/users/{i[5]}/name", "path": f"/users/{i[5]}/display"},
        {"op": "copy", "from": f"/users/{i[6]}/profile", "path": f"/users/{i[6]}/saved"},
        {"op": "test", "path": f"/users/{i[7]}/id", "value": i[7]},
        {"op": "add", "path": "/users/-", "value": record(-1)},
        {"op": "replace", "path": "/settings/theme", "value": "dark"},
    ]
    inverse: Patch = [
        {"op": "replace", "path": "/settings/theme", "value": "light"},
        {"op": "remove", "path": f"/users/{n}"},
        {"op": "test", "path": f"/users/{i[7]}/id", "value": i[7]},
        {"op": "remove", "path": f"/users/{i[6]}/saved"},
        {"op": "move", "from": f"/users/{i[5]}/display", "path": f"/users/{i[5]}/name"},
        {"op": "remove", "path": f"/users/{i[4]}/tags/0"},
        {"op": "replace", "path": f"/users/{i[3]}/score", "value": users[i[3]]["score"]},
        {"op": "add", "path": f"/users/{i[2]}/email", "value": users[i[2]]["email"]},
        {"op": "remove", "path": f"/users/{i[1]}/flag"},
        {"op": "replace", "path": "/meta/version", "value": 1},
    ]
    return patch, inverse


def in_place_round(
    apply: Callable[[Any, Patch], Any], doc: Any, patch: Patch, undo: Patch
) -> Callable[[], None]:
    """One timed unit for in-place engines: the patch and then its inverse (two applies).

    In-place applies change the document, so timing the same patch over and over would measure
    failures or a drifting document. Applying the exact inverse after each patch returns the
    document to its starting state (up to member order), so every apply starts from the same
    state, and both halves cost the same kind of work; the rate is counted per apply.
    """

    def call() -> None:
        apply(doc, patch)
        apply(doc, undo)

    return call


def bench_apply(jsonpatch: ModuleType, fast: ModuleType | None, fast_note: str) -> None:
    print("Apply a 10-operation patch (all six ops), applies/s, higher is better")
    header = (
        f"{'doc':>6} {'bytes':>9} | {'ours copy':>10} {'ours in-pl':>10} | "
        f"{'jp copy':>9} {'jp in-pl':>9} | {'fast in-pl':>24} |"
        f" {'copy/jp':>8} {'in-pl/jp':>8} {'in-pl/jp-in-pl':>14}"
    )
    print(header)
    print("-" * len(header))
    for label, size in (("1 KB", 1_000), ("100 KB", 100_000), ("1 MB", 1_000_000)):
        doc = document(size)
        patch, undo = patch_and_inverse(doc)
        expected = jsonpatch.apply_patch(doc, patch)
        assert apply_patch(doc, patch) == expected, "engines disagree"

        ours_copy = rate(partial(apply_patch, doc, patch))
        mine = copy.deepcopy(doc)
        ours_in_place = rate(
            in_place_round(lambda d, p: apply_patch(d, p, in_place=True), mine, patch, undo), 2
        )
        assert mine == doc, "the inverse patch did not restore the document"
        jp_copy = rate(partial(jsonpatch.apply_patch, doc, patch))
        theirs = copy.deepcopy(doc)
        jp_in_place = rate(
            in_place_round(
                lambda d, p: jsonpatch.apply_patch(d, p, in_place=True, atomic=True),
                theirs,
                patch,
                undo,
            ),
            2,
        )
        if fast is None:
            fast_cell = fast_note
        else:
            fasts = copy.deepcopy(doc)
            fast_in_place = rate(
                in_place_round(
                    lambda d, p: fast.apply_patch(d, p, in_place=True), fasts, patch, undo
                ),
                2,
            )
            fast_cell = f"{fast_in_place:,.0f} ({ours_in_place / fast_in_place:.2f}x)"
        print(
            f"{label:>6} {len(json.dumps(doc)):>9,} |"
            f" {ours_copy:>10,.0f} {ours_in_place:>10,.0f} | "
            f"{jp_copy:>9,.0f} {jp_in_place:>9,.0f} | {fast_cell:>24} |"
            f" {ours_copy / jp_copy:>7,.1f}x {ours_in_place / jp_copy:>7,.1f}x"
            f" {ours_in_place / jp_in_place:>13,.1f}x"
        )
    print(
        "copy = the input is never changed (ours: path copying; jsonpatch: deepcopy);"
        " in-pl = in place, atomic (jsonpatch atomic=True)\n"
        "copy/jp and in-pl/jp: ours vs jsonpatch's default (copy) apply;"
        " in-pl/jp-in-pl: in place vs in place; fast in-pl: fastjsonpatch (ours/it)\n"
    )


def edited_document(base: dict[str, Any]) -> tuple[Patch, dict[str, Any]]:
    """Five typical changes to a 100 KB document (edit, add, remove, append, rename)."""
    n = len(base["users"])
    changes: Patch = [
        {"op": "replace", "path": f"/users/{n // 5}/score", "value": -1.5},
        {"op": "add", "path": f"/users/{n // 3}/nickname", "value": "neo"},
        {"op": "remove", "path": f"/users/{n // 2}/email"},
        {"op": "add", "path": f"/users/{2 * n // 3}/tags/-", "value": "gamma"},
        {"op": "move", "from": "/settings/language", "path": "/settings/locale"},
    ]
    return changes, apply_patch(base, changes)


def diff_scenarios() -> list[tuple[str, Any, Any]]:
    """(name, a, b) where b shares a's unchanged subtrees, as copy-on-write state does."""
    doc = document(100_000)
    _, doc_b = edited_document(doc)
    records = [record(i) for i in range(10_000)]
    edits = [
        {"op": "replace", "path": f"/{i}/score", "value": -1.0} for i in range(37, 10_000, 100)
    ]
    return [
        ("100 KB doc, 5 changes", doc, doc_b),
        ("10,000 records, 100 edits", records, apply_patch(records, edits)),
        ("10,000 records, front insert", records, [record(-1), *records]),
    ]


def bench_diff(jsonpatch: ModuleType, fast: ModuleType | None, fast_note: str) -> None:
    print("Diff (make_patch), diffs/s, higher is better; ops = patch length, lower is better")
    header = (
        f"{'scenario':<30} {'b':<11} | {'ours':>8} {'jsonpatch':>9} {'ratio':>7} |"
        f" {'ops ours':>8} {'ops jp':>6} | {'fastjsonpatch':>24}"
    )
    print(header)
    print("-" * len(header))
    for name, a, shared_b in diff_scenarios():
        independent_b = json.loads(json.dumps(shared_b))
        for kind, b in (("shared", shared_b), ("independent", independent_b)):
            ours_patch = make_patch(a, b)
            assert apply_patch(a, ours_patch) == b, "our diff does not reproduce b"
            their_patch = jsonpatch.make_patch(a, b).patch
            ours = rate(partial(make_patch, a, b))
            theirs = rate(partial(jsonpatch.make_patch, a, b))
            if fast is None:
                fast_cell = fast_note
            else:
                fast_rate = rate(partial(fast.make_patch, a, b))
                fast_cell = f"{fast_rate:,.0f} ({ours / fast_rate:.2f}x)"
            print(
                f"{name:<30} {kind:<11} | {ours:>8,.0f} {theirs:>9,.1f} {ours / theirs:>6,.1f}x |"
                f" {len(ours_patch):>8} {len(their_patch):>6} | {fast_cell:>24}"
            )
    print(
        "shared: b reuses a's unchanged subtrees (copy-on-write); independent: b is a fresh"
        " json.loads copy\nratio = ours / jsonpatch.make_patch\n"
    )


def main() -> None:
    jsonpatch = importlib.import_module("jsonpatch")
    fast, fast_note = import_fastjsonpatch()
    print(
        f"Python {sys.version.split()[0]}, jsonpatch {jsonpatch.__version__},"
        f" fastjsonpatch {getattr(fast, '__version__', fast_note)}\n"
    )
    bench_apply(jsonpatch, fast, fast_note)
    bench_diff(jsonpatch, fast, fast_note)


if __name__ == "__main__":
    main()
