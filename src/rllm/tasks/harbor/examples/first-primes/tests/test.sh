#!/bin/bash
# The verifier: /app/primes.txt must hold exactly the first 50 primes, one per line.
mkdir -p /logs/verifier
if python3 /tests/check_primes.py /app/primes.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
