"""Hand-written hostile input against a real guardd.

Every hostile request gets a clear 4xx with the ``{error, code}`` body (or,
where the HTTP layer refuses bytes that are not HTTP at all, a bare 400 or
431 from Hypercorn), never a 500; the server stays healthy after each test
(checked by an autouse fixture), and a refused request writes nothing.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import httpx
import pytest

from agents_runtime.core import commands as c
from agents_runtime.log.canonical import MAX_DEPTH
from tests.agents_runtime.support import policy, running_registry
from tests.support.server import GuardServer

MIB = 1024 * 1024
POLICY: dict[str, Any] = {
    "budget": 900000,
    "scar_limit": 50,
    "tools": {"search": {"cost": 1}, "send_email": {"requires_approval": True}},
}
AGENT = "target"
ACTIONS = f"/v1/agents/{AGENT}/actions"


@attrs.frozen
class Raw:
    status: int
    headers: dict[str, str]
    body: bytes


@attrs.define
class Hostile:
    server: GuardServer
    admin: httpx.Client
    agent_token: str

    def post(self, path: str, body: bytes, **headers: str) -> httpx.Response:
        return self.admin.post(path, content=body, headers=headers)

    def raw(self, head: bytes, body: bytes = b"") -> Raw:
        """Send ``head`` (request line and headers, no final CRLF) and ``body``
        as they are, with no client-side checks; read the whole answer."""
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as sock:
            sock.sendall(head + b"\r\nConnection: close\r\n\r\n" + body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        header_block, _, payload = data.partition(b"\r\n\r\n")
        status_line, *lines = header_block.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return Raw(int(status_line.split()[1]), headers, payload)

    def request(self, method: str, path: str, token: str, body: Any = None) -> Raw:
        """A request whose path reaches guardd byte for byte (httpx would
        normalise "..", "%2e" and the like)."""
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Length: {len(data)}"
        )
        return self.raw(head.encode(), data)

    def head_seq(self) -> int:
        status = self.admin.get(f"/v1/agents/{AGENT}")
        assert status.status_code == 200, status.text
        return int(status.json()["head"]["seq"])


def assert_error(response: httpx.Response | Raw, status: int, code: str) -> str:
    """The answer is ``status`` with exactly ``{error, code}``; returns the message."""
    if isinstance(response, Raw):
        actual, content_type = response.status, response.headers.get("content-type")
        body = json.loads(response.body)
    else:
        actual, content_type = response.status_code, response.headers.get("content-type")
        body = response.json()
    assert actual == status, body
    assert content_type == "application/json"
    assert set(body) == {"error", "code"}, body
    assert body["code"] == code, body
    assert isinstance(body["error"], str)
    assert body["error"]
    assert "Traceback" not in body["error"]
    return str(body["error"])


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    server = GuardServer(tmp_path_factory.mktemp("hostile") / "guard-data").start()
    try:
        with server.client(server.admin_token) as admin:
            created = admin.post("/v1/agents", json={"agent_id": AGENT, "policy": POLICY})
            assert created.status_code == 201, created.text
            yield Hostile(server, admin, created.json()["token"])
    finally:
        server.kill()


@pytest.fixture(autouse=True)
def still_healthy(hostile: Hostile) -> Iterator[None]:
    yield
    assert hostile.admin.get("/healthz").status_code == 200
    assert hostile.admin.get(f"/v1/agents/{AGENT}").json()["alive"] is True


@pytest.fixture
def writes_nothing(hostile: Hostile) -> Iterator[None]:
    """A refused request uses no action ID and writes no record."""
    before = hostile.head_seq()
    yield
    assert hostile.head_seq() == before


def _action(input_json: bytes) -> bytes:
    return b'{"tool": "search", "input": ' + input_json + b"}"


def _nested(depth: int) -> bytes:
    """An action body nested ``depth`` levels deep in all (the body object is level 1)."""
    inner = depth - 1
    return _action(b"[" * inner + b"]" * inner)


# -- JSON that is not acceptable ----------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"tool": "search", "tool": "other"}', id="top-level"),
        pytest.param(_action(b'{"a": 1, "a": 2}'), id="in-input"),
        pytest.param(_action(b'[{"k": {"x": 1, "y": 2, "x": 3}}]'), id="deep-in-input"),
    ],
)
def test_duplicate_keys_are_refused(hostile: Hostile, writes_nothing: None, body: bytes) -> None:
    message = assert_error(hostile.post(ACTIONS, body), 400, "bad_request")
    assert "duplicate key" in message


def test_duplicate_key_in_a_policy_is_refused(hostile: Hostile) -> None:
    body = (
        b'{"agent_id": "dup", "policy": {"budget": 1, "budget": 2, "scar_limit": 1, "tools": {}}}'
    )
    assert_error(hostile.post("/v1/agents", body), 400, "bad_request")
    assert hostile.admin.get("/v1/agents/dup").status_code == 404


def test_nesting_past_max_depth_is_refused(hostile: Hostile, writes_nothing: None) -> None:
    message = assert_error(hostile.post(ACTIONS, _nested(MAX_DEPTH + 1)), 400, "bad_request")
    assert message.endswith(f"nested deeper than {MAX_DEPTH} levels")


def test_nesting_far_past_max_depth_is_refused_quickly(
    hostile: Hostile, writes_nothing: None
) -> None:
    deep = b"[" * 500_000 + b"]" * 500_000
    assert_error(hostile.post(ACTIONS, deep), 400, "bad_request")
    assert_error(hostile.post(ACTIONS, b"{" * MIB), 400, "bad_request")


def test_nesting_at_max_depth_is_accepted_and_logged(hostile: Hostile) -> None:
    answer = hostile.post(ACTIONS, _nested(MAX_DEPTH))
    assert answer.status_code == 200, answer.text
    action = hostile.admin.get(f"{ACTIONS}/{answer.json()['action_id']}").json()
    depth, value = 1, action["input"]
    while value:
        depth, value = depth + 1, value[0]
    assert depth == MAX_DEPTH - 1
    assert hostile.admin.get(f"/v1/agents/{AGENT}/verify").json()["ok"] is True


@pytest.mark.parametrize(
    "number",
    [
        pytest.param(b"1e400", id="1e400"),
        pytest.param(b"-1e400", id="minus-1e400"),
        pytest.param(b"9007199254740992", id="2^53"),
        pytest.param(b"-9007199254740992", id="minus-2^53"),
        pytest.param(b"123456789012345678901234567890", id="30-digits"),
        pytest.param(b"1e20", id="whole-double-beyond-2^53"),
        pytest.param(b"NaN", id="NaN"),
        pytest.param(b"Infinity", id="Infinity"),
        pytest.param(b"-Infinity", id="minus-Infinity"),
        pytest.param(b"1" * 5000, id="5000-digits"),
    ],
)
def test_numbers_rfc8785_cannot_write_are_refused(
    hostile: Hostile, writes_nothing: None, number: bytes
) -> None:
    assert_error(hostile.post(ACTIONS, _action(number)), 400, "bad_request")
    assert_error(hostile.post(ACTIONS, _action(b'[1, {"n": ' + number + b"}]")), 400, "bad_request")


def test_largest_safe_integer_is_accepted(hostile: Hostile) -> None:
    answer = hostile.post(ACTIONS, _action(b"9007199254740991"))
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(_action(b'"\\ud800"'), id="high-surrogate"),
        pytest.param(_action(b'"\\uDFFF"'), id="low-surrogate-upper-hex"),
        pytest.param(_action(b'"ok \\udc00 then text"'), id="inside-text"),
        pytest.param(_action(b'{"\\ud800": 1}'), id="in-a-key"),
        pytest.param(b'{"tool": "\\ud83d"}', id="in-the-tool"),
        pytest.param(_action(b'"\\ude00\\ud83d"'), id="pair-in-wrong-order"),
    ],
)
def test_lone_surrogates_are_refused(hostile: Hostile, writes_nothing: None, body: bytes) -> None:
    message = assert_error(hostile.post(ACTIONS, body), 400, "bad_request")
    assert "surrogate" in message


def test_an_escaped_surrogate_pair_is_accepted(hostile: Hostile) -> None:
    answer = hostile.post(ACTIONS, _action(b'"\\ud83d\\ude00"'))
    assert answer.status_code == 200, answer.text
    assert hostile.admin.get(f"{ACTIONS}/{answer.json()['action_id']}").json()["input"] == "😀"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[]", id="array"),
        pytest.param(b'[{"tool": "search"}]', id="array-of-the-body"),
        pytest.param(b'"x"', id="string"),
        pytest.param(b"1", id="number"),
        pytest.param(b"null", id="null"),
        pytest.param(b"true", id="true"),
        pytest.param(b"", id="empty"),
        pytest.param(b"   \n", id="whitespace"),
        pytest.param(b'{"tool": "search"} {}', id="two-documents"),
        pytest.param(b'{"tool": "search",}', id="trailing-comma"),
        pytest.param(b"{'tool': 'search'}", id="single-quotes"),
    ],
)
def test_bodies_that_are_not_one_json_object_are_refused(
    hostile: Hostile, writes_nothing: None, body: bytes
) -> None:
    assert_error(hostile.post(ACTIONS, body), 400, "bad_request")


@pytest.mark.parametrize(
    ("body", "where"),
    [
        pytest.param(
            b'{\n  "tool": "search",\n  "input": {"a": 1\n    "b": 2}}',
            "line 4 column 5: expected ',' or '}'",
            id="missing-comma-in-object",
        ),
        pytest.param(
            b'{"tool": "search", "input": [1, "]" 2]}',
            "line 1 column 37: expected ',' or ']'",
            id="missing-comma-in-array",
        ),
        pytest.param(b'{"tool" "search"}', "line 1 column 9: expected ':'", id="missing-colon"),
        pytest.param(
            b'{"tool": "search",}',
            "line 1 column 19: expected a key in double quotes",
            id="trailing-comma",
        ),
        pytest.param(
            b'{"tool": "search"} {}',
            "line 1 column 20: more after the end of the JSON value",
            id="two-documents",
        ),
        pytest.param(b'{"tool": "sea', "line 1 column 10: string never ends", id="cut-short"),
    ],
)
def test_json_syntax_errors_say_where(
    hostile: Hostile, writes_nothing: None, body: bytes, where: str
) -> None:
    message = assert_error(hostile.post(ACTIONS, body), 400, "bad_request")
    assert message == f"request body: not valid JSON: {where}"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\xff\xfe{}", id="bad-start-byte"),
        pytest.param(b'{"tool": "\xc0\xaf"}', id="overlong-slash"),
        pytest.param(b'{"tool": "\xed\xa0\x80"}', id="utf8-encoded-surrogate"),
        pytest.param(b'{"tool": "\xe2\x82"}', id="truncated-sequence"),
        pytest.param('{"tool": "search"}'.encode("utf-16"), id="utf-16"),
        pytest.param(b'\xef\xbb\xbf{"tool": "search"}', id="utf-8-bom"),
    ],
)
def test_bodies_that_are_not_utf8_json_are_refused(
    hostile: Hostile, writes_nothing: None, body: bytes
) -> None:
    assert_error(hostile.post(ACTIONS, body), 400, "bad_request")


# -- content types ------------------------------------------------------------------


def test_form_encoded_body_is_refused_as_json(hostile: Hostile, writes_nothing: None) -> None:
    body = b"tool=search&cost=1&input=%7B%7D"
    response = hostile.post(ACTIONS, body, **{"Content-Type": "application/x-www-form-urlencoded"})
    assert_error(response, 400, "bad_request")
    multipart = b'--b\r\nContent-Disposition: form-data; name="tool"\r\n\r\nsearch\r\n--b--\r\n'
    response = hostile.post(
        ACTIONS, multipart, **{"Content-Type": "multipart/form-data; boundary=b"}
    )
    assert_error(response, 400, "bad_request")


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream", None],
)
def test_a_json_body_is_read_whatever_the_content_type(
    hostile: Hostile, content_type: str | None
) -> None:
    # Documented choice (docs/api.md): the body is parsed as JSON regardless of
    # Content-Type, so a client that mislabels it still gets a strict parse.
    headers = {"Content-Type": content_type} if content_type else {}
    response = hostile.admin.post(ACTIONS, content=b'{"tool": "search"}', headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["decision"] == "allowed"


# -- agent IDs in paths -------------------------------------------------------------


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


TRAVERSALS = [
    "..%2F..%2Fkeys%2Fadmin.token",
    "..%2F..%2Fescape",
    "%2e%2e",
    "%2e%2e%2f%2e%2e%2fescape",
    "%2E%2E%5C%2E%2E%5Cescape",
    "..%5C..%5Cescape",
    "%252e%252e%252fescape",
    "a%2Fb",
    "..%00",
    "%00",
    "a" * 65,
    "%C3%A9t%C3%A9",
    "%EF%BC%8E%EF%BC%8E",  # fullwidth dots
    "%ff",
    "agent.jsonl",
    "..",
]


def test_agent_ids_that_are_not_ids_never_reach_a_file(hostile: Hostile) -> None:
    root = hostile.server.data_dir.parent
    outside = root / "escape.jsonl"
    outside.write_text("not a log\n")
    before = _tree(root)
    for raw_id in TRAVERSALS:
        for token in (hostile.server.admin_token, hostile.agent_token):
            for method, suffix, body in (
                ("GET", "", None),
                ("GET", "/log", None),
                ("GET", "/token", None),
                ("POST", "/actions", {"tool": "search"}),
                ("POST", "/terminate", {"reason": "r", "by": "b"}),
                ("PUT", "/policy", POLICY),
            ):
                path = f"/v1/agents/{raw_id}{suffix}"
                answer = hostile.request(method, path, token, body)
                assert answer.status in {403, 404, 405}, (method, path, answer)
                assert set(json.loads(answer.body)) == {"error", "code"}
    for agent_id in ["../escape", "..", ".", "a" * 65, "été", "a/b", "a\\b", "x\x00y", "", " a"]:
        body = {"agent_id": agent_id, "policy": POLICY}
        message = assert_error(hostile.admin.post("/v1/agents", json=body), 400, "bad_request")
        assert message.startswith("$.agent_id: ")
    after = _tree(root)
    changed = {name for name in set(before) | set(after) if before.get(name) != after.get(name)}
    assert changed <= {
        f"guard-data/agents/{AGENT}.jsonl",
        f"guard-data/checkpoints/{AGENT}.checkpoint",
        f"guardd-{hostile.server.port}.out",
    }
    assert outside.read_text() == "not a log\n"
    assert sorted(os.listdir(hostile.server.data_dir)) == ["agents", "checkpoints", "keys", "lock"]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("a" * 300 + ".js", id="longer-than-a-file-name"),
        pytest.param("a" * 5000 + ".css", id="5000-characters"),
        pytest.param("app.js%00", id="nul-after"),
        pytest.param("a%00.js", id="nul-inside"),
        pytest.param("..%2Fapp.py", id="encoded-traversal"),
        pytest.param("%2e%2e", id="encoded-dots"),
        pytest.param("..", id="dots"),
        pytest.param(".hidden.js", id="hidden"),
        pytest.param("__init__.py", id="python-source"),
        pytest.param("%ff.js", id="not-utf-8"),
    ],
)
def test_console_names_that_are_not_console_files_are_404(hostile: Hostile, name: str) -> None:
    answer = hostile.raw(f"GET /console/{name} HTTP/1.1\r\nHost: x".encode())
    assert_error(answer, 404, "not_found")


def test_an_encoded_slash_is_a_slash(hostile: Hostile) -> None:
    # The HTTP layer decodes %2F before routing: "target%2Factions" is the
    # actions path itself, which has no GET; no agent ID can hold a slash.
    response = hostile.admin.get(f"/v1/agents/{AGENT}%2Factions")
    assert_error(response, 405, "method_not_allowed")


def test_a_raw_non_ascii_request_target_is_refused_by_http(hostile: Hostile) -> None:
    answer = hostile.raw(b"GET /v1/agents/\xff\xfe HTTP/1.1\r\nHost: x")
    assert answer.status == 400


# -- Authorization headers ----------------------------------------------------------


Token = Callable[[bytes, bytes], bytes]  # (admin token, agent token) -> header value

BAD_AUTHORIZATION: list[Any] = [
    pytest.param(lambda admin, agent: b"", id="empty"),
    pytest.param(lambda admin, agent: b"Bearer", id="bearer-alone"),
    pytest.param(lambda admin, agent: b"Bearer ", id="bearer-space"),
    pytest.param(lambda admin, agent: b"Bearer      ", id="bearer-spaces"),
    pytest.param(lambda admin, agent: b"Bearer\t" + admin, id="tab-separator"),
    pytest.param(lambda admin, agent: b"Basic x", id="basic"),
    pytest.param(lambda admin, agent: b"Basic " + admin, id="basic-with-admin-token"),
    pytest.param(lambda admin, agent: admin, id="no-scheme"),
    pytest.param(lambda admin, agent: b"agt_", id="agt-alone"),
    pytest.param(lambda admin, agent: b"Bearer agt_", id="agt"),
    pytest.param(lambda admin, agent: b"Bearer agt_.", id="agt-dot"),
    pytest.param(lambda admin, agent: b"Bearer agt_x.", id="agt-x-dot"),
    pytest.param(lambda admin, agent: b"Bearer agt_x.y", id="agt-x-y"),
    pytest.param(lambda admin, agent: b"Bearer agt_target.", id="agt-real-id-no-mac"),
    pytest.param(lambda admin, agent: b"Bearer " + agent[:-1], id="agent-token-cut"),
    pytest.param(lambda admin, agent: b"Bearer " + agent + b"A", id="agent-token-longer"),
    pytest.param(lambda admin, agent: b"Bearer " + agent.upper(), id="agent-token-upper"),
    pytest.param(lambda admin, agent: b"Bearer " + admin[:-1], id="admin-token-cut"),
    pytest.param(lambda admin, agent: b"Bearer " + admin + b" x", id="admin-token-and-more"),
    pytest.param(lambda admin, agent: b"Bearer \xc3\xa9\xc3\xa9", id="utf-8-token"),
    pytest.param(lambda admin, agent: b"Bearer \xff\xfe\x80", id="latin-1-bytes"),
    pytest.param(lambda admin, agent: b"Bearer x\x01y", id="control-character"),
    pytest.param(lambda admin, agent: b"Bearer " + admin + b"\x7f", id="admin-token-delete"),
    pytest.param(lambda admin, agent: b"Bearer " + admin + b"\xa0", id="admin-token-nbsp"),
    pytest.param(lambda admin, agent: b"Bearer \xa0" + admin, id="nbsp-admin-token"),
    pytest.param(lambda admin, agent: b"Bearer " + admin + b"\x85", id="admin-token-nel"),
    pytest.param(lambda admin, agent: b"Bearer " + agent + b"\x1f", id="agent-token-us"),
    pytest.param(lambda admin, agent: b"Bearer " + admin + b"\r\n x", id="folded-line"),
    pytest.param(lambda admin, agent: b"Bearer " + b"x" * 10_000, id="10kB"),
    pytest.param(lambda admin, agent: b"Bearer agt_" + b"a" * 10_000 + b".x", id="10kB-agent"),
]


@pytest.mark.parametrize("authorization", BAD_AUTHORIZATION)
def test_bad_authorization_headers_are_401(hostile: Hostile, authorization: Token) -> None:
    header = authorization(hostile.server.admin_token.encode(), hostile.agent_token.encode())
    for path in (b"/v1/agents", f"/v1/agents/{AGENT}".encode()):
        answer = hostile.raw(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: " + header)
        assert_error(answer, 401, "unauthorized")
        assert answer.headers["www-authenticate"] == "Bearer"


def test_no_authorization_header_is_401(hostile: Hostile) -> None:
    with hostile.server.client() as anonymous:
        assert_error(anonymous.get("/v1/agents"), 401, "unauthorized")
        assert_error(anonymous.post(ACTIONS, json={"tool": "search"}), 401, "unauthorized")


def test_whitespace_around_the_header_value_is_not_part_of_it(hostile: Hostile) -> None:
    # HTTP (RFC 9110 5.5) strips spaces and tabs around a field value, and a
    # bare LF ends the header line, before guardd sees the value: these carry
    # the valid token itself. RFC 6750 allows several spaces after "Bearer".
    token = hostile.server.admin_token.encode()
    for header in (
        b"Bearer " + token + b" ",
        b"Bearer " + token + b"\t",
        b"Bearer " + token + b"\nX-After: 1",  # the LF ends the line
        b"Bearer   " + token,
        b"bearer " + token,
    ):
        answer = hostile.raw(b"GET /v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: " + header)
        assert answer.status == 200, header


@pytest.mark.parametrize("byte", [b"\x00", b"\x0b", b"\x0c", b"\r"])
def test_bytes_http_forbids_in_a_header_are_refused_by_http(hostile: Hostile, byte: bytes) -> None:
    token = hostile.server.admin_token.encode()
    answer = hostile.raw(
        b"GET /v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + byte + b"x"
    )
    assert answer.status == 400


def test_an_oversized_header_block_is_refused_by_http(hostile: Hostile) -> None:
    answer = hostile.raw(
        b"GET /v1/agents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"x" * 100_000
    )
    assert answer.status == 431


# -- body size ----------------------------------------------------------------------


def _big_action() -> bytes:
    return _action(b'"' + b"x" * MIB + b'"')


def test_body_over_1_mib_is_413(hostile: Hostile, writes_nothing: None) -> None:
    message = assert_error(hostile.post(ACTIONS, _big_action()), 413, "too_large")
    assert message == "request body is larger than 1 MiB"


def test_body_over_1_mib_without_content_length_is_413(
    hostile: Hostile, writes_nothing: None
) -> None:
    big = _big_action()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    response = hostile.admin.post(ACTIONS, content=chunks())
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in response.request.headers
    assert_error(response, 413, "too_large")


def test_a_content_length_over_1_mib_is_413_before_the_body(
    hostile: Hostile, writes_nothing: None
) -> None:
    token = hostile.server.admin_token.encode()
    head = (
        b"POST "
        + ACTIONS.encode()
        + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + token
        + b"\r\nContent-Length: 50000000"
    )
    assert_error(hostile.raw(head, b'{"tool": "search"}'), 413, "too_large")


def test_a_body_of_exactly_1_mib_is_read(hostile: Hostile) -> None:
    padding = MIB - len(_action(b'""'))
    body = _action(b'"' + b"x" * padding + b'"')
    assert len(body) == MIB
    answer = hostile.post(ACTIONS, body)
    assert answer.status_code == 200, answer.text[:200]


def test_without_a_token_a_big_body_is_401_not_read(hostile: Hostile) -> None:
    with hostile.server.client() as anonymous:
        assert_error(anonymous.post(ACTIONS, content=_big_action()), 401, "unauthorized")


# -- HTTP/2 -------------------------------------------------------------------------


def _http2_exchange(port: int, headers: list[tuple[str, str]], body: bytes) -> list[Any]:
    """Open a cleartext HTTP/2 connection (prior knowledge), send one request
    with ``body``, and return the server's events until it closes or 5 s pass."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    events: list[Any] = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        conn.send_headers(1, headers, end_stream=not body)
        for start in range(0, len(body), conn.max_outbound_frame_size):
            conn.send_data(1, body[start : start + conn.max_outbound_frame_size])
        sock.sendall(conn.data_to_send())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except OSError:  # reset after GOAWAY
                break
            if not data:
                break
            try:
                events.extend(conn.receive_data(data))
            except h2.exceptions.ProtocolError:
                break
    return events


