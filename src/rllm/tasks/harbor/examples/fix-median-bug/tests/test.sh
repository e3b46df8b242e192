#!/bin/bash
# The verifier: run the checks in /tests/test_stats.py against /app/stats.py and write the reward.
mkdir -p /logs/verifier
if python3 /tests/test_stats.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
