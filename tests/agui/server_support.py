"""Helpers of the AG-UI endpoint tests: POST to an ASGI app and keep the raw response bytes,
check recorded streams with the `ag-ui-validate` CLI, and snapshot a whole store."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from agent_state.agui import iter_sse_events
from agent_state.backends import Storage

URL = "http://agui.test/"
FEATURES = ("shared-state",)
JSON_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}

# The CLI's own entry point (what the `ag-ui-validate` executable runs), once per recorded
# file, in one long-lived process: each request line names the features and the files, each
# answer line holds every file's exit code and JSON report.
_DRIVER = """
import contextlib, io, json, sys
from ag_ui_validate.cli import main
answer = sys.stdout
for line in sys.stdin:
    request, reports = json.loads(line), []
    for path in request["paths"]:
        out, code = io.StringIO(), None
        sys.argv = ["ag-ui-validate", "--features", request["features"], "--json", path]
        with contextlib.redirect_stdout(out):
            try:
                main()
            except SystemExit as exc:
                code = exc.code
        text = out.getvalue()
        reports.append({"exit": code, "report": json.loads(text) if text else None})
    answer.write(json.dumps(reports) + "\\n")
    answer.flush()
"""


class StreamValidator:
    """A running `ag-ui-validate` process that checks recorded streams, each on its own."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None

    def validate(
        self, streams: Sequence[bytes], features: Sequence[str] = FEATURES
    ) -> list[dict[str, Any]]:
        """Each stream's `ag-ui-validate --json` report and exit code."""
        if not streams:
            return []
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-u", "-c", _DRIVER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        with tempfile.TemporaryDirectory(prefix="agui-streams-") as folder:
            paths = []
            for index, raw in enumerate(streams):
                path = Path(folder) / f"stream-{index:04d}.sse"
                path.write_bytes(raw)
                paths.append(str(path))
            process.stdin.write(json.dumps({"features": ",".join(features), "paths": paths}))
            process.stdin.write("\n")
            process.stdin.flush()
            answer = process.stdout.readline()
        assert answer, f"the validator process ended (exit {process.poll()})"
        reports: list[dict[str, Any]] = json.loads(answer)
        assert len(reports) == len(streams)
        return reports

    def close(self) -> None:
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            self._process.wait(timeout=30)
            self._process = None


VALIDATOR = StreamValidator()
"""The shared validator process (started on first use; `close()` it at the end)."""


@dataclass
class Reply:
    """One HTTP response of the endpoint, its body as it came over the wire."""

    status: int
    content_type: str | None
    raw: bytes

    @property
    def streamed(self) -> bool:
        return self.status == 200 and (self.content_type or "").startswith("text/event-stream")

    @property
    def events(self) -> list[dict[str, Any]]:
        """The stream's events in wire form (camelCase JSON objects), in order."""
        assert self.streamed, f"HTTP {self.status}: {self.raw[:300]!r}"
        return list(iter_sse_events([self.raw]))

    @property
    def types(self) -> list[str]:
        return [event["type"] for event in self.events]

    @property
    def detail(self) -> str:
        """The refusal's `detail` (a JSON error body)."""
        assert self.status != 200, "the run was not refused"
        assert (self.content_type or "").startswith("application/json"), self.content_type
        body = json.loads(self.raw)
        assert set(body) == {"detail"} and isinstance(body["detail"], str), body
        return str(body["detail"])

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["type"] == kind]


@dataclass
class Poster:
    """POSTs to an ASGI app as given users; every event stream it receives is kept in
    `streams` (raw bytes) for `assert_valid_streams`."""

    app: Any
    streams: list[bytes] = field(default_factory=list)

    async def send(
        self,
        body: Mapping[str, Any] | bytes | AsyncIterator[bytes],
        *,
        user: str | None = "ada",
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """Send `body` (a dict is sent as JSON as is: no model in between, so malformed
        input reaches the server); `user` goes in the `x-user` header (None: no header)."""
        sent = {**JSON_HEADERS, **(headers or {})}
        if user is not None:
            sent["x-user"] = user
        content = orjson.dumps(body) if isinstance(body, Mapping) else body
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, timeout=30) as client:
            if method == "POST":
                response = await client.post(URL, content=content, headers=sent)
            else:
                response = await client.request(method, URL, headers=sent)
        reply = Reply(response.status_code, response.headers.get("content-type"), response.content)
        if reply.status == 200:
            self.streams.append(reply.raw)
        return reply

    async def run(self, body: Mapping[str, Any], *, user: str | None = "ada") -> Reply:
        """`send`, asserting the run was streamed (not refused)."""
        reply = await self.send(body, user=user)
        assert reply.streamed, f"HTTP {reply.status} {reply.content_type}: {reply.raw[:400]!r}"
        return reply


def validate_streams(
    streams: Sequence[bytes], features: Sequence[str] = FEATURES
) -> list[dict[str, Any]]:
    """Each stream's `ag-ui-validate --json` report and exit code (the shared process)."""
    return VALIDATOR.validate(streams, features)


def stream_findings(streams: Sequence[bytes], features: Sequence[str] = FEATURES) -> list[str]:
    """One line per error-level finding (or failed validation) of any of the streams."""
    findings = []
    for index, outcome in enumerate(validate_streams(streams, features)):
        report = outcome["report"]
        if outcome["exit"] not in (0, None) or report is None:
            findings.append(f"stream {index}: exit {outcome['exit']}")
        for diagnostic in (report or {}).get("diagnostics", []):
            if diagnostic["severity"] == "error":
                findings.append(
                    f"stream {index} event {diagnostic.get('eventIndex')}: "
                    f"{diagnostic['rule']} {diagnostic['message']}"
                )
        if report is not None and report["summary"]["errors"] and not findings:
            findings.append(f"stream {index}: {report['summary']['errors']} errors")
    return findings


def assert_valid_streams(streams: Sequence[bytes], features: Sequence[str] = FEATURES) -> None:
    """Every stream passes `ag-ui-validate --features shared-state` with no error."""
    findings = stream_findings(streams, features)
    assert not findings, "ag-ui-validate found errors:\n" + "\n".join(findings)


async def store_contents(storage: Storage) -> dict[str, tuple[Any, str | None]]:
    """Every stored key with its value and version: equal before and after means nothing
    was written."""
    keys = [key async for key in storage.list("")]
    items = await storage.read(keys)
    return {key: (item.value, item.etag) for key, item in items.items()}


def changed_keys(
    before: Mapping[str, tuple[Any, str | None]], after: Mapping[str, tuple[Any, str | None]]
) -> set[str]:
    """The keys written, created or deleted between two `store_contents`."""
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
