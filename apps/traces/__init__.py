"""`python -m apps.traces <file.jsonl>`: render trajectory traces as an HTML page."""
