"""A small shop, written as a user of forge-agent would: three typed tools, a task that needs all
three in order, and demonstrations for the warm start."""

import json
import random

from forge_agent.env import ToolEnv, holdout

PRODUCTS = ["mug", "lamp", "kettle", "chair", "towel", "clock", "vase", "scarf"]


def make_task(rng: random.Random) -> dict:
    names = rng.sample(PRODUCTS, 5)
    catalog = {
        name: {"sku": f"s{rng.randrange(100, 1000)}", "price": rng.randrange(3, 40)}
        for name in names
    }
    item, qty = rng.choice(names), rng.randint(2, 9)
    price = catalog[item]["price"]
    total = qty * price - (qty // 5) * price  # every fifth unit is free
    return {
        "task_id": f"{item}-{qty}-{catalog[item]['sku']}",
        "prompt": f"How much do {qty} {item}s cost in total at the shop?",
        "catalog": catalog,
        "item": item,
        "qty": qty,
        "answer": str(total),
    }


class ShopEnv(ToolEnv):
    system_prompt = (
        "Find the product's sku, look up its price, ask for a quote for the quantity, then "
        "reply with only the quoted total."
    )
    required_fields = ("prompt", "catalog", "answer")

    def get_tools(self):
        catalog = self.task["catalog"]
        by_sku = {v["sku"]: v for v in catalog.values()}

        def find(name: str) -> str:
            """Find a product's sku by its name.

            Args:
                name: The product name, e.g. mug.
            """
            entry = catalog.get(name.strip().lower().rstrip("s"))
            return f"sku {entry['sku']}" if entry else f"no product {name!r}"

        def price(sku: str) -> str:
            """The unit price of a product.

            Args:
                sku: The product's sku, e.g. s417.
            """
            entry = by_sku.get(sku.strip())
            return f"unit price {entry['price']}" if entry else f"no sku {sku!r}"

        def quote(sku: str, quantity: int) -> str:
            """The total for a quantity of a product (every fifth unit is free).

            Args:
                sku: The product's sku.
                quantity: How many units.
            """
            entry = by_sku.get(sku.strip())
            if entry is None:
                return f"no sku {sku!r}"
            p = entry["price"]
            return f"total {quantity * p - (quantity // 5) * p}"

        return [find, price, quote]

    def tasks(self, split: str, n: int, seed: int) -> list[dict]:
        made = [make_task(random.Random(f"shop-{seed}-{i}")) for i in range(n)]
        return holdout(made, split, key=lambda t: t["task_id"])

    def default_task(self, seed: int) -> dict:
        return make_task(random.Random(seed))

    def judge(self, answer: str):
        right = answer.strip().rstrip(".") == self.task["answer"]
        return {"correct": float(right)}, {"outcome": "correct" if right else "wrong"}

    def demonstrations(self, n: int, seed: int, demo_fraction: float) -> list[list[dict]]:
        """Full solutions for `demo_fraction` of them; the rest skip the quote and multiply
        (wrong whenever a fifth unit is free)."""
        rng, demos = random.Random(seed), []
        for _ in range(n):
            task = make_task(rng)
            entry = task["catalog"][task["item"]]
            sku, p, qty = entry["sku"], entry["price"], task["qty"]
            steps = [
                ("find", {"name": task["item"]}, f"sku {sku}"),
                ("price", {"sku": sku}, f"unit price {p}"),
            ]
            if rng.random() < demo_fraction:
                steps.append(("quote", {"sku": sku, "quantity": qty}, f"total {task['answer']}"))
                final = task["answer"]
            else:
                final = str(qty * p)
            convo = [
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": task["prompt"]},
            ]
            for k, (name, args, out) in enumerate(steps):
                call = {
                    "id": str(k),
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                convo.append({"role": "assistant", "content": "", "tool_calls": [call]})
                convo.append({"role": "tool", "tool_call_id": str(k), "name": name, "content": out})
            convo.append({"role": "assistant", "content": final})
            demos.append(convo)
        return demos
