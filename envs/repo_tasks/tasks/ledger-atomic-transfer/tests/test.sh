#!/bin/sh
# Harbor's verifier entry point: the hidden tests over /workspace; reward 1 when all pass.
mkdir -p /logs/verifier
cd /workspace
if python3 -m unittest /tests/test_atomic_transfer.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
