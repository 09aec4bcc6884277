"""The probe CEL environment is Kubernetes' (issue 31): each library the runtime lacks
(workers/core/probes/cel_lib/) against the behaviour the Kubernetes CEL documentation gives,
plus optional types, variables and code-point string sizes. Cases written here from the
documented behaviour."""

from __future__ import annotations

import pytest

from workers.core.probes.cel import BoolProgram, CelError, evaluate_bool

LIMITS = {"memory": "512Mi", "cpu": "500m"}
CONTAINER = {"name": "web", "image": "registry.example/web:1.2.3", "resources": {"limits": LIMITS}}
POD = {"metadata": {"name": "wéb-1", "labels": {"app": "web"}}, "spec": {"containers": [CONTAINER]}}

TRUE = [
    # standard definitions, Kubernetes' flavour
    ("size counts code points", "size(object.metadata.name) == 5"),
    ("in with parentheses", "'web' in (object.spec.containers.map(c, c.name))"),
    # optional types
    ("optional field", "object.?spec.?nodeName.orValue('none') == 'none'"),
    ("optional index", "object.spec.containers[?3].hasValue() == false"),
    ("optional of/none/or", "optional.none().or(optional.of(2)).value() == 2"),
    ("ofNonZeroValue", "!optional.ofNonZeroValue('').hasValue()"),
    # strings (version 2)
    ("charAt", "'hello'.charAt(4) == 'o'"),
    ("indexOf", "'hello mellow'.indexOf('ello', 2) == 7"),
    ("lastIndexOf", "'hello mellow'.lastIndexOf('ello') == 7"),
    ("lowerAscii", "'TacoCÆt'.lowerAscii() == 'tacocÆt'"),
    ("upperAscii", "'tacoCat'.upperAscii() == 'TACOCAT'"),
    ("replace", "'hello hello'.replace('he', 'we', 1) == 'wello hello'"),
    ("split", "'hello hello hello'.split(' ', 2) == ['hello', 'hello hello']"),
    ("substring", "'tacocat'.substring(4, 7) == 'cat'"),
    ("trim", "'  \\ttrim\\n '.trim() == 'trim'"),
    ("join", "['hello', 'mellow'].join(' ') == 'hello mellow'"),
    ("format", "'%s has %d containers, %.2f cpu'.format(['web', 2, 0.5]) == "
               "'web has 2 containers, 0.50 cpu'"),
    ("quote", "strings.quote('a\"b') == '\"a\\\\\"b\"'"),
    # lists
    ("isSorted", "[1, 2, 3].isSorted() && !['b', 'a'].isSorted()"),
    ("sum", "[1, 2, 3].sum() == 6"),
    ("min max", "[1, 2, 3].min() == 1 && [1, 2, 3].max() == 3"),
    ("list indexOf", "['a', 'b', 'b'].indexOf('b') == 1 && ['a', 'b', 'b'].lastIndexOf('b') == 2"),
    # sets
    ("sets.contains", "sets.contains([1, 2, 3, 4], [2, 3])"),
    ("sets.equivalent", "sets.equivalent([1, 2, 3], [3, 2, 1, 1])"),
    ("sets.intersects", "sets.intersects([1], [1, 2]) && !sets.intersects([1], [2])"),
    # regex
    ("find", "'abc 123'.find('[0-9]+') == '123'"),
    ("findAll", "'123 abc 456'.findAll('[0-9]+') == ['123', '456']"),
    ("findAll limit", "'123 abc 456'.findAll('[0-9]+', 1) == ['123']"),
    # url
    ("url parts", "url('https://example.com:8080/path?k=v&k=w').getHost() == 'example.com:8080' && "
                  "url('https://example.com:8080/path?k=v&k=w').getQuery()['k'] == ['v', 'w']"),
    ("url ipv6", "url('https://[::1]:80/').getHostname() == '::1' && "
                 "url('https://[::1]:80/').getPort() == '80'"),
    ("isURL", "isURL('https://example.com/') && !isURL('example.com')"),
    # ip / cidr
    ("ip family", "ip('192.168.0.1').family() == 4 && ip('::1').family() == 6"),
    ("ip tests", "ip('127.0.0.1').isLoopback() && ip('0.0.0.0').isUnspecified() && "
                 "ip('fe80::1').isLinkLocalUnicast() && ip('192.168.0.1').isGlobalUnicast()"),
    ("isIP / canonical", "isIP('1.2.3.4') && !isIP('1.2.3.4.5') && ip.isCanonical('2001:db8::abcd')"
                         " && !ip.isCanonical('2001:DB8::ABCD')"),
    ("cidr contains", "cidr('192.168.0.0/16').containsIP('192.168.1.1') && "
                      "cidr('192.168.0.0/16').containsCIDR('192.168.1.0/24') && "
                      "!cidr('192.168.0.0/24').containsCIDR('192.168.0.0/16')"),
    ("cidr parts", "cidr('192.168.0.5/24').prefixLength() == 24 && "
                   "cidr('192.168.0.5/24').masked() == cidr('192.168.0.0/24') && "
                   "cidr('192.168.0.5/24').ip() == ip('192.168.0.5')"),
    # quantity
    ("quantity compare", "quantity(object.spec.containers[0].resources.limits.memory)"
                         ".isLessThan(quantity('1Gi'))"),
    ("quantity equality", "quantity('1') == quantity('1000m') && "
                          "quantity('1Ki') == quantity('1024')"),
    ("quantity arithmetic", "quantity('50k').add(quantity('20k')) == quantity('70k') && "
                            "quantity('50k').sub(20000) == quantity('30k')"),
    ("quantity integer", "quantity('50k').isInteger() && quantity('50k').asInteger() == 50000 && "
                         "!quantity('1.5').isInteger()"),
    ("quantity misc", "quantity('-1').sign() == -1 && quantity('50.703k').asApproximateFloat() "
                      "== 50703.0 && quantity('1').compareTo(quantity('2')) == -1"),
    ("isQuantity", "isQuantity('500m') && !isQuantity('five')"),
    # the API server caps a quantity at the largest int64 and rounds one below 1n up to 1n
    ("quantity capped", "quantity('1e30') == quantity('9223372036854775807') && "
                        "quantity('-8Ei') == quantity('-9223372036854775807')"),
    ("quantity rounded up", "quantity('1e-12') == quantity('1n') && "
                            "quantity('-0.5n') == quantity('-1n') && quantity('0e-99') == "
                            "quantity('0')"),
    # semver
    ("semver compare", "semver('1.2.3').isLessThan(semver('1.10.0')) && "
                       "semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))"),
    ("semver parts", "semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && "
                     "semver('1.2.3').patch() == 3"),
    ("semver normalize", "semver('v01.2', true) == semver('1.2.0') && isSemver('v1.0', true) && "
                         "!isSemver('v1.0')"),
]  # fmt: skip
ERRORS = [
    ("charAt out of range", "'hello'.charAt(6) == ''"),
    ("substring reversed", "'tacocat'.substring(4, 2) == ''"),
    ("min of empty list", "[].min() == 0"),
    ("bad quantity", "quantity('five').sign() == 1"),
    ("non-integer quantity", "quantity('1.5').asInteger() == 1"),
    ("bad ip", "ip('1.2.3.4.5').family() == 4"),
    ("ipv4-mapped ipv6", "ip('::ffff:1.2.3.4').family() == 6"),
    ("bad semver", "semver('1.2').major() == 1"),
    ("bad url", "url('example.com').getHost() == ''"),
    ("bad regex", "'a'.find('(') == ''"),
    ("strings version 3", "'abc'.reverse() == 'cba'"),
    ("not in Kubernetes", "math.greatest(1, 2) == 2"),
]


