import unittest

from textkit import slugify, title_case, wrap
import textkit


class HiddenTest(unittest.TestCase):
    def test_truncates_to_width(self):
        self.assertEqual(textkit.truncate("hello world", 8), "hello...")

    def test_short_text_unchanged(self):
        self.assertEqual(textkit.truncate("short", 10), "short")

    def test_custom_suffix(self):
        self.assertEqual(textkit.truncate("abcdefghij", 6, suffix="~"), "abcde~")

    def test_slug_simple(self):
        self.assertEqual(slugify("Forge Agent"), "forge-agent")

    def test_title_middle_small_word(self):
        self.assertEqual(title_case("the lord of the rings"), "The Lord of the Rings")

    def test_wrap_greedy(self):
        self.assertEqual(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"])


if __name__ == "__main__":
    unittest.main()
