"""cel-go's strings extension at version 2 (1.29+), against its documented behaviour."""

from __future__ import annotations

import pytest

from tests.policy_engine.cel.lib.support import fails, holds, value

TRUE = [
    "'hello'.charAt(4) == 'o' && 'hello'.charAt(5) == ''",
    "'hello mellow'.indexOf('') == 0 && 'hello mellow'.indexOf('ello') == 1",
    "'hello mellow'.indexOf('jello') == -1 && 'hello mellow'.indexOf('', 2) == 2",
    "'hello mellow'.indexOf('ello', 2) == 7 && 'hello mellow'.indexOf('ello', 20) == -1",
    "['hello', 'mellow'].join() == 'hellomellow' && ['hello', 'mellow'].join(' ') == 'hello "
    "mellow'",
    "[].join() == '' && [].join('/') == ''",
    "'hello mellow'.lastIndexOf('') == 12 && 'hello mellow'.lastIndexOf('ello') == 7",
    "'hello mellow'.lastIndexOf('jello') == -1 && 'hello mellow'.lastIndexOf('ello', 6) == 1",
    "'hello mellow'.lastIndexOf('ello', 20) == -1",
    "'TacoCat'.lowerAscii() == 'tacocat' && 'TacoCÆt Xii'.lowerAscii() == 'tacocÆt xii'",
    "'TacoCat'.upperAscii() == 'TACOCAT' && 'TacoCÆt Xii'.upperAscii() == 'TACOCÆT XII'",
    "strings.quote('single-quote with \"double quote\"') == "
    '\'"single-quote with \\\\"double quote\\\\""\'',
    "'hello hello'.replace('he', 'we') == 'wello wello' && 'hello hello'.replace('he', 'we', "
    "-1) == 'wello wello'",
    "'hello hello'.replace('he', 'we', 1) == 'wello hello' && 'hello hello'.replace('he', "
    "'we', 0) == 'hello hello'",
    "'hello hello'.replace('', '_') == '_h_e_l_l_o_ _h_e_l_l_o_' && 'hello "
    "hello'.replace('h', '') == 'ello ello'",
    "'hello hello hello'.split(' ') == ['hello', 'hello', 'hello'] && 'hello hello "
    "hello'.split(' ', 0) == []",
    "'hello hello hello'.split(' ', 1) == ['hello hello hello']",
    "'hello hello hello'.split(' ', 2) == ['hello', 'hello hello']",
    "'hello hello hello'.split(' ', -1) == ['hello', 'hello', 'hello']",
    "'tacocat'.substring(4) == 'cat' && 'tacocat'.substring(0, 4) == 'taco'",
    "'tacocat'.substring(4, 7) == 'cat' && 'tacocat'.substring(7) == ''",
    "'  \\ttrim\\n    '.trim() == 'trim'",
    "'this is a string: %s\\nand an integer: %d'.format(['str', 42]) == 'this is a string: "
    "str\\nand an integer: 42'",
    "'a double substituted with %%s: %s'.format([64.2]) == 'a double substituted with %s: 64.2'",
    "'%f'.format([3.14]) == '3.140000' && '%.2f'.format([0.5]) == '0.50'",
    "'5 in binary: %b'.format([5]) == '5 in binary: 101' && '26 in hex: %x'.format([26]) == "
    "'26 in hex: 1a'",
    "'%X'.format([26]) == '1A' && '30 in octal: %o'.format([30]) == '30 in octal: 36'",
    "'true bool: %s - false bool: %s'.format([true, false]) == 'true bool: true - false bool: "
    "false'",
    "'a map inside a list: %s'.format([[1, 2, 3, {'a': 'x', 'b': 'y', 'c': 'z'}]]) == "
    '\'a map inside a list: [1, 2, 3, {"a":"x", "b":"y", "c":"z"}]\'',
    "'timestamp: %s'.format([timestamp('2023-02-03T23:31:20+00:00')]) == "
    "'timestamp: 2023-02-03T23:31:20Z'",
    "'duration: %s'.format([duration('1h45m47s')]) == 'duration: 6347s'",
    "'%s'.format([['abc', 3.14, null]]) == '[\"abc\", 3.140000, null]'",
    # code points, as size() counts them
    "'ÆØÅx'.charAt(1) == 'Ø' && 'ÆØÅx'.indexOf('x') == 3 && 'ÆØÅx'.substring(1, 3) == 'ØÅ'",
]
ERRORS = [
    ("'hello'.charAt(-1)", "out of range"),
    ("'hello'.charAt(6)", "out of range"),
    ("'hello mellow'.indexOf('ello', -1)", "out of range"),
    ("'hello mellow'.lastIndexOf('ello', -1)", "out of range"),
    ("'tacocat'.substring(-1)", "out of range"),
    ("'tacocat'.substring(2, 1)", "invalid substring range"),
    ("'%d %d'.format([1])", "out of range"),  # more clauses than arguments
    ("'%b'.format(['a'])", "needs a number"),
    ("'abc'.reverse()", "does not compile"),  # strings version 3, not in Kubernetes
]


@pytest.mark.parametrize("expression", TRUE)
def test_documented_behaviour(expression: str) -> None:
    holds(expression)


@pytest.mark.parametrize(("expression", "reason"), ERRORS)
def test_documented_errors(expression: str, reason: str) -> None:
    fails(expression, match=reason)


def test_trim_removes_unicode_white_space_but_not_zero_width_space() -> None:
    assert value("'\\u2028 x \\u3000'.trim()") == "x"
    assert value("'\\u200b x'.trim()") == "\u200b x"
