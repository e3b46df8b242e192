"""Screenshots of a run in `rllm view`, taken in headless Chromium (Debian's, through Playwright): the run page
(curves and episode table), one training episode's conversation and token overlay, and the comparison of a validation
task before and after training. The README's screenshots are made this way from the demo run:

    rllm train configs/arithmetic_grpo.yaml trainer.total_steps=6 trainer.name=arithmetic-grpo
    python examples/viewer_screenshots.py runs/arithmetic-grpo docs/viewer
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

from rllm.runs import load_metrics
from rllm.tasks.web.browser import find_chromium
from rllm.viewer import start_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a training run directory")
    parser.add_argument("out", type=Path, help="folder for the PNG files")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    last = max(m["step"] for m in load_metrics(args.run) if "reward_mean" in m)
    server = start_server([args.run])
    run = args.run.name
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium())
        page = browser.new_page(viewport={"width": 1280, "height": 860})

        def shot(fragment: str, name: str) -> None:
            page.goto(server.url + fragment)
            page.wait_for_function("document.body.dataset.ready === location.hash", timeout=60_000)
            page.screenshot(path=str(args.out / name))
            print(args.out / name)

        shot(f"#/run/{run}?split=train&step={last}&sort=-reward", "run.png")
        line = page.locator("[data-testid=episodes] tr[data-line]").first.get_attribute("data-line")
        shot(f"#/run/{run}/episode/{line}", "conversation.png")
        shot(f"#/run/{run}/episode/{line}?view=tokens", "overlay.png")
        page.locator(".overlay .tok.trn, .overlay .tok.zero").first.hover()  # a trained token, whatever its advantage
        page.screenshot(path=str(args.out / "overlay.png"))
        task = _improved_task(server.url, run, last)
        shot(f"#/compare?a={run}&b={run}&split=val&sa=0&sb={last}&task={task}", "compare.png")
        browser.close()
    server.shutdown()


def _improved_task(url: str, run: str, last: int) -> str:
    """A validation task wrong before training and right after it (else the first one)."""

    def correct(step: int) -> dict[str, bool]:
        with urllib.request.urlopen(f"{url}api/run/{run}/episodes?split=val&step={step}&per_page=500") as response:
            return {row["task_id"]: row["correct"] for row in json.loads(response.read())["rows"]}

    before, after = correct(0), correct(last)
    return next((task for task in before if not before[task] and after.get(task)), next(iter(before)))


if __name__ == "__main__":
    main()
