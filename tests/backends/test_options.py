"""One options parser for storage URLs: every backend refuses an unknown, repeated or
malformed option with a `StorageConfigError` naming it, before any client exists."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent_state import open_storage
from agent_state.backends import StorageConfigError
from agent_state.backends._options import UrlOptions, count, flag, seconds

KNOWN = ("name", "on", "wait", "size", "mode")


def test_options_are_read_by_type() -> None:
    query = UrlOptions("x", "name=a%20b&on=YES&wait=2.5&size=7&mode=Fast", KNOWN)
    assert query.text("name") == "a b"
    assert query.flag("on") is True
    assert query.seconds("wait") == 2.5
    assert query.count("size") == 7
    assert query.text("mode", ("fast", "slow")) == "Fast"


def test_an_option_the_url_does_not_give_reads_as_none() -> None:
    query = UrlOptions("x", "", KNOWN)
    readers = (query.text, query.flag, query.seconds, query.count)
    assert [read("name") for read in readers] == [None, None, None, None]


@pytest.mark.parametrize(
    "query, message",
    [
        ("nme=a", r"unknown x:// option\(s\) 'nme'; known: mode, name, on, size, wait"),
        ("zz=1&aa=2", r"option\(s\) 'aa', 'zz'"),
        ("name=a&name=b", "x:// option 'name' is given twice"),
        ("secret=1", "x:// option 'secret' needs a safer URL"),
    ],
)
def test_unknown_repeated_and_refused_options_raise_when_parsed(query: str, message: str) -> None:
    with pytest.raises(StorageConfigError, match=message):
        UrlOptions("x", query, KNOWN, refused={"secret": "needs a safer URL"})


@pytest.mark.parametrize(
    "query, read, message",
    [
        ("on=maybe", "flag", "x:// option on must be true or false, got 'maybe'"),
        ("wait=soon", "seconds", "option wait must be a positive number of seconds"),
        ("wait=0", "seconds", "positive number of seconds, got '0'"),
        ("wait=inf", "seconds", "positive number of seconds, got 'inf'"),
        ("wait=nan", "seconds", "positive number of seconds, got 'nan'"),
        ("size=0", "count", "x:// option size must be a positive whole number, got '0'"),
        ("size=2.5", "count", "positive whole number, got '2.5'"),
        ("size=-3", "count", "positive whole number, got '-3'"),
        ("size=²", "count", "positive whole number, got '²'"),
    ],
)
def test_a_malformed_value_names_its_option(query: str, read: str, message: str) -> None:
    options = UrlOptions("x", query, KNOWN)
    with pytest.raises(StorageConfigError, match=message):
        getattr(options, read)(query.partition("=")[0])


def test_a_value_outside_its_choices_is_refused() -> None:
    with pytest.raises(StorageConfigError, match="x:// option mode must be fast or slow"):
        UrlOptions("x", "mode=medium", KNOWN).text("mode", ("fast", "slow"))


@pytest.mark.parametrize(
    "check, value",
    [(flag, "2"), (seconds, True), (seconds, -1.0), (seconds, "x"), (count, True), (count, 1.0)],
)
def test_keyword_values_are_checked_like_url_values(
    check: Callable[[str, object], object], value: object
) -> None:
    with pytest.raises(StorageConfigError, match="^timeout must be"):
        check("timeout", value)


def test_keyword_values_of_the_right_type_pass() -> None:
    assert (flag("f", False), seconds("s", 3), count("c", 4)) == (False, 3.0, 4)


@pytest.mark.parametrize(
    "url",
    [
        "redis://h/0?timeout=1&timeout=2",
        "azure-blob://box1?timeout=1&timeout=2",
        "cosmos://db/c?endpoint=https://h:1&key=a2V5&create=true&create=false",
    ],
)
def test_every_backend_refuses_an_option_given_twice(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    option = url.rpartition("&")[2].partition("=")[0]
    with pytest.raises(StorageConfigError, match=f"option '{option}' is given twice"):
        open_storage(url)


@pytest.mark.parametrize(
    "url, message",
    [
        ("redis://h/0?cluster=maybe", "redis:// option cluster must be true or false"),
        ("redis://h/0?pool_size=many", "redis:// option pool_size must be a positive whole"),
        ("azure-blob://box1?create_container=2", "option create_container must be true or"),
        ("cosmos://db/c?endpoint=https://h:1&key=a2V5&timeout=-2", "cosmos:// option timeout"),
        ("cosmos://db/c?endpoint=https://h:1&key=a2V5&create=sure", "cosmos:// option create"),
    ],
)
def test_every_backend_names_a_malformed_option(
    url: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    with pytest.raises(StorageConfigError, match=message):
        open_storage(url)
