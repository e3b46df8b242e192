#!/bin/bash
# The verifier: the counts computed from a pristine copy of the log (/tests/access.log) must equal the agent's file.
mkdir -p /logs/verifier
expected=$(awk '{ n[$9]++ } END { for (code in n) print code, n[code] }' /tests/access.log | sort -n)
if [ -f /app/status_counts.txt ] && [ "$(sed 's/[[:space:]]*$//' /app/status_counts.txt)" = "$expected" ]; then
  echo "status counts match"
  echo 1 > /logs/verifier/reward.txt
else
  echo "expected:"; echo "$expected"
  echo "got:"; cat /app/status_counts.txt 2>/dev/null || echo "(no /app/status_counts.txt)"
  echo 0 > /logs/verifier/reward.txt
fi
