#!/bin/bash
# The reference solution: the 9th field of each line is the status code.
set -euo pipefail
awk '{ print $9 }' /app/access.log | sort | uniq -c | awk '{ print $2, $1 }' | sort -n > /app/status_counts.txt
