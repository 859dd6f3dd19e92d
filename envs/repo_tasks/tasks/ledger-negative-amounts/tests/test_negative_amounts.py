import unittest

from ledger import Account, InsufficientFunds, Money, transfer


class HiddenTest(unittest.TestCase):
    def test_negative_amount(self):
        self.assertEqual(str(Money(-150)), "-1.50 USD")

    def test_small_negative_amount(self):
        self.assertEqual(str(Money(-5, "EUR")), "-0.05 EUR")

    def test_deposit_and_withdraw(self):
        account = Account("ana")
        account.deposit(Money(1000))
        account.withdraw(Money(250))
        self.assertEqual(account.balance.cents, 750)
        self.assertEqual([kind for kind, _ in account.transactions], ["deposit", "withdraw"])

    def test_positive_str(self):
        self.assertEqual(str(Money(705, "EUR")), "7.05 EUR")

    def test_transfer_moves_money(self):
        a, b = Account("a"), Account("b")
        a.deposit(Money(300))
        transfer(a, b, Money(100))
        self.assertEqual((a.balance.cents, b.balance.cents), (200, 100))


if __name__ == "__main__":
    unittest.main()