def test_cleartext_http2_is_refused_without_a_traceback(hostile: Hostile) -> None:
    token = hostile.server.admin_token
    base = [(":method", "POST"), (":path", ACTIONS), (":scheme", "http"), (":authority", "x")]
    big = [*base, ("authorization", f"Bearer {token}"), ("content-length", str(2 * MIB))]
    for headers, body in ((big, b"x" * 65535), (base, b"")):
        events = _http2_exchange(hostile.server.port, headers, body)
        assert any(isinstance(e, h2.events.ConnectionTerminated) for e in events), events
        assert not any(isinstance(e, h2.events.ResponseReceived) for e in events), events
    output = hostile.server.read_output()
    assert "Traceback" not in output
    assert "KeyError" not in output


def test_an_h2c_upgrade_with_a_body_is_answered_in_http1(hostile: Hostile) -> None:
    token = hostile.server.admin_token.encode()
    head = _action_head(
        b"Authorization: Bearer " + token,
        b"Content-Length: %d" % (MIB + 1),
        b"Upgrade: h2c",
        b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
    )
    answer = hostile.raw(head, b'{"tool": "search"}')  # the rest never comes
    assert_error(answer, 413, "too_large")
    assert "Traceback" not in hostile.server.read_output()


# -- money and shapes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        pytest.param(b"0.1234567", "$.cost: must have at most 6 decimal places", id="7-places"),
        pytest.param(b"1e-7", "$.cost: must have at most 6 decimal places", id="1e-7"),
        pytest.param(b"0.0000001", "$.cost: must have at most 6 decimal places", id="0.0000001"),
        pytest.param(b"1000000000", "$.cost: must be below 1000000000", id="10^9"),
        pytest.param(b"1e9", "$.cost: must be below 1000000000", id="1e9"),
        pytest.param(b"1E+12", "$.cost: must be below 1000000000", id="1E+12"),
        pytest.param(b"999999999.9999999", "$.cost: must have at most 6 decimal places", id="7"),
        pytest.param(b"-1", "$.cost: must not be negative", id="negative"),
        pytest.param(b"-0.000001", "$.cost: must not be negative", id="tiny-negative"),
        pytest.param(b'"1"', "$.cost: must be a number", id="string"),
        pytest.param(b"true", "$.cost: must be a number", id="true"),
        pytest.param(b"[1]", "$.cost: must be a number", id="array"),
    ],
)
def test_bad_money_in_a_request_cost_is_400(
    hostile: Hostile, writes_nothing: None, cost: bytes, message: str
) -> None:
    body = b'{"tool": "search", "cost": ' + cost + b"}"
    assert assert_error(hostile.post(ACTIONS, body), 400, "bad_request") == message


