import unittest

from textkit import slugify, title_case, wrap


class HiddenTest(unittest.TestCase):
    def test_long_word_gets_its_own_line(self):
        self.assertEqual(
            wrap("see https://example.com/a/long/path now", 10),
            ["see", "https://example.com/a/long/path", "now"],
        )

    def test_only_a_long_word(self):
        self.assertEqual(wrap("abcdefghijkl", 4), ["abcdefghijkl"])

    def test_slug_simple(self):
        self.assertEqual(slugify("Forge Agent"), "forge-agent")

    def test_title_middle_small_word(self):
        self.assertEqual(title_case("the lord of the rings"), "The Lord of the Rings")

    def test_wrap_greedy(self):
        self.assertEqual(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"])


if __name__ == "__main__":
    unittest.main()