@pytest.mark.parametrize(("name", "expression"), TRUE, ids=[c[0] for c in TRUE])
def test_documented_behaviour(name: str, expression: str) -> None:
    assert evaluate_bool(expression, {"object": POD}) is True


@pytest.mark.parametrize(("name", "expression"), ERRORS, ids=[c[0] for c in ERRORS])
def test_documented_errors_raise(name: str, expression: str) -> None:
    with pytest.raises(CelError):
        evaluate_bool(expression, {"object": POD})


@pytest.mark.timeout(20)
def test_a_hostile_quantity_costs_no_more_than_its_text() -> None:
    """A cluster's text such as ``1e999999999`` once made the library compute 10**999999999
    (hours, gigabytes, uninterruptible); the API server caps it, and so does the library."""
    huge = {"q": "1e999999999", "neg": "-1e999999999", "tiny": "1e-999999999"}
    expression = (
        "isQuantity(object.q) && quantity(object.q) == quantity('9223372036854775807') && "
        "quantity(object.neg).sign() == -1 && quantity(object.tiny) == quantity('1n') && "
        "!isQuantity('1e99999999999999999999')"
    )
    assert evaluate_bool(expression, {"object": huge}) is True


def test_variables_are_lazy_and_read_earlier_ones() -> None:
    variables = [
        ("names", "object.spec.containers.map(c, c.name)"),
        ("first", "variables.names[0]"),
        ("broken", "object.spec.nodeName"),  # an error, but never read
    ]
    program = BoolProgram("variables.first == 'web' && size(variables.names) == 1",
                          variables=variables)  # fmt: skip
    assert program({"object": POD}) is True
    reads_broken = BoolProgram("variables.broken == 'n1' || true", variables=variables)
    assert reads_broken({"object": POD}) is True  # CEL's || absorbs the error
    with pytest.raises(CelError, match="not defined before"):
        BoolProgram("variables.later == 1", variables=[("x", "variables.later"), ("later", "1")])
