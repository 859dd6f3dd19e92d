import unittest

from ledger import Account, InsufficientFunds, Money, transfer


class HiddenTest(unittest.TestCase):
    def test_adding_other_currency_raises(self):
        with self.assertRaises(ValueError):
            Money(100, "USD") + Money(100, "EUR")

    def test_subtracting_other_currency_raises(self):
        with self.assertRaises(ValueError):
            Money(100, "USD") - Money(1, "GBP")

    def test_deposit_of_other_currency_refused(self):
        account = Account("ana", "USD")
        with self.assertRaises(ValueError):
            account.deposit(Money(100, "EUR"))

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
