"""The scripted oracle: its rules on hand-written pages (no browser), and real episodes in Chromium that it solves
(the observation and the actions suffice). All 30 tasks x 10 seeds: benchmarks/web_oracle.py."""

from __future__ import annotations

import pytest

from rllm.tasks.web.oracle import ORACLE_TASKS, elements, oracle_action, run_oracle

CHECKBOXES = """- generic [ref=e2]:
  - generic [ref=e3]: Select USa, DKkQH and click Submit.
  - generic [ref=e4]:
    - generic [ref=e6]:
      - checkbox "USa" [checked] [ref=e7]
      - text: USa
    - generic [ref=e8]:
      - checkbox "DKkQH" [ref=e9]
      - text: DKkQH
    - generic [ref=e11]:
      - checkbox "zz" [ref=e12]
  - button "Submit" [ref=e10]"""


def test_the_snapshot_parser_reads_roles_names_refs_values_and_states():
    tree = CHECKBOXES + '\n    - \'link "Tab #1" [ref=f1e7] [cursor=pointer]\':\n    - generic [ref=e20]: "-3"'
    found = {e.ref: e for e in elements(tree)}
    assert found["e7"].role == "checkbox" and found["e7"].name == "USa" and found["e7"].checked
    assert not found["e9"].checked and found["f1e7"].role == "link" and found["f1e7"].name == "Tab #1"
    assert found["e3"].value == "Select USa, DKkQH and click Submit." and found["e20"].value == "-3"


def test_rules_answer_from_the_page_as_it_is_now():
    goal = "Select USa, DKkQH and click Submit."
    assert oracle_action("click-checkboxes", {"goal": goal, "axtree": CHECKBOXES}) == "check('e9')"
    ticked = CHECKBOXES.replace('"DKkQH" [ref=e9]', '"DKkQH" [checked] [ref=e9]')
    assert oracle_action("click-checkboxes", {"goal": goal, "axtree": ticked}) == "click('e10')"
    algebra = '- generic [ref=e5]: 7 - x = -2\n- textbox [ref=e7]\n- button "Submit" [ref=e8]'
    assert oracle_action("simple-algebra", {"goal": "Solve for x", "axtree": algebra}) == "fill('e7', '9')\nclick('e8')"
    with pytest.raises(KeyError, match="no rule for 'drag-box'"):
        oracle_action("drag-box", {"goal": "", "axtree": ""})


@pytest.mark.browser
@pytest.mark.parametrize(
    "task", ["click-link", "click-checkboxes", "choose-list", "login-user", "click-collapsible", "multi-layouts"]
)
def test_the_oracle_solves_real_pages(chromium, task):
    assert task in ORACLE_TASKS
    for seed in (0, 1):
        reward, steps = run_oracle(task, seed)
        assert reward == 1.0, (task, seed)
        assert steps <= 3
