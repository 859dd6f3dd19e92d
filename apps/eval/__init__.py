"""`python -m apps.eval`: evaluate a policy on held-out tasks (pass@k, mean reward, traces)."""
