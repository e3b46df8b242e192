"""The SWE tool sets as JSON-schema function tools, and how each call maps onto the workspace server's tools.

- "r2egym" (the default, R2E-Gym's and DeepSWE's): `file_editor` (view / create / str_replace / insert /
  undo_edit), `search`, `execute_bash`, `finish`.
- "sweagent" (SWE-agent's): `bash`, `str_replace_editor` (the same five commands), `submit`.
Both run on the same implementations inside the sandbox (workspace_server.py); only names and argument names differ.
"""

from __future__ import annotations

__all__ = ["SCAFFOLDS", "server_call", "tool_schemas"]

_PATH = {"type": "string", "description": "An absolute path under /testbed."}
_EDITOR_PROPERTIES = {
    "command": {
        "type": "string",
        "enum": ["view", "create", "str_replace", "insert", "undo_edit"],
        "description": "view a file or directory; create a new file; str_replace one exact occurrence; "
        "insert text after a line; undo_edit the last edit of a file.",
    },
    "path": _PATH,
    "file_text": {"type": "string", "description": "create: the whole content of the new file."},
    "old_str": {"type": "string", "description": "str_replace: the exact text to replace (must occur once)."},
    "new_str": {"type": "string", "description": "str_replace: the replacement; insert: the text to insert."},
    "insert_line": {"type": "integer", "description": "insert: the line after which to insert (0 = at the top)."},
    "view_range": {
        "type": "array",
        "items": {"type": "integer"},
        "description": "view: [first, last] line to show; last -1 = to the end.",
    },
}


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


_EDITOR_TEXT = "View, create and edit files of the repository. Paths are absolute, under /testbed."
_BASH_TEXT = (
    "Run a bash command in /testbed (no network; each call starts afresh in /testbed; long outputs are cut; "
    "a command that runs too long is killed)."
)

SCAFFOLDS: dict[str, list[dict]] = {
    "r2egym": [
        _function("file_editor", _EDITOR_TEXT, _EDITOR_PROPERTIES, ["command", "path"]),
        _function(
            "search",
            "Search for a term in a directory (which files, how many matches) or in a file (which lines).",
            {
                "search_term": {"type": "string"},
                "path": {**_PATH, "description": "A directory or file under /testbed (default /testbed)."},
            },
            ["search_term"],
        ),
        _function("execute_bash", _BASH_TEXT, {"cmd": {"type": "string", "description": "The command."}}, ["cmd"]),
        _function(
            "finish",
            "Submit your changes to the repository and end.",
            {
                "command": {"type": "string", "enum": ["submit"]},
                "result": {"type": "string", "description": "Optional: what you changed."},
            },
            [],
        ),
    ],
    "sweagent": [
        _function("bash", _BASH_TEXT, {"command": {"type": "string", "description": "The command."}}, ["command"]),
        _function("str_replace_editor", _EDITOR_TEXT, _EDITOR_PROPERTIES, ["command", "path"]),
        _function("submit", "Submit your changes to the repository and end.", {}, []),
    ],
}
FINISH_TOOLS = {"finish", "submit"}
# scaffold tool name -> the server's tool
_SERVER_TOOL = {
    "file_editor": "file_editor",
    "str_replace_editor": "file_editor",
    "search": "search",
    "execute_bash": "execute_bash",
    "bash": "execute_bash",
}


def tool_schemas(scaffold: str) -> list[dict]:
    if scaffold not in SCAFFOLDS:
        raise ValueError(f"unknown SWE scaffold {scaffold!r}: use one of {sorted(SCAFFOLDS)}")
    return SCAFFOLDS[scaffold]


def server_call(scaffold: str, name: str, arguments: dict) -> tuple[str, dict] | str:
    """(server tool, its arguments) for a call of the scaffold's tool `name`, or an error message for the agent."""
    known = {schema["function"]["name"] for schema in tool_schemas(scaffold)}
    if name not in known or name in FINISH_TOOLS:
        return f"unknown tool {name!r}: the tools are {', '.join(sorted(known))}"
    if not isinstance(arguments, dict):
        return f"the arguments of {name!r} must be a JSON object, got: {str(arguments)[:200]}"
    schema = next(s["function"]["parameters"] for s in tool_schemas(scaffold) if s["function"]["name"] == name)
    if missing := [key for key in schema["required"] if key not in arguments]:
        return f"{name!r} needs the argument(s) {', '.join(missing)}"
    if unknown := sorted(set(arguments) - set(schema["properties"])):
        return f"{name!r} takes no argument(s) {', '.join(unknown)}; it takes {', '.join(schema['properties'])}"
    args = dict(arguments)
    if name == "bash":
        args = {"cmd": args["command"]}
    return _SERVER_TOOL[name], args
