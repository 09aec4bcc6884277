"""Kubernetes' URL library, against its documented behaviour."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds, value

TRUE = [
    "isURL('https://user:pass@example.com:80/path?query=val#fragment') && isURL('/absolute-path')",
    "!isURL('https://a:b:c/') && !isURL('../relative-path') && !isURL('example.com')",
    "url('/path').getScheme() == '' && url('https://example.com/').getScheme() == 'https'",
    "url('https://example.com:80/').getHost() == 'example.com:80'",
    "url('https://example.com/').getHost() == 'example.com'",
    "url('https://[::1]:80/').getHost() == '[::1]:80' && url('https://[::1]/').getHost() == "
    "'[::1]'",
    "url('/path').getHost() == ''",
    "url('https://example.com:80/').getHostname() == 'example.com'",
    "url('https://127.0.0.1:80/').getHostname() == '127.0.0.1'",
    "url('https://[::1]:80/').getHostname() == '::1' && url('/path').getHostname() == ''",
    "url('https://example.com:80/').getPort() == '80' && "
    "url('https://example.com/').getPort() == ''",
    "url('/path').getPort() == ''",
    "url('https://example.com/path').getEscapedPath() == '/path'",
    "url('https://example.com/path with spaces/').getEscapedPath() == '/path%20with%20spaces/'",
    "url('https://example.com').getEscapedPath() == ''",
    "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == {'k1': ['a'], 'k2': ['b', 'c']}",
    "url('https://example.com/path?key with spaces=value with spaces').getQuery() == "
    "{'key with spaces': ['value with spaces']}",
    "url('https://example.com/path?').getQuery() == {} && "
    "url('https://example.com/path').getQuery() == {}",
    "url('https://user:pass@example.com:80/path?query=val#fragment').getQuery() == {'query': "
    "['val']}",
]
ERRORS = [
    ("url('https://a:b:c/')", "port"),
    ("url('../relative-path')", "invalid URI"),
    ("url('example.com')", "invalid URI"),  # no scheme and no absolute path
    ("url('')", "empty"),
    ("url('https://exa mple.com/')", "host"),
    ("url('/a%zz')", "escape"),
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression)


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_documented_errors(expression: str, reason: str) -> None:
    fails(expression, match=reason)


def test_an_escaped_path_is_kept_as_written() -> None:
    assert value("url('https://example.com/a%2Fb(c)').getEscapedPath()") == "/a%2Fb(c)"
