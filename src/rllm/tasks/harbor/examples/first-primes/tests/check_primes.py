"""Exit 0 when the file named on the command line holds the first 50 primes, one per line (blank lines ignored)."""

import sys


def first_primes(count):
    primes, candidate = [], 2
    while len(primes) < count:
        if all(candidate % p for p in primes if p * p <= candidate):
            primes.append(candidate)
        candidate += 1
    return primes


try:
    with open(sys.argv[1]) as f:
        numbers = [line.strip() for line in f if line.strip()]
except OSError as e:
    sys.exit(f"cannot read {sys.argv[1]}: {e}")
expected = [str(p) for p in first_primes(50)]
if numbers != expected:
    sys.exit(f"expected the first 50 primes, got {len(numbers)} lines starting {numbers[:5]}")
print("the first 50 primes")
