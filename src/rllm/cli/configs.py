"""`rllm configs`: the shipped configs, by name (torchtune's `tune ls` / `tune cp`, which users know).

rllm configs                                   # every shipped config: its name, the command that runs it, one line
rllm configs cp arithmetic_grpo my.yaml        # a copy to edit; then: rllm train my.yaml
rllm train arithmetic_grpo trainer.total_steps=1   # train, sft, dpo, rft and eval take a shipped config by name

The YAML files live once, in the repository's `configs/`; the wheel carries them as `rllm/configs/*.yaml` (setup.py
copies them there when it builds), so a name resolves in a pip install and in a checkout alike.
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import rllm
from rllm.errors import RllmError

_DESCRIPTION_WIDTH = 80


def shipped_configs_dir() -> Path:
    """`rllm/configs/` inside an installed wheel, else the checkout's `configs/` (an editable install or src/)."""
    package = Path(rllm.__file__).resolve().parent
    installed = package / "configs"
    return installed if installed.is_dir() else package.parents[1] / "configs"


def shipped_configs() -> dict[str, Path]:
    """Every shipped config by name (its file name without `.yaml`), sorted."""
    return {path.stem: path for path in sorted(shipped_configs_dir().glob("*.yaml"))}


def resolve_config(config: str) -> str:
    """The file a config argument names: an existing path as given; a shipped config's name (`arithmetic_grpo`);
    or a README-style `configs/NAME.yaml` typed where there is no such file (a pip install). Anything else that
    looks like a path is returned unchanged, so that reading it reports the missing file."""
    if Path(config).is_file():
        return config
    shipped = shipped_configs()
    path = Path(config)
    if path.suffix in (".yaml", ".yml") and path.parent.name == "configs" and path.stem in shipped:
        return str(shipped[path.stem])
    if config in shipped:
        return str(shipped[config])
    if path.suffix in (".yaml", ".yml") or "/" in config or "\\" in config:
        return config
    raise RllmError(f"no config {config!r}: give a YAML path or a shipped config ({', '.join(shipped)}; rllm configs)")


def describe(path: Path) -> tuple[str, str]:
    """The command that runs a config (from its first comment line, `# rllm train configs/...`) and the first
    sentence of the comment that follows the command lines, cut to one line."""
    comments = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        comments.append(line.lstrip("#").strip())
    command = " ".join(comments[0].split()[:2]) if comments and comments[0].startswith("rllm ") else "rllm train"
    prose = " ".join(c for c in comments if not c.startswith(("rllm ", "first:", "first,")))
    sentence = re.split(r"(?<=[.;])\s", prose, maxsplit=1)[0].rstrip(";")
    if len(sentence) > _DESCRIPTION_WIDTH:
        sentence = sentence[: _DESCRIPTION_WIDTH - 1].rsplit(" ", 1)[0] + "…"
    return command, sentence


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("configs", help="list the shipped configs, or copy one to edit (rllm configs cp NAME DEST)")
    actions = p.add_subparsers(dest="action")
    cp = actions.add_parser("cp", help="copy a shipped config to a file to edit, e.g. rllm configs cp NAME my.yaml")
    cp.add_argument("name", help="a shipped config's name, e.g. arithmetic_grpo")
    cp.add_argument("dest", help="the file (or folder) to write; an existing file is not overwritten")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "cp":
        return copy_config(args.name, args.dest)
    return list_configs()


def list_configs() -> int:
    configs = shipped_configs()
    width = max(map(len, configs), default=0)
    for name, path in configs.items():
        command, description = describe(path)
        print(f"{name:<{width}}  {command:<10}  {description}")
    print("run one: rllm train NAME [key=value ...]   copy one to edit: rllm configs cp NAME my.yaml")
    return 0


def copy_config(name: str, dest: str) -> int:
    shipped = shipped_configs()
    if name not in shipped:
        raise RllmError(f"no shipped config {name!r}: choose one of {', '.join(shipped)}")
    target = Path(dest)
    if target.is_dir():
        target = target / f"{name}.yaml"
    if not target.parent.is_dir():
        raise RllmError(f"folder {target.parent} does not exist: create it first, or give another destination")
    if target.exists():
        raise RllmError(f"{target} exists: give another destination (rllm configs cp {name} OTHER.yaml)")
    shutil.copyfile(shipped[name], target)
    print(f"copied {name} to {target}   (run it: {describe(shipped[name])[0]} {target})")
    return 0