@pytest.mark.parametrize(
    "cost", [b"0.123456", b"999999999.999999", b"0.10000000", b"1E2", b"0", b"-0", b"0e5"]
)
def test_money_within_the_rules_is_accepted(hostile: Hostile, cost: bytes) -> None:
    body = b'{"tool": "search", "cost": ' + cost + b"}"
    answer = hostile.post(ACTIONS, body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["decision"] in {"allowed", "denied"}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        pytest.param("budget", b"0.1234567", "$.policy.budget: must have at most 6 decimal places"),
        pytest.param("budget", b"1000000000", "$.policy.budget: must be below 1000000000"),
        pytest.param("scar_limit", b"1e9", "$.policy.scar_limit: must be below 1000000000"),
    ],
)
def test_bad_money_in_a_policy_is_400(
    hostile: Hostile, field: str, value: bytes, message: str
) -> None:
    numbers = {b"budget": b"1", b"scar_limit": b"1", field.encode(): value}
    body = (
        b'{"agent_id": "money", "policy": {"budget": %(budget)s, "scar_limit": %(scar_limit)s, '
        b'"tools": {}}}' % numbers
    )
    assert assert_error(hostile.post("/v1/agents", body), 400, "bad_request") == message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({"tool": 5}, "$.tool: must be a string", id="tool-number"),
        pytest.param({"tool": ["search"]}, "$.tool: must be a string", id="tool-array"),
        pytest.param({"tool": None}, "$.tool: must be a string", id="tool-null"),
        pytest.param({"tool": ""}, "$.tool: tool must be 1 to 128 characters", id="tool-empty"),
        pytest.param(
            {"tool": "x" * 129}, "$.tool: tool must be 1 to 128 characters", id="tool-129"
        ),
        pytest.param({}, "$.tool: required key missing", id="no-tool"),
        pytest.param({"tool": "search", "extra": 1}, "$.extra: unknown key", id="unknown-key"),
        pytest.param({"Tool": "search"}, "$.Tool: unknown key", id="wrong-case"),
    ],
)
def test_a_body_of_the_wrong_shape_is_400_naming_the_key(
    hostile: Hostile, writes_nothing: None, body: dict[str, Any], message: str
) -> None:
    got = assert_error(hostile.admin.post(ACTIONS, json=body), 400, "bad_request")
    assert message in got.split("; ")


