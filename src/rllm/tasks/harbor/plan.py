"""Where a Harbor task runs: in rllm's sandbox (no Docker) or in Docker. `plan_environment(task)` decides, by reading
the task's files only (no build, nothing run).

The rule. A task runs in the sandbox when its environment is this machine's, i.e. all of:

- no prebuilt image ([environment].docker_image) (what neither plays, Compose services, a verifier of its own, GPUs,
  is refused when the folder is read: rllm.tasks.harbor.spec);
- environment/Dockerfile, when there is one, is a plain base plus what the sandbox can apply itself: one FROM of a
  plain OS or Python image (`PLAIN_IMAGES`: ubuntu, debian, python, buildpack-deps, Terminal-Bench's ubuntu and
  python bases; the tag is not checked: the sandbox has this machine's tools and Python); WORKDIR; COPY/ADD of
  files from environment/ into the working directory; ENV/ARG (ENV PATH and HOME are the sandbox's own); RUN lines
  made only of `apt-get update/install/clean` of packages installed on this machine (dpkg), `pip install` of what
  the sandbox's Python has (the standard library, and pytest with its plugins from rllm's test runtime), removing
  apt's lists, and `mkdir` in the working directory; USER, LABEL, EXPOSE, CMD, ENTRYPOINT and the like are ignored;
- the working directory ([environment].workdir, else the Dockerfile's last WORKDIR; /app without a Dockerfile) is a
  directory of its own such as /app (the sandbox's one writable directory, besides /tmp), and everything copied
  goes inside it;
- tests/test.sh (and, for the oracle, solution/solve.sh) fetch nothing at run time: no curl, wget, uv/uvx, pip or
  apt installs, git clone, npm (the sandbox has no network).

Anything else needs Docker, and the plan says why in one line naming the file and line: `Plan.docker_reason`.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rllm.tasks.harbor.spec import LOGS_DIR, SOLUTION_DIR, TESTS_DIR, HarborTask

__all__ = ["PLAIN_IMAGES", "SANDBOX_PYTHON_PACKAGES", "Plan", "plan_environment", "script_needs_network"]

PLAIN_IMAGES = frozenset(
    {
        "ubuntu",
        "debian",
        "python",
        "buildpack-deps",
        "ghcr.io/laude-institute/t-bench/ubuntu-24-04",
        "ghcr.io/laude-institute/t-bench/python-3-13",
    }
)
# what `pip install` may ask for: rllm's sandbox test runtime (rllm.tasks.swe.store.runtime_dir) and pip's own tools
RUNTIME_PACKAGES = frozenset({"pytest", "coverage", "iniconfig", "packaging", "pluggy", "pygments"})
SANDBOX_PYTHON_PACKAGES = RUNTIME_PACKAGES | {"pip", "setuptools", "wheel"}
DEFAULT_WORKDIR = "/app"
# first path components the working directory may not take: the sandbox's own directories and Harbor's mounts
_TAKEN = {"", "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "tmp", "work", ".rllm"}
_TAKEN |= {PurePosixPath(p).parts[1] for p in (LOGS_DIR, TESTS_DIR, SOLUTION_DIR)} | {"sys"}
# Docker's default variables, for a Dockerfile's $PATH and $HOME
_DOCKER_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
_IGNORED = {"USER", "LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "VOLUME"}
_IGNORED |= {"MAINTAINER", "ONBUILD"}
_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
# a command at the start of a shell command (after ;, &&, |, (, $(, then, do, sudo ..., and VAR=value words)
_AT = r"(?:^|[;&|(`]|\$\(|\b(?:then|do|else|sudo|exec|time|if|!)\s)\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*"
_NETWORK = [
    (re.compile(_AT + r"(?:curl|wget|uvx|npx)\b"), "downloads"),
    (re.compile(_AT + r"uv\s+(?:pip|run|tool|sync|add|venv)\b"), "installs with uv"),
    (re.compile(_AT + r"(?:pip3?|python3?\s+-m\s+pip)\s+install\b"), "installs with pip"),
    (re.compile(_AT + r"apt(?:-get)?\s+(?:-\S+\s+)*(?:update|install|upgrade)\b"), "installs with apt"),
    (re.compile(_AT + r"(?:apk\s+add|conda\s+install|git\s+clone|npm\s+(?:install|i|ci))\b"), "installs"),
]


@dataclass
class Plan:
    """How the task's environment is made. In the sandbox: the working directory and its starting files (`copies`:
    (a path under environment/, where it goes), in Dockerfile order; `dirs` to create), the environment's variables,
    and whether pytest must be there. `docker_reason`: why it needs Docker instead (None: it runs in the sandbox)."""

    workdir: str = DEFAULT_WORKDIR
    copies: list[tuple[str, str]] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    pytest: bool = False
    docker_reason: str | None = None

    @property
    def sandbox(self) -> bool:
        return self.docker_reason is None


def plan_environment(task: HarborTask, *, oracle: bool = False) -> Plan:
    """Where `task` runs (module docstring); `oracle`: solution/solve.sh runs too, so it is checked as well."""
    plan = Plan(env=dict(task.environment_env))
    dockerfile = task.environment_dir / "Dockerfile"
    if reason := _task_level_reason(task):
        plan.docker_reason = reason
    elif dockerfile.is_file():
        _read_dockerfile(task, dockerfile, plan)
    else:  # no image at all: environment/'s files are the working directory's
        plan.workdir = task.workdir or DEFAULT_WORKDIR
        if task.environment_dir.is_dir():
            plan.copies.append((".", plan.workdir))
    if plan.docker_reason is None:
        plan.docker_reason = _workdir_reason(plan, task)
    if plan.docker_reason is None:
        scripts = [task.tests_dir / "test.sh"] + ([task.solution_dir / "solve.sh"] if oracle else [])
        for script in scripts:
            if script.is_file() and (why := script_needs_network(script.read_text(errors="replace"))) is not None:
                plan.docker_reason = f"{script.relative_to(task.path)} {why}, and the sandbox has no network"
                break
    return plan


def script_needs_network(text: str) -> str | None:
    """Why a shell script needs the network ("line N fetches: ..."), or None: the commands that download or install."""
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for pattern, what in _NETWORK:
            if pattern.search(code):
                return f"line {number} {what} ({line.strip()[:80]!r})"
    return None


# ---- the task-level rule ---------------------------------------------------------------------------------------


def _task_level_reason(task: HarborTask) -> str | None:
    if task.docker_image:
        return f"[environment].docker_image = {task.docker_image!r} is a prebuilt image"
    return None


def _workdir_reason(plan: Plan, task: HarborTask) -> str | None:
    workdir = PurePosixPath(plan.workdir)
    where = "[environment].workdir" if task.workdir else "environment/Dockerfile's WORKDIR"
    if not workdir.is_absolute() or ".." in workdir.parts or len(workdir.parts) < 2 or workdir.parts[1] in _TAKEN:
        return f"{where} is {plan.workdir!r}; the sandbox's working directory must be a directory of its own (/app)"
    for _, dest in plan.copies:
        if not _inside(dest, plan.workdir):
            return f"environment/Dockerfile copies to {dest}, outside the working directory {plan.workdir}"
    for directory in plan.dirs:
        if not _inside(directory, plan.workdir):
            return f"environment/Dockerfile makes {directory}, outside the working directory {plan.workdir}"
    return None


def _inside(path: str, root: str) -> bool:
    return PurePosixPath(path) == PurePosixPath(root) or PurePosixPath(root) in PurePosixPath(path).parents


# ---- the Dockerfile ----------------------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, its arguments) with continuation lines joined and comments dropped."""
    out, pending, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and (not line or line.startswith("#")):  # comment or blank lines inside a continuation
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        word, _, rest = pending.partition(" ")
        out.append((start, word.upper(), rest.strip()))
        pending = ""
    if pending:
        word, _, rest = pending.partition(" ")
        out.append((start, word.upper(), rest.strip()))
    return out


