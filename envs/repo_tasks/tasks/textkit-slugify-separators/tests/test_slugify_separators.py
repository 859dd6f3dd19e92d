import unittest

from textkit import slugify, title_case, wrap


class HiddenTest(unittest.TestCase):
    def test_collapses_runs_of_separators(self):
        self.assertEqual(slugify("Hello,  World!"), "hello-world")

    def test_collapses_mixed_punctuation(self):
        self.assertEqual(slugify("a -- b__c"), "a-b-c")

    def test_slug_simple(self):
        self.assertEqual(slugify("Forge Agent"), "forge-agent")

    def test_title_middle_small_word(self):
        self.assertEqual(title_case("the lord of the rings"), "The Lord of the Rings")

    def test_wrap_greedy(self):
        self.assertEqual(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"])


if __name__ == "__main__":
    unittest.main()
