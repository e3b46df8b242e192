#!/bin/bash
# The reference solution: sum quantity * unit_price per customer with Python's csv module.
set -euo pipefail
mkdir -p /app/out
python3 - <<'PY'
import csv
import json

totals = {}
with open("/app/data/orders.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["customer"]] = totals.get(row["customer"], 0.0) + int(row["quantity"]) * float(row["unit_price"])
with open("/app/out/report.json", "w") as f:
    json.dump({customer: round(total, 2) for customer, total in sorted(totals.items())}, f, indent=2)
PY
