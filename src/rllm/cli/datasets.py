"""`rllm datasets list|show|pull`: the benchmark catalog (`rllm.tasks.catalog`).

rllm datasets list                        # every benchmark by name, with its category and source
rllm datasets list --category math
rllm datasets show gsm8k                  # its source, splits, fields, verifier, template and the commands
rllm datasets pull gsm8k --data-dir data  # download it from the Hugging Face hub into data/openai/gsm8k/
rllm eval gsm8k --data-dir data           # then evaluate (or train) on the local copy, offline
"""

from __future__ import annotations

import argparse

from rllm.tasks.catalog.entry import CATEGORIES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("datasets", help="the benchmark catalog: list, show, pull")
    actions = p.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every benchmark by name")
    listing.add_argument("--category", choices=CATEGORIES, default=None, help="only this category")
    listing.add_argument("--markdown", action="store_true", help="as a Markdown table (the docs' catalog page)")
    listing.set_defaults(run=run_list)
    show = actions.add_parser("show", help="one benchmark: source, splits, fields, verifier, template")
    show.add_argument("name")
    show.set_defaults(run=run_show)
    pull = actions.add_parser("pull", help="download a benchmark from the Hugging Face hub into a data directory")
    pull.add_argument("name", nargs="+")
    pull.add_argument("--data-dir", default=None, help="where to put it (default: $RLLM_DATA)")
    pull.set_defaults(run=run_pull)


def run_list(args: argparse.Namespace) -> int:
    from rllm.tasks.catalog import CATALOG

    benches = sorted(
        (b for b in CATALOG.values() if args.category in (None, b.category)),
        key=lambda b: (CATEGORIES.index(b.category), b.name),
    )
    print(markdown_table(benches) if args.markdown else plain_table(benches))
    return 0


def plain_table(benches: list) -> str:
    width = max(len(b.name) for b in benches)
    lines = [f"{b.name:<{width}}  {b.category:<21}  {b.source:<45}  {b.description}" for b in benches]
    return "\n".join([*lines, "", f"{len(benches)} benchmarks; `rllm datasets show NAME` for one, `rllm eval NAME`"])


def markdown_table(benches: list) -> str:
    rows = [
        "| run it | category | source (config) | eval / train split | verifier | what it is |",
        "|---|---|---|---|---|---|",
    ]
    for b in benches:
        configs = (
            f" ({len(b.configs)} configs)"
            if len(b.configs) > 3
            else (f" ({', '.join(b.configs)})" if b.configs else "")
        )
        splits = f"{b.eval_split} / {b.train_split or '-'}"
        source = f"[{b.source}]({b.homepage}){configs}" if b.homepage else f"{b.source}{configs}"
        rows.append(f"| `rllm eval {b.name}` | {b.category} | {source} | {splits} | {b.verifier} | {b.description} |")
    return "\n".join(rows)


def run_show(args: argparse.Namespace) -> int:
    from rllm.tasks.catalog import get_benchmark

    bench = get_benchmark(args.name)
    train = bench.train_split or f"{bench.eval_split} (no training split: training uses the evaluation split)"
    lines = [
        f"{bench.name}: {bench.description}",
        f"  category    {bench.category}",
        f"  source      {bench.source}" + (f"  ({bench.homepage})" if bench.homepage else ""),
        f"  configs     {', '.join(bench.configs) or 'default'}",
        f"  files       {', '.join(bench.data_files)}" if bench.data_files else None,
        f"  eval split  {bench.eval_split}",
        f"  train split {train}",
        f"  fields      {', '.join(f'{k} <- {v}' for k, v in bench.fields.items()) or '-'}"
        + (f"; then rows.{bench.convert}" if bench.convert else ""),
        f"  verifier    {bench.verifier}",
        f"  played by   {bench.agent}",
        "  template    " + bench.template.replace("{{", "{").replace("}}", "}").replace("\n", "\n              "),
        "",
        f"  rllm eval {bench.name}                  # from the hub (or --data-dir DIR / $RLLM_DATA: a local copy)",
        f"  rllm train {bench.name}                 # GRPO with the default config; key=value overrides",
        f"  rllm datasets pull {bench.name} --data-dir DIR",
    ]
    print("\n".join(line for line in lines if line is not None))
    return 0


def run_pull(args: argparse.Namespace) -> int:
    from rllm.tasks.catalog import get_benchmark
    from rllm.tasks.catalog.loading import BenchmarkDataError, data_dir_from_env, pull

    data_dir = data_dir_from_env(args.data_dir)
    if data_dir is None:
        raise BenchmarkDataError("rllm datasets pull needs --data-dir DIR (or $RLLM_DATA): where to put the data")
    for name in args.name:
        target = pull(get_benchmark(name), data_dir)
        print(f"{name}: {target}   (use it: rllm eval {name} --data-dir {data_dir})")
    return 0
