"""Assertions split into probes (inside) and checks (outside): each form keeps its expected
operand out of the probe program and decides a right and a wrong value as unittest would.
(The probe programs run here, in-process: they are this file's own test code.)"""

from __future__ import annotations

import pytest

from forge_agent.rewards.probe_runtime import Probe
from forge_agent.rewards.probe_verdicts import decode, judge_test
from forge_agent.rewards.probes import split_tests

# (assertion over f, a right f, a wrong f, a secret that must not reach the probe program)
FORMS = {
    "assert-equal": ("self.assertEqual(f(2), [4, 'x'])", lambda x: [4, "x"], lambda x: [4], "'x'"),
    "assert-statement": ("assert f(2) == (1, 2.5)", lambda x: (1, 2.5), lambda x: [1, 2.5], "2.5"),
    "tolerance": ("assert abs(f(2) - 2.0/3.0) < 1e-6", lambda x: 2 / 3, lambda x: 0.6, "1e-06"),
    "almost-equal": ("self.assertAlmostEqual(f(2), 0.125, places=3)", lambda x: 0.1251,
                     lambda x: 0.13, "0.125"),
    "true": ("self.assertTrue(f(2))", lambda x: [1], lambda x: [], "True"),
    "false": ("self.assertFalse(f(2))", lambda x: 0, lambda x: 1, "not"),
    "is-none": ("self.assertIsNone(f(2))", lambda x: None, lambda x: 0, "None"),
    "in": ("self.assertIn(f(2), {3, 4})", lambda x: 4, lambda x: 5, "{3, 4}"),
    "raises": ("with self.assertRaises(KeyError):\n            f(2)", lambda x: {}[x],
               lambda x: [][x], "KeyError"),
    "raises-regex": ("self.assertRaisesRegex(ValueError, 'bad', f, 2)",
                     lambda x: int("bad"), lambda x: int("9"), "'bad'"),
    "isinstance": ("self.assertIsInstance(f(2), dict)", lambda x: {}, lambda x: [], "dict"),
    "count-equal": ("self.assertCountEqual(f(2), [1, 1, 2])", lambda x: [2, 1, 1],
                    lambda x: [1, 2, 2], "[1, 1, 2]"),
}  # fmt: skip


def _run(source: str, f) -> tuple[str, bool]:
    split = split_tests(source)
    probe = Probe()
    namespace = {"__probe__": probe, "f": f, "__name__": "tests"}
    exec(compile(split.program, "<probe>", "exec"), namespace)
    end = "ok"
    method = split.renamed["T.test_it"].split(".")[1]  # the program names tests by number
    try:
        getattr(namespace["T"](method), method)()
    except Exception as exc:
        end = f"error: {exc!r}"
    return judge_test(split, ("", "T.test_it"), end, probe.take())


def _source(assertion: str) -> str:
    head = "import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n"
    return f"{head}        {assertion}\n"


@pytest.mark.parametrize("form", list(FORMS), ids=list(FORMS))
def test_each_assertion_form_is_judged_outside_without_its_expected_value(form):
    assertion, right, wrong, secret = FORMS[form]
    source = _source(assertion)
    assert secret not in split_tests(source).program
    assert _run(source, right) == ("passed", False)
    outcome, forged = _run(source, wrong)
    assert outcome.startswith("failed: the assertion at line 4") and not forged


def test_an_assertion_without_a_literal_is_exposed_and_still_judged():
    source = _source("self.assertEqual(f(2), f(3))")
    split = split_tests(source)
    assert split.exposed("T.test_it") == 1
    assert _run(source, lambda x: 1)[0] == "passed"
    assert _run(source, lambda x: x)[0].startswith("failed")


def test_a_test_whose_assertion_never_ran_fails():
    split = split_tests(_source("self.assertEqual(f(2), 4)"))
    assert judge_test(split, ("", "T.test_it"), "ok", []) == (
        "failed: the assertion at line 4 never ran",
        False,
    )


def test_a_test_is_named_by_number_in_its_program():
    split = split_tests(_source("self.assertEqual(f(2), 4)"))
    assert "test_it" not in split.program and split.renamed == {"T.test_it": "T.test_0"}


def test_a_record_no_assertion_writes_is_forged():
    split = split_tests(_source("self.assertEqual(f(2), 4)"))
    outcome, forged = judge_test(split, ("", "T.test_it"), "ok", [[7, [["i", "4"]]]])
    assert forged and "no assertion writes" in outcome


def test_values_the_probe_cannot_carry_equal_nothing():
    probe = Probe()
    assert repr(decode(probe.encode(object()))) == "<object of class object>"
    deep: list = []
    for _ in range(100):
        deep = [deep]
    assert decode(probe.encode(deep)) != deep
    with pytest.raises(ValueError, match="unknown tag"):
        decode(["pickle", "..."])
