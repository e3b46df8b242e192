"""Grade /app/out/report.json against totals computed from a pristine copy of the orders.

Writes reward.json: "reward" is the share of customers whose total is right (to the cent), "valid_json" is 1 when
the report is a JSON object. Usage: check_report.py ORDERS_CSV REPORT_JSON REWARD_JSON
"""

import csv
import json
import sys

orders, report_path, reward_path = sys.argv[1:4]
expected = {}
with open(orders, newline="") as f:
    for row in csv.DictReader(f):
        cents = round(int(row["quantity"]) * float(row["unit_price"]) * 100)
        expected[row["customer"]] = expected.get(row["customer"], 0) + cents
try:
    with open(report_path) as f:
        report = json.load(f)
except (OSError, ValueError) as e:
    print(f"no readable report: {e}")
    report = None
valid = isinstance(report, dict)
right = 0
for customer, cents in sorted(expected.items()):
    got = report.get(customer) if valid else None
    ok = isinstance(got, (int, float)) and round(got * 100) == cents
    right += ok
    print(f"{customer}: expected {cents / 100:.2f}, got {got!r} -> {'ok' if ok else 'wrong'}")
with open(reward_path, "w") as f:
    json.dump({"reward": right / len(expected), "valid_json": 1.0 if valid else 0.0}, f)
