import unittest

from textkit import slugify, title_case, wrap


class HiddenTest(unittest.TestCase):
    def test_first_word_capitalized(self):
        self.assertEqual(title_case("the old man and the sea"), "The Old Man and the Sea")

    def test_last_word_capitalized(self):
        self.assertEqual(title_case("what dreams are made of"), "What Dreams Are Made Of")

    def test_slug_simple(self):
        self.assertEqual(slugify("Forge Agent"), "forge-agent")

    def test_title_middle_small_word(self):
        self.assertEqual(title_case("Lord OF rings"), "Lord of Rings")

    def test_wrap_greedy(self):
        self.assertEqual(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"])


if __name__ == "__main__":
    unittest.main()