def _read_dockerfile(task: HarborTask, dockerfile: Path, plan: Plan) -> None:
    variables: dict[str, str] = dict(_DOCKER_ENV)
    workdir: str | None = None
    froms = 0

    def refuse(number: int, why: str) -> None:
        if plan.docker_reason is None:
            plan.docker_reason = f"environment/Dockerfile line {number} {why}"

    for number, instruction, args in dockerfile_instructions(dockerfile.read_text(errors="replace")):
        if plan.docker_reason is not None:
            return
        if "<<" in args and instruction in ("RUN", "COPY", "ADD"):
            refuse(number, "uses a heredoc")
            continue
        expanded = _expand(args, variables)
        if expanded is None:
            refuse(number, f"uses a variable with no value here ({args[:60]!r})")
            continue
        if instruction == "FROM":
            froms += 1
            if froms > 1:
                refuse(number, "starts a second build stage (multi-stage builds are built by Docker)")
                continue
            words = [w for w in expanded.split() if not w.startswith("--")]
            image = words[0] if words else ""
            if _image_name(image) not in PLAIN_IMAGES:
                refuse(number, f"builds on the image {image!r}, not a plain OS or Python base ({_plain_list()})")
        elif instruction == "ARG":
            name, eq, value = expanded.partition("=")
            variables.setdefault(name.strip(), _unquote(value) if eq else "")
        elif instruction == "ENV":
            for name, value in _env_pairs(expanded):
                variables[name] = value
                if name not in ("PATH", "HOME"):  # the sandbox's own (its PATH holds the task's python and pytest)
                    plan.env[name] = value
        elif instruction == "WORKDIR":
            workdir = str(PurePosixPath(workdir or "/", _unquote(expanded)))
        elif instruction in ("COPY", "ADD"):
            why = _copy(task, instruction, expanded, workdir or "/", plan)
            if why:
                refuse(number, why)
        elif instruction == "RUN":
            why = _run(expanded, workdir or "/", plan)
            if why:
                refuse(number, why)
        elif instruction not in _IGNORED:
            refuse(number, f"has {instruction}, which the sandbox does not apply")
    plan.workdir = task.workdir or workdir or ""
    if not plan.workdir and plan.docker_reason is None:
        plan.docker_reason = "environment/Dockerfile sets no WORKDIR (the working directory would be /)"


