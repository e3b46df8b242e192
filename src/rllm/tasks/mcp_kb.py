"""The `mcp_kb` task: questions about fictional planets that need the tools of a small example MCP server.

Parts: the server (`build_server`) and its fact table, `make_mcp_kb_tasks` (the generator), `mcp_kb_reward`, and
`MCPKnowledgeBaseEnv`, which starts the server over stdio for each episode and closes it after; the agent is the
reusable `rllm.agents.tool.ToolAgent`.

Run the server with `python -m rllm.tasks.mcp_kb` (stdio) or `python -m rllm.tasks.mcp_kb --http 8765`
(streamable HTTP at http://127.0.0.1:8765/mcp). Its tools:

- `lookup(entity, attribute)`: one fact from the table, e.g. "Dexsen orbit_period = 545.3 day";
- `convert(value, from_unit, to_unit)`: length, mass and time units, e.g. 545.3 day -> 13087.2 hour.

Choices:
- The planets are generated from syllables with a fixed seed, so a model cannot know the facts and must call the
  tools; the table is built once here and both the server and the task answers read it, so they cannot disagree.
- Questions are short (every prompt token is paid once per sample) and mix one-call questions (moons, discoverer)
  with two-call ones (a lookup, then a conversion to another unit).
- The reward reads the LAST `<answer>...</answer>` in the reply (the whole reply when there is none): a numeric
  answer must be within 1% of the truth (the last number in the answer counts, commas ignored), a string answer
  must match case-insensitively, ignoring surrounding whitespace and punctuation.
- The server imports the MCP SDK only when it runs, so the task set and the reward work without the `mcp` package.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from typing import Any

from rllm.agents.tool import ToolAgent
from rllm.envs.tool import MCPEnvironment
from rllm.tasks import Task

__all__ = [
    "ATTRIBUTES",
    "ONE_CALL_KINDS",
    "PLANETS",
    "QUESTION_KINDS",
    "MCPKnowledgeBaseEnv",
    "build_server",
    "convert_units",
    "lookup_fact",
    "make_mcp_kb_tasks",
    "mcp_kb_reward",
    "mcp_kb_server_spec",
]

# attribute -> unit of the stored value ("" for a count, None for a string)
ATTRIBUTES: dict[str, str | None] = {
    "orbit_period": "day",
    "radius": "km",
    "star_distance": "km",
    "mass": "t",
    "moons": "",
    "discoverer": None,
}

_UNITS: dict[str, tuple[str, float]] = {  # unit -> (dimension, size in the dimension's base unit)
    "mm": ("length", 1e-3),
    "cm": ("length", 1e-2),
    "m": ("length", 1.0),
    "km": ("length", 1e3),
    "in": ("length", 0.0254),
    "ft": ("length", 0.3048),
    "mi": ("length", 1609.344),
    "g": ("mass", 1e-3),
    "kg": ("mass", 1.0),
    "t": ("mass", 1e3),
    "lb": ("mass", 0.45359237),
    "s": ("time", 1.0),
    "min": ("time", 60.0),
    "hour": ("time", 3600.0),
    "day": ("time", 86400.0),
    "week": ("time", 604800.0),
    "year": ("time", 365.0 * 86400.0),
}
_UNIT_ALIASES = {
    "h": "hour",
    "hours": "hour",
    "hr": "hour",
    "days": "day",
    "d": "day",
    "weeks": "week",
    "years": "year",
    "yr": "year",
    "minute": "min",
    "minutes": "min",
    "sec": "s",
    "second": "s",
    "seconds": "s",
    "mile": "mi",
    "miles": "mi",
    "meter": "m",
    "meters": "m",
    "kilometer": "km",
    "kilometers": "km",
    "tonne": "t",
    "tonnes": "t",
    "kilogram": "kg",
    "kilograms": "kg",
    "pound": "lb",
    "pounds": "lb",
    "feet": "ft",
    "foot": "ft",
    "inch": "in",
    "inches": "in",
    "gram": "g",
    "grams": "g",
}

_SYLLABLES = ["zor", "vath", "kel", "mira", "dun", "qua", "lis", "tre", "ob", "nax", "ul", "sen", "py", "rho", "dex"]
_DISCOVERERS = ["Ilsa Marrow", "Tobin Quell", "Reyna Ostrava", "Caspian Vue", "Odile Fenwick", "Hale Dorsey"]


def _make_planets(n: int = 30, seed: int = 20240607) -> dict[str, dict[str, Any]]:
    rng = random.Random(seed)
    planets: dict[str, dict[str, Any]] = {}
    while len(planets) < n:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(2)).capitalize()
        if name in planets:
            continue
        planets[name] = {
            "orbit_period": round(rng.uniform(20.0, 900.0), 1),
            "radius": rng.randrange(1500, 70000, 10),
            "star_distance": rng.randrange(10, 900) * 1_000_000,
            "mass": round(rng.uniform(1.0, 9.9), 2) * 10 ** rng.randrange(20, 25),
            "moons": rng.randrange(0, 14),
            "discoverer": rng.choice(_DISCOVERERS),
        }
    return planets


PLANETS: dict[str, dict[str, Any]] = _make_planets()


def _format_number(x: float) -> str:
    return f"{x:.6g}" if abs(x) >= 1e15 or (x != 0 and abs(x) < 1e-4) else f"{round(x, 4):g}"


def lookup_fact(entity: str, attribute: str) -> str:
    """The text `lookup` returns; raises ValueError (the server turns it into a tool error) on unknown names."""
    key = next((name for name in PLANETS if name.lower() == entity.strip().lower()), None)
    if key is None:
        raise ValueError(f"unknown entity {entity!r}; known: {', '.join(sorted(PLANETS))}")
    attribute = attribute.strip().lower()
    if attribute not in ATTRIBUTES:
        raise ValueError(f"unknown attribute {attribute!r}; known: {', '.join(ATTRIBUTES)}")
    value, unit = PLANETS[key][attribute], ATTRIBUTES[attribute]
    text = value if unit is None else _format_number(value)
    return f"{key} {attribute} = {text}{' ' + unit if unit else ''}"


def _unit(name: str) -> str:
    name = name.strip().lower()
    name = _UNIT_ALIASES.get(name, name)
    if name not in _UNITS:
        raise ValueError(f"unknown unit {name!r}; known: {', '.join(_UNITS)}")
    return name


def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    src, dst = _unit(from_unit), _unit(to_unit)
    (src_dim, src_size), (dst_dim, dst_size) = _UNITS[src], _UNITS[dst]
    if src_dim != dst_dim:
        raise ValueError(f"cannot convert {src_dim} ({src}) to {dst_dim} ({dst})")
    return value * src_size / dst_size


# --------------------------------------------------------------------------- tasks

# kind -> (template, attribute, unit asked for or None when the stored value is the answer); the first three need
# one lookup, the others a lookup and a conversion
QUESTION_KINDS: dict[str, tuple[str, str, str | None]] = {
    "moons": ("How many moons does {p} have?", "moons", None),
    "discoverer": ("Who discovered the planet {p}?", "discoverer", None),
    "orbit_days": ("What is the orbital period of {p} in days?", "orbit_period", None),
    "orbit_hours": ("What is the orbital period of {p} in hours?", "orbit_period", "hour"),
    "orbit_weeks": ("What is the orbital period of {p} in weeks?", "orbit_period", "week"),
    "radius_miles": ("What is the radius of {p} in miles?", "radius", "mi"),
    "radius_meters": ("What is the radius of {p} in meters?", "radius", "m"),
    "distance_miles": ("How far is {p} from its star, in miles?", "star_distance", "mi"),
    "mass_kg": ("What is the mass of {p} in kilograms?", "mass", "kg"),
}
ONE_CALL_KINDS = ("moons", "discoverer", "orbit_days")


def make_mcp_kb_tasks(n: int, *, seed: int = 0, kinds: list[str] | None = None) -> list[dict[str, Any]]:
    """`n` rows `{"id", "question", "answer", "server": "kb", "kind"}`; the same seed gives the same rows. `kinds`
    (default: all of `QUESTION_KINDS`) picks the question kinds, e.g. `ONE_CALL_KINDS` for a first curriculum stage
    whose questions need one lookup."""
    chosen = list(QUESTION_KINDS) if kinds is None else list(kinds)
    unknown = [k for k in chosen if k not in QUESTION_KINDS]
    if unknown or not chosen:
        problem = f"unknown question kinds {unknown}" if unknown else "no question kinds"
        raise ValueError(f"mcp_kb: {problem}; data.task_args.kinds takes one or more of {', '.join(QUESTION_KINDS)}")
    rng = random.Random(seed)
    names = sorted(PLANETS)
    rows = []
    for i in range(n):
        kind = rng.choice(chosen)
        template, attribute, unit = QUESTION_KINDS[kind]
        planet = rng.choice(names)
        value = PLANETS[planet][attribute]
        if unit is not None:
            value = convert_units(value, ATTRIBUTES[attribute], unit)
        answer: Any = value if isinstance(value, str) else float(f"{value:.6g}")
        question = template.format(p=planet)
        rows.append({"id": f"mcp_kb-{seed}-{i}", "question": question, "answer": answer, "server": "kb", "kind": kind})
    return rows


def mcp_kb_server_spec(**overrides: Any):
    """How to start the example server over stdio (this interpreter, this module)."""
    from rllm.tools.mcp import MCPServerSpec

    return MCPServerSpec(**{"command": sys.executable, "args": ("-m", "rllm.tasks.mcp_kb"), **overrides})


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip(".!,;:'\"` ").casefold()


def mcp_kb_reward(task: dict[str, Any], response: Any) -> float:
    """1.0 when the final answer is right (numbers within 1%, strings case-insensitively), else 0.0."""
    text = response if isinstance(response, str) else str(response or "")
    tagged = _ANSWER_TAG.findall(text)
    answer_text = tagged[-1] if tagged else text
    truth = task["answer"]
    if isinstance(truth, str):
        return float(_normalize(answer_text) == _normalize(truth))
    numbers = _NUMBER.findall(answer_text.replace(",", ""))
    if not numbers:
        return 0.0
    guess = float(numbers[-1])
    return float(abs(guess - truth) <= 0.01 * abs(truth) if truth else abs(guess) < 1e-9)


# --------------------------------------------------------------------------- env


class MCPKnowledgeBaseEnv(MCPEnvironment):
    reward_fn = staticmethod(mcp_kb_reward)

    def server_spec(self):
        return mcp_kb_server_spec()


TASK = Task(
    name="mcp_kb",
    description="Answer questions about fictional facts with the tools of an example MCP server (multi-turn).",
    make_tasks=make_mcp_kb_tasks,
    agent=ToolAgent,
    env=MCPKnowledgeBaseEnv,
)


# --------------------------------------------------------------------------- server


_LOOKUP_DESCRIPTION = (
    "Look up one fact about a fictional planet. attribute is one of: orbit_period (days), radius (km), "
    "star_distance (km), mass (tonnes, t), moons (count), discoverer (name)."
)
_CONVERT_DESCRIPTION = (
    "Convert a value between units of length (mm, cm, m, km, in, ft, mi), mass (g, kg, t, lb) or time "
    "(s, min, hour, day, week, year)."
)


def build_server():
    """The MCP server object (the SDK's MCPServer); imported lazily so the module works without `mcp`."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer(
        "rllm-kb", instructions="Facts about fictional planets, and unit conversion.", log_level="WARNING"
    )

    @server.tool(description=_LOOKUP_DESCRIPTION, structured_output=False)
    def lookup(entity: str, attribute: str) -> str:
        try:
            return lookup_fact(entity, attribute)
        except ValueError as exc:  # ToolError: the message reaches the model (other exceptions are hidden)
            raise ToolError(str(exc)) from None

    @server.tool(description=_CONVERT_DESCRIPTION, structured_output=False)
    def convert(value: float, from_unit: str, to_unit: str) -> str:
        try:
            result = convert_units(value, from_unit, to_unit)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        return f"{_format_number(value)} {_unit(from_unit)} = {_format_number(result)} {_unit(to_unit)}"

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rllm.tasks.mcp_kb", description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    args, _ = parser.parse_known_args(argv)  # unknown arguments are ignored (tests pass a marker argument)
    server = build_server()
    if args.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