def test_a_policy_typo_is_400_naming_the_key(hostile: Hostile) -> None:
    policy = {**POLICY, "tools": {"search": {"requires_aproval": True}}}
    got = assert_error(
        hostile.admin.put(f"/v1/agents/{AGENT}/policy", json=policy), 400, "bad_request"
    )
    assert got == "$.tools.search.requires_aproval: unknown key"


# -- headers and query parameters -----------------------------------------------------


@pytest.mark.parametrize("key", ["", "k" * 129])
def test_an_idempotency_key_of_bad_length_is_400(
    hostile: Hostile, writes_nothing: None, key: str
) -> None:
    response = hostile.admin.post(
        ACTIONS, json={"tool": "search"}, headers={"Idempotency-Key": key}
    )
    assert_error(response, 400, "bad_request")


def _action_head(*headers: bytes) -> bytes:
    """A POST to the actions path with these headers (``Hostile.raw`` ends the block)."""
    return b"\r\n".join([b"POST " + ACTIONS.encode() + b" HTTP/1.1", b"Host: x", *headers])


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        pytest.param(
            [b"Idempotency-Key: k-1", b"Idempotency-Key: k-2"],
            "one Idempotency-Key header at most",
            id="two-headers",
        ),
        pytest.param(
            [b"Idempotency-Key: k-1", b"Idempotency-Key: k-1"],
            "one Idempotency-Key header at most",
            id="the-same-twice",
        ),
        pytest.param(
            ["Idempotency-Key: café".encode()],
            "Idempotency-Key must be printable ASCII (no tab, no other bytes)",
            id="non-ascii-utf8",
        ),
        pytest.param(
            [b"Idempotency-Key: caf\xe9"],
            "Idempotency-Key must be printable ASCII (no tab, no other bytes)",
            id="non-ascii-latin1",
        ),
        pytest.param(
            [b"Idempotency-Key: a\tb"],
            "Idempotency-Key must be printable ASCII (no tab, no other bytes)",
            id="tab",
        ),
    ],
)
def test_an_idempotency_key_that_is_not_one_ascii_value_is_400(
    hostile: Hostile, writes_nothing: None, keys: list[bytes], message: str
) -> None:
    body = b'{"tool": "search"}'
    token = b"Authorization: Bearer " + hostile.server.admin_token.encode()
    length = b"Content-Length: %d" % len(body)
    answer = hostile.raw(_action_head(token, length, *keys), body)
    assert assert_error(answer, 400, "bad_request") == message