def _image_name(image: str) -> str:
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name.rsplit(":", 1)[0]
    for prefix in ("docker.io/library/", "docker.io/", "library/"):
        name = name.removeprefix(prefix)
    return name.lower()


def _plain_list() -> str:
    return ", ".join(sorted(i for i in PLAIN_IMAGES if "/" not in i)) + ", ..."


def _expand(text: str, variables: dict[str, str]) -> str | None:
    """$VAR and ${VAR} (and ${VAR:-default}) replaced; None when one has no value."""
    missing = False

    def sub(match: re.Match) -> str:
        nonlocal missing
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(2) is not None:
            return match.group(2)
        missing = True
        return ""

    out = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)", sub, text)
    return None if missing else out


def _unquote(text: str) -> str:
    text = text.strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" else text


def _env_pairs(args: str) -> list[tuple[str, str]]:
    words = shlex.split(args)
    if words and "=" not in words[0]:  # the old form: ENV NAME value with spaces
        return [(words[0], " ".join(words[1:]))]
    return [(w.partition("=")[0], w.partition("=")[2]) for w in words]


def _copy(task: HarborTask, instruction: str, args: str, workdir: str, plan: Plan) -> str | None:
    if args.startswith("["):
        try:
            words = [str(w) for w in json.loads(args)]
        except ValueError:
            return f"has a {instruction} whose JSON form does not parse"
    else:
        words = shlex.split(args)
    flags = [w for w in words if w.startswith("--")]
    words = [w for w in words if not w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        return f"copies from another image or stage ({' '.join(flags)})"
    if len(words) < 2:
        return f"has a {instruction} without a source and a destination"
    *sources, dest = words
    dest_path = str(PurePosixPath(workdir, dest))
    into_dir = dest.endswith("/") or len(sources) > 1
    for source in sources:
        if re.match(r"^[a-z]+://|^git@", source):
            return f"{instruction}s from the network ({source})"
        if ".." in PurePosixPath(source).parts or PurePosixPath(source).is_absolute():
            return f"copies {source}, outside environment/"
        if instruction == "ADD" and source.endswith(_ARCHIVES):
            return f"ADDs the archive {source} (Docker unpacks it)"
        matches = _glob(task.environment_dir, source)
        if not matches:
            return f"copies {source}, which environment/ does not hold"
        for match in matches:
            is_dir = (task.environment_dir / match).is_dir()
            target = dest_path if is_dir or not into_dir else str(PurePosixPath(dest_path, PurePosixPath(match).name))
            plan.copies.append((match, target))
    return None


def _glob(root: Path, pattern: str) -> list[str]:
    pattern = str(PurePosixPath(pattern))
    if not any(c in pattern for c in "*?["):
        return [pattern] if (root / pattern).exists() else []
    return sorted(str(p.relative_to(root)) for p in root.glob(pattern))


def _run(args: str, workdir: str, plan: Plan) -> str | None:
    if args.startswith("["):
        return "runs a command in exec form, which the sandbox does not apply"
    if re.search(r"[`<>()]|\$\(", args):
        return f"runs `{args[:80]}`, which the sandbox does not apply (only installs of what it has, and mkdir)"
    try:
        lexer = shlex.shlex(args, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError as e:
        return f"runs a command that does not parse ({e})"
    commands, current = [], []
    for token in tokens:
        if token in (";", "&&", "||", "|", "&"):
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    for words in (c for c in commands if c):
        why = _command(words, workdir, plan)
        if why:
            return why
    return None


def _command(words: list[str], workdir: str, plan: Plan) -> str | None:
    shown = " ".join(words)[:80]
    cannot = f"runs `{shown}`, which the sandbox does not apply (only installs of what it has, and mkdir)"
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):  # DEBIAN_FRONTEND=noninteractive apt-get ...
        words = words[1:]
    if not words:
        return None
    head = words[0]
    if head in ("true", ":"):
        return None
    if head in ("apt-get", "apt"):
        rest = [w for w in words[1:] if not w.startswith("-")]
        if rest and rest[0] in ("update", "clean", "autoclean", "autoremove"):
            return None
        if rest and rest[0] == "install":
            missing = [p for p in rest[1:] if not _deb_installed(p)]
            return f"installs {', '.join(missing)} with apt, which this machine lacks" if missing else None
        return cannot
    if head == "rm":
        targets = [w for w in words[1:] if not w.startswith("-")]
        ok = all(t.startswith(("/var/lib/apt/lists", "/var/cache/apt", "/tmp/")) for t in targets)
        return None if ok else cannot
    if head == "mkdir":
        for directory in (w for w in words[1:] if not w.startswith("-")):
            plan.dirs.append(str(PurePosixPath(workdir, directory)))
        return None
    pip = _pip_requirements(words)
    if pip is None:
        return cannot
    names = []
    for requirement in pip:
        if requirement.startswith("-") or "/" in requirement or requirement.endswith((".txt", ".whl")):
            return f"runs `{shown}`, which installs from a file or a flag the sandbox cannot apply"
        names.append(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-"))
    missing = [n for n in names if n not in SANDBOX_PYTHON_PACKAGES]
    if missing:
        return f"installs {', '.join(missing)} with pip, which the sandbox's Python lacks (it has pytest)"
    plan.pytest = plan.pytest or any(n in RUNTIME_PACKAGES for n in names)
    return None


_PIP_FLAGS_WITH_VALUE = {"-i", "--index-url", "--extra-index-url", "--root-user-action", "--python", "-p"}
_PIP_HARMLESS = {"-q", "--quiet", "-U", "--upgrade", "--no-cache-dir", "--system", "--break-system-packages", "--user"}
_PIP_HARMLESS |= {"--disable-pip-version-check", "--no-input", "-qq", "--no-deps", "--root-user-action=ignore"}


def _pip_requirements(words: list[str]) -> list[str] | None:
    """The requirements of a pip install command (pip, pip3, python -m pip, uv pip), or None if it is not one."""
    if words[:1] in (["pip"], ["pip3"]):
        rest = words[1:]
    elif len(words) > 2 and words[0] in ("python", "python3") and words[1:3] == ["-m", "pip"]:
        rest = words[3:]
    elif words[:2] == ["uv", "pip"]:
        rest = words[2:]
    else:
        return None
    if not rest or rest[0] != "install":
        return None
    requirements, skip = [], False
    for word in rest[1:]:
        if skip:
            skip = False
        elif word in _PIP_FLAGS_WITH_VALUE:
            skip = True
        elif word in _PIP_HARMLESS:
            continue
        else:
            requirements.append(word)
    return requirements


@functools.lru_cache(maxsize=256)
def _deb_installed(package: str) -> bool:
    name = re.split(r"[=:]", package, maxsplit=1)[0]
    dpkg = shutil.which("dpkg-query")
    if dpkg is None or not re.fullmatch(r"[a-z0-9][a-z0-9+.-]*", name):
        return False
    done = subprocess.run(
        [dpkg, "-W", "-f=${Status}", name], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    return done.returncode == 0 and done.stdout.strip().endswith(" installed")
