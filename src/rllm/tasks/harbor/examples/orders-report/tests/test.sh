#!/bin/bash
# The verifier: /tests/check_report.py writes /logs/verifier/reward.json (partial credit: the share of customers
# whose total is right).
mkdir -p /logs/verifier
python3 /tests/check_report.py /tests/orders.csv /app/out/report.json /logs/verifier/reward.json