@pytest.mark.parametrize("length", [b"0", b"18", b"5"])
def test_content_length_with_transfer_encoding_is_400_before_anything_else(
    hostile: Hostile, writes_nothing: None, length: bytes
) -> None:
    # No token either: the framing is refused before the request is looked at.
    body = b'{"tool": "search"}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = _action_head(b"Content-Length: " + length, b"Transfer-Encoding: chunked")
    answer = hostile.raw(head, chunked)
    message = assert_error(answer, 400, "bad_request")
    assert message == "a request may not have both Content-Length and Transfer-Encoding"
    assert answer.headers["connection"] == "close"


CONTROL_CHARACTERS = ["\x00", "\x07", "\r", "\x1b", "\x7f", "\x85", "\x9b"]


@pytest.mark.parametrize("char", [*CONTROL_CHARACTERS, "\n", "\t"])
def test_control_characters_in_a_tool_name_are_400(
    hostile: Hostile, writes_nothing: None, char: str
) -> None:
    response = hostile.admin.post(ACTIONS, json={"tool": f"sea{char}rch"})
    message = assert_error(response, 400, "bad_request")
    assert message == (f"$.tool: tool must not contain control characters (U+{ord(char):04X})")


@pytest.mark.parametrize("char", ["\x00", "\x1b", "\r", "\x85"])
def test_control_characters_in_a_policy_tool_name_are_400(
    hostile: Hostile, writes_nothing: None, char: str
) -> None:
    policy = {**POLICY, "tools": {f"sea{char}rch": {"cost": 1}}}
    response = hostile.admin.post("/v1/agents", json={"agent_id": "ctl", "policy": policy})
    message = assert_error(response, 400, "bad_request")
    assert message == (
        f"$.policy.tools: tool names must not contain control characters (U+{ord(char):04X})"
    )
    response = hostile.admin.put(f"/v1/agents/{AGENT}/policy", json=policy)
    message = assert_error(response, 400, "bad_request")
    assert message == (
        f"$.tools: tool names must not contain control characters (U+{ord(char):04X})"
    )


