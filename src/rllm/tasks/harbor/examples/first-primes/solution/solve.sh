#!/bin/bash
# The reference solution: factor(1) prints a prime as its only factor.
set -euo pipefail
seq 2 300 | factor | awk 'NF == 2 && n < 50 { print $2; n++ }' > /app/primes.txt
