"""Differential tests against jsonpatch 1.47 as an oracle: same result, or both refuse the patch.

jsonpatch 1.47 agrees with RFC 6902 on every outcome these generators reach, including strict
`test` typing (true is not 1), so no case is filtered out. It only classifies some failures
differently, which is why outcomes, not exception types, are compared:
- it validates each operation just before applying it, so a malformed later operation is reported
  after an earlier conflict; we reject malformed patches before applying anything;
- it reports pointer syntax errors (e.g. '~2') as JsonPointerException rather than an invalid
  patch, and '-' in a replace path as an invalid patch, though '-' is a valid member name
  (RFC 6901) and only fails against an array, which makes it a conflict.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_state.jsonpatch import ProtocolError, apply_patch, make_patch
from tests.jsonpatch.jsonpatch_support import edited, json_equal, json_values, operations

jsonpatch = pytest.importorskip("jsonpatch")
jsonpointer = pytest.importorskip("jsonpointer")

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ORACLE_ERRORS = (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException)


def oracle_apply(doc: Any, patch: list[dict[str, Any]]) -> tuple[bool, Any]:
    """(succeeded, result) of jsonpatch on private copies of doc and patch."""
    try:
        return True, jsonpatch.apply_patch(copy.deepcopy(doc), copy.deepcopy(patch))
    except ORACLE_ERRORS as exc:
        return False, exc


def our_apply(doc: Any, patch: list[dict[str, Any]], in_place: bool) -> tuple[bool, Any]:
    try:
        return True, apply_patch(copy.deepcopy(doc), patch, in_place=in_place)
    except ProtocolError as exc:
        return False, exc


@st.composite
def docs_and_patches(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    doc = draw(json_values)
    return doc, draw(operations(doc))


@SETTINGS
@given(docs_and_patches(), st.booleans())
def test_apply_agrees_with_the_oracle(
    case: tuple[Any, list[dict[str, Any]]], in_place: bool
) -> None:
    doc, patch = case
    ours_ok, ours = our_apply(doc, patch, in_place)
    theirs_ok, theirs = oracle_apply(doc, patch)
    assert ours_ok == theirs_ok, f"we {'applied' if ours_ok else ours}, jsonpatch {theirs}"
    if ours_ok:
        assert json_equal(ours, theirs)


@SETTINGS
@given(json_values, st.data())
def test_our_diff_applies_under_the_oracle(a: Any, data: st.DataObject) -> None:
    b = data.draw(edited(a))
    ok, result = oracle_apply(a, make_patch(a, b))
    assert ok and json_equal(result, b)


@SETTINGS
@given(json_values, st.data())
def test_oracle_diffs_apply_under_our_engine(a: Any, data: st.DataObject) -> None:
    """jsonpatch's diffs use move operations with shifting array indices; ours must agree."""
    b = data.draw(edited(a))
    patch = jsonpatch.make_patch(a, b).patch
    assert json_equal(apply_patch(a, patch), b)
    assert json_equal(apply_patch(copy.deepcopy(a), patch, in_place=True), b)
