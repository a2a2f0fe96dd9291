"""Conformance: every enabled record of the public json-patch-tests suite, in both apply modes."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent_state.jsonpatch import PatchConflictError, PatchFormatError, apply_patch
from tests.jsonpatch.jsonpatch_support import json_equal, snapshot

SUITE = Path(__file__).resolve().parents[2].parent / "shared" / "json-patch-tests"
if not SUITE.is_dir():
    pytest.skip(f"json-patch-tests suite not found at {SUITE}", allow_module_level=True)


def _records() -> tuple[list[Any], int]:
    """One pytest param per enabled record, named after its file, position and comment.

    Records the suite marks `disabled` are known-bad upstream; they are counted, not run.
    """
    params, disabled = [], 0
    for name in ("tests.json", "spec_tests.json"):
        for number, record in enumerate(json.loads((SUITE / name).read_text())):
            if record.get("disabled"):
                disabled += 1
                continue
            comment = re.sub(r"\W+", "-", record.get("comment", "")).strip("-").lower()[:50]
            label = f"{name.removesuffix('.json')}-{number}-{comment or 'no-comment'}"
            params.append(pytest.param(record, id=label))
    return params, disabled


RECORDS, DISABLED = _records()


def test_suite_is_loaded() -> None:
    """Both files are read and few records are disabled, so a broken loader can't pass silently."""
    assert len(RECORDS) + DISABLED == 112  # 95 in tests.json + 17 in spec_tests.json
    assert DISABLED <= 5


@pytest.mark.parametrize("in_place", [False, True], ids=["copy", "in-place"])
@pytest.mark.parametrize("record", RECORDS)
def test_record(record: dict[str, Any], in_place: bool) -> None:
    doc = copy.deepcopy(record["doc"])
    before = snapshot(doc)
    patch_before = copy.deepcopy(record["patch"])
    if "error" in record:
        with pytest.raises((PatchFormatError, PatchConflictError)):
            apply_patch(doc, record["patch"], in_place=in_place)
        assert snapshot(doc) == before, "a failed patch must leave the document exactly as it was"
    else:
        result = apply_patch(doc, record["patch"], in_place=in_place)
        if "expected" in record:
            assert json_equal(result, record["expected"])
        if not in_place:
            assert snapshot(doc) == before, "copy mode must not touch the input"
    assert snapshot(record["patch"]) == snapshot(patch_before), "the patch must not be mutated"
