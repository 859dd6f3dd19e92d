"""Tasks of the sql_mcp env: a small SQLite database generated from a seed, and a question
whose answer is one integer that a query over it gives."""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
from typing import Any

__all__ = ["TABLE", "database_bytes", "generate_tasks", "query_result_text", "task_database"]

CITIES = ("Oslo", "Lima", "Pune", "Kyiv", "Doha", "Cork")
PRODUCTS = ("tea", "rice", "soap", "salt", "milk")
TABLE = "sales(city TEXT, product TEXT, units INTEGER)"
ROWS = 8

QUESTIONS = (
    (
        "How many units were sold in {city} in total?",
        "SELECT SUM(units) FROM sales WHERE city = '{city}'",
    ),
    (
        "How many sales of {product} are there?",
        "SELECT COUNT(*) FROM sales WHERE product = '{product}'",
    ),
    (
        "What is the most units sold in one sale of {product}?",
        "SELECT MAX(units) FROM sales WHERE product = '{product}'",
    ),
)


def _rows(rng: random.Random) -> list[tuple[str, str, int]]:
    return [(rng.choice(CITIES), rng.choice(PRODUCTS), rng.randint(1, 20)) for _ in range(ROWS)]


def task_database(rows: list[list[Any]], path: str = ":memory:") -> sqlite3.Connection:
    """A database holding the `sales` rows of a task (in memory, or a new file at `path`)."""
    db = sqlite3.connect(path)
    db.execute(f"CREATE TABLE {TABLE}")
    db.executemany("INSERT INTO sales VALUES (?, ?, ?)", [tuple(r) for r in rows])
    db.commit()
    return db


def database_bytes(rows: list[list[Any]]) -> bytes:
    """The task's database as the bytes of an SQLite file (written into the workspace)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "task.db")
        task_database(rows, path).close()
        with open(path, "rb") as f:
            return f.read()


def query_result_text(rows: list[list[Any]], query: str) -> str:
    """What mcp-server-sqlite's read_query answers for `query`: ``str`` of the list of row
    dicts (the server formats its results this way); used to write demonstrations offline."""
    db = task_database(rows)
    db.row_factory = sqlite3.Row
    return str([dict(r) for r in db.execute(query).fetchall()])


def generate_tasks(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """`n` tasks: `task_id`, `prompt`, `rows` (the database), `query` (a reference query) and
    `answer` (an integer, as text)."""
    rng = random.Random(seed)
    tasks = []
    while len(tasks) < n:
        rows = _rows(rng)
        question, query = rng.choice(QUESTIONS)
        city, product, _ = rng.choice(rows)  # ask about something the table holds
        question, query = (
            question.format(city=city, product=product),
            query.format(city=city, product=product),
        )
        (answer,) = task_database(rows).execute(query).fetchone()
        index = len(tasks)
        tasks.append(
            {
                "task_id": f"sql-{seed}-{index}",
                "prompt": f"Table {TABLE}. {question}",
                "rows": [list(r) for r in rows],
                "query": query,
                "answer": str(answer),
            }
        )
    return tasks