@pytest.mark.parametrize(
    ("step", "body", "key"),
    [
        pytest.param("approve", {"approver": "al{}ice"}, "approver", id="approver"),
        pytest.param("approve", {"approver": "alice", "note": "o{}k"}, "note", id="note"),
        pytest.param("reject", {"approver": "al{}ice", "reason": "no"}, "approver", id="reject-by"),
        pytest.param("reject", {"approver": "alice", "reason": "n{}o"}, "reason", id="reason"),
    ],
)
@pytest.mark.parametrize("char", CONTROL_CHARACTERS)
def test_control_characters_in_approver_names_and_notes_are_400(
    hostile: Hostile, writes_nothing: None, step: str, body: dict[str, str], key: str, char: str
) -> None:
    body = {name: value.format(char) for name, value in body.items()}
    response = hostile.admin.post(f"{ACTIONS}/act-1/{step}", json=body)
    message = assert_error(response, 400, "bad_request")
    assert message.startswith(f"$.{key}: "), message
    assert "must not contain control characters" in message


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param("scars", {"severity": "minor", "reason": "r{}", "by": "ops"}, id="scar"),
        pytest.param("scars", {"severity": "minor", "reason": "r", "by": "o{}ps"}, id="scar-by"),
        pytest.param("terminate", {"reason": "r{}", "by": "ops"}, id="terminate"),
        pytest.param("terminate", {"reason": "r", "by": "o{}ps"}, id="terminate-by"),
    ],
)
def test_control_characters_in_operator_steps_are_400(
    hostile: Hostile, writes_nothing: None, path: str, body: dict[str, str]
) -> None:
    body = {name: value.format("\x1b[2J") for name, value in body.items()}
    response = hostile.admin.post(f"/v1/agents/{AGENT}/{path}", json=body)
    assert "must not contain control characters" in assert_error(response, 400, "bad_request")


