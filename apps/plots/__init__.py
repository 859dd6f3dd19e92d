"""`python -m apps.plots <metrics.jsonl> --out curves.png`: training curves from a metrics JSONL."""