def test_a_note_may_hold_tabs_and_line_feeds(hostile: Hostile) -> None:
    held = hostile.admin.post(ACTIONS, json={"tool": "send_email"}).json()
    assert held["decision"] == "pending_approval", held
    note = "first line\n\tsecond line"
    approve = f"{ACTIONS}/{held['action_id']}/approve"
    response = hostile.admin.post(approve, json={"approver": "alice", "note": note})
    assert response.status_code == 200, response.text
    records = hostile.admin.get(f"/v1/agents/{AGENT}/log").json()["records"]
    assert records[-1]["note"] == note


# Characters a name may not hold beside the controls, and what the 400 calls them.
FORMAT = "invisible or bidirectional format characters"
INVISIBLE = {
    "\u202e": FORMAT,  # RIGHT-TO-LEFT OVERRIDE
    "\u200b": FORMAT,  # ZERO WIDTH SPACE
    "\ufeff": FORMAT,  # ZERO WIDTH NO-BREAK SPACE (byte-order mark)
    "\u2066": FORMAT,  # LEFT-TO-RIGHT ISOLATE
    "\u200d": FORMAT,  # ZERO WIDTH JOINER
    "\u00ad": FORMAT,  # SOFT HYPHEN
    "\u061c": FORMAT,  # ARABIC LETTER MARK
    "\U000e0041": FORMAT,  # TAG LATIN CAPITAL LETTER A
    "\u2028": "line or paragraph separators",  # LINE SEPARATOR
    "\u2029": "line or paragraph separators",  # PARAGRAPH SEPARATOR
}
BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]


def _code(char: str) -> str:
    return f"U+{ord(char):04X}"


@pytest.mark.parametrize("char", list(INVISIBLE))
def test_invisible_and_bidi_characters_in_a_tool_name_are_400(
    hostile: Hostile, writes_nothing: None, char: str
) -> None:
    response = hostile.admin.post(ACTIONS, json={"tool": f"sea{char}rch"})
    message = assert_error(response, 400, "bad_request")
    assert message == f"$.tool: tool must not contain {INVISIBLE[char]} ({_code(char)})"


@pytest.mark.parametrize("char", list(INVISIBLE))
def test_invisible_and_bidi_characters_in_a_policy_tool_name_are_400(
    hostile: Hostile, writes_nothing: None, char: str
) -> None:
    policy = {**POLICY, "tools": {**POLICY["tools"], f"sea{char}rch": {"cost": 1}}}
    response = hostile.admin.post("/v1/agents", json={"agent_id": "bidi", "policy": policy})
    message = assert_error(response, 400, "bad_request")
    assert message == (
        f"$.policy.tools: tool names must not contain {INVISIBLE[char]} ({_code(char)})"
    )
    response = hostile.admin.put(f"/v1/agents/{AGENT}/policy", json=policy)
    message = assert_error(response, 400, "bad_request")
    assert message == f"$.tools: tool names must not contain {INVISIBLE[char]} ({_code(char)})"
    assert hostile.admin.get("/v1/agents/bidi").status_code == 404


# Every name a request carries: (path under the agent, body, the key holding {}).
NAME_FIELDS = [
    pytest.param("actions/act-1/approve", {"approver": "al{}ice"}, "approver", id="approver"),
    pytest.param(
        "actions/act-1/reject", {"approver": "al{}ice", "reason": "no"}, "approver", id="rejecter"
    ),
    pytest.param("scars", {"severity": "minor", "reason": "r", "by": "o{}ps"}, "by", id="scar-by"),
    pytest.param("terminate", {"reason": "r", "by": "o{}ps"}, "by", id="terminate-by"),
    pytest.param(
        "grants",
        {"tool": "search", "by": "o{}ps", "max_calls": 1, "ttl_secs": 60},
        "by",
        id="grant-by",
    ),
    pytest.param(
        "grants",
        {"tool": "sea{}rch", "by": "ops", "max_calls": 1, "ttl_secs": 60},
        "tool",
        id="grant-tool",
    ),
    pytest.param("grants/grant-1/revoke", {"by": "o{}ps"}, "by", id="revoke-by"),
]


@pytest.mark.parametrize(("path", "body", "key"), NAME_FIELDS)
@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\ufeff", "\x1b"])
def test_every_name_refuses_invisible_bidi_and_control_characters(
    hostile: Hostile, writes_nothing: None, path: str, body: dict[str, Any], key: str, char: str
) -> None:
    body = {k: v.format(char) if isinstance(v, str) else v for k, v in body.items()}
    response = hostile.admin.post(f"/v1/agents/{AGENT}/{path}", json=body)
    message = assert_error(response, 400, "bad_request")
    what = "control characters" if char == "\x1b" else FORMAT
    name = "tool" if key == "tool" else "names"
    assert message == f"$.{key}: {name} must not contain {what} ({_code(char)})"


# Every free text a request carries.
TEXT_FIELDS = [
    pytest.param("actions/act-1/approve", {"approver": "alice", "note": "o{}k"}, "note", id="note"),
    pytest.param(
        "actions/act-1/reject", {"approver": "alice", "reason": "n{}o"}, "reason", id="reason"
    ),
    pytest.param("actions/act-1/cancel", {"reason": "n{}o"}, "reason", id="cancel"),
    pytest.param(
        "actions/act-1/outcome", {"status": "success", "detail": "d{}"}, "detail", id="detail"
    ),
    pytest.param("scars", {"severity": "minor", "reason": "r{}", "by": "ops"}, "reason", id="scar"),
    pytest.param("terminate", {"reason": "r{}", "by": "ops"}, "reason", id="terminate"),
    pytest.param(
        "grants",
        {"tool": "search", "by": "ops", "max_calls": 1, "ttl_secs": 60, "note": "n{}"},
        "note",
        id="grant-note",
    ),
    pytest.param("grants/grant-1/revoke", {"by": "ops", "reason": "r{}"}, "reason", id="revoke"),
]


@pytest.mark.parametrize(("path", "body", "key"), TEXT_FIELDS)
@pytest.mark.parametrize("char", BIDI)
def test_free_text_refuses_bidi_embeddings_overrides_and_isolates(
    hostile: Hostile, writes_nothing: None, path: str, body: dict[str, Any], key: str, char: str
) -> None:
    body = {k: v.format(char) if isinstance(v, str) else v for k, v in body.items()}
    response = hostile.admin.post(f"/v1/agents/{AGENT}/{path}", json=body)
    message = assert_error(response, 400, "bad_request")
    assert message == (
        f"$.{key}: text must not contain bidirectional embeddings, overrides or isolates"
        f" ({_code(char)})"
    )


def test_free_text_keeps_other_format_characters(hostile: Hostile) -> None:
    held = hostile.admin.post(ACTIONS, json={"tool": "send_email"}).json()
    assert held["decision"] == "pending_approval", held
    # An emoji sequence (joined by U+200D), a zero width space, a soft hyphen,
    # a right-to-left mark (not an override), a line separator.
    note = "\U0001f469\u200d\U0001f4bb ok\u200b, re\u00adviewed \u200f\u2028done"
    approve = f"{ACTIONS}/{held['action_id']}/approve"
    response = hostile.admin.post(approve, json={"approver": "alice", "note": note})
    assert response.status_code == 200, response.text
    records = hostile.admin.get(f"/v1/agents/{AGENT}/log").json()["records"]
    assert records[-1]["note"] == note


def test_names_may_hold_letters_beyond_ascii(hostile: Hostile) -> None:
    held = hostile.admin.post(ACTIONS, json={"tool": "send_email"}).json()
    approve = f"{ACTIONS}/{held['action_id']}/approve"
    response = hostile.admin.post(approve, json={"approver": "Zoë Ødegård 山田"})
    assert response.status_code == 200, response.text


async def test_a_log_written_before_with_such_names_still_loads(tmp_path: Path) -> None:
    # Written below the edge, as a guardd from before this rule could have.
    tool, approver = "wr\u202eite", "al\u200bice"
    root = tmp_path / "guard-data"
    agent_policy = policy(tools={tool: {"requires_approval": True}})
    async with running_registry(root) as registry:
        await registry.create("old", agent_policy)
        ref = registry.ref("old")
        held = await ref.ask(c.RequestAction(tool))
        await ref.ask(c.Approve(held["action_id"], approver, note="o\u202ek"))
    server = GuardServer(root, env={"GUARD_ADMIN_TOKEN": "a" * 32}).start()
    try:
        assert "agents: 1 loaded, 0 quarantined" in server.read_output()
        with server.client(server.admin_token) as admin:
            assert admin.get("/v1/agents/old/verify").json()["ok"] is True
            records = admin.get("/v1/agents/old/log").json()["records"]
            assert any(record.get("approved_by") == approver for record in records)
            assert tool in admin.get("/v1/agents/old/policy").json()["tools"]
            # Only new requests are refused.
            response = admin.post("/v1/agents/old/actions", json={"tool": tool})
            assert_error(response, 400, "bad_request")
    finally:
        server.kill()


@pytest.mark.parametrize(
    "query",
    [
        "wait=-1",
        "wait=61",
        "wait=nan",
        "wait=inf",
        "wait=1e999",
        "wait=abc",
        "wait=",
        "wait=1_0",
        "wait=%205",
        "wait=%D9%A5",  # ARABIC-INDIC DIGIT FIVE
        "wait=0x1",
    ],
)
def test_a_bad_wait_is_400(hostile: Hostile, query: str) -> None:
    response = hostile.admin.get(f"{ACTIONS}/act-1?{query}")
    assert_error(response, 400, "bad_request")


@pytest.mark.parametrize(
    "query",
    [
        "after=-2",
        "after=1.5",
        "after=x",
        "limit=0",
        "limit=-1",
        "limit=1.0",
        "limit=",
        "limit=1_0",
        "limit=%205",
        "limit=+5",
        "limit=%D9%A5",
        "limit=" + "9" * 5000,
    ],
)
def test_a_bad_log_range_is_400(hostile: Hostile, query: str) -> None:
    response = hostile.admin.get(f"/v1/agents/{AGENT}/log?{query}")
    assert_error(response, 400, "bad_request")


@pytest.mark.parametrize("method", [b"DELETE", b"PATCH", b"OPTIONS", b"FOO"])
def test_an_unknown_method_is_405(hostile: Hostile, method: bytes) -> None:
    answer = hostile.raw(method + b" /v1/agents HTTP/1.1\r\nHost: x")
    assert_error(answer, 405, "method_not_allowed")
    assert answer.headers["allow"] == "GET, HEAD, POST"


# -- afterwards -----------------------------------------------------------------------


def test_after_all_of_it_the_agent_works_and_its_log_verifies(hostile: Hostile) -> None:
    assert hostile.admin.post(ACTIONS, json={"tool": "search"}).json()["decision"] == "allowed"
    with hostile.server.client(hostile.agent_token) as agent:
        assert agent.post(ACTIONS, json={"tool": "search"}).json()["decision"] == "allowed"
    report = hostile.admin.get(f"/v1/agents/{AGENT}/verify").json()
    assert report["ok"] is True, report
    output = hostile.server.read_output()
    assert "Traceback" not in output
    assert "unexpected error" not in output
