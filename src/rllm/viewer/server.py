"""`rllm view`'s local web server: the Python standard library's threading HTTP server on 127.0.0.1, serving the
page and its assets from the package (`rllm/viewer/static`: no CDN, no internet) and a small JSON API:

    GET /api/runs                          the runs (re-read on every call: runs started since appear)
    GET /api/run/<id>                      summary, manifest, config, filter values, token-exactness report
    GET /api/run/<id>/metrics              every numeric metric as [[step, value], ...]
    GET /api/run/<id>/health               the run's alarms (`rllm audit`), with the lines of their episodes
    GET /api/run/<id>/episodes?<query>     a page of the episode table (`rllm.viewer.data.query_episodes`)
    GET /api/run/<id>/episode/<line>       one episode: conversation and token overlay
    GET /api/run/<id>/images/<sha256>.<ext>  an image of the run's episodes (`rllm.images`), by its stored name

Links are stable: the page keeps its whole state (run, step, filters, episode, comparison) in the URL's fragment.

Only requests whose `Host` names this server are answered (`rllm.gateway.boundary.HostCheck`; `--allow-host` adds
names): a web page that rebinds its own domain to 127.0.0.1 cannot read the runs through the user's browser. An
episode the server cannot show (a record damaged on disk) is answered with a 400 naming the line, never a dropped
connection.
"""

from __future__ import annotations

import json
import mimetypes
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from rllm.gateway.boundary import HostCheck, json_safe
from rllm.images import IMAGE_FILE
from rllm.viewer.data import NotARunError, ViewerRun, discover_runs, facets, query_episodes
from rllm.viewer.episode import episode_view

__all__ = ["Viewer", "ViewerServer", "start_server"]


class Viewer:
    """The runs under the given paths, each read through one `ViewerRun` (its index is kept between requests)."""

    def __init__(self, paths: list[str | os.PathLike], cache_dir: Path | None = None) -> None:
        self.paths = [Path(p) for p in paths]
        self.cache_dir = cache_dir
        self._runs: dict[Path, ViewerRun] = {}
        self._lock = threading.Lock()
        discover_runs(self.paths)  # a wrong path fails now, with the message, not in the browser

    def runs(self) -> dict[str, ViewerRun]:
        """Run id -> run, for the runs there are now. An id is the run's folder name (made unique with -2, -3)."""
        with self._lock:
            out: dict[str, ViewerRun] = {}
            for path in discover_runs(self.paths):
                key = path.resolve()
                run_id, n = path.name, 1
                while run_id in out:
                    n += 1
                    run_id = f"{path.name}-{n}"
                if key not in self._runs:
                    self._runs[key] = ViewerRun(path, run_id, self.cache_dir)
                self._runs[key].id = run_id
                out[run_id] = self._runs[key]
            return out

    def run(self, run_id: str) -> ViewerRun:
        runs = self.runs()
        if run_id not in runs:
            raise LookupError(f"no run {run_id!r}; the runs are {', '.join(runs) or 'none'}")
        return runs[run_id]

    # ---- the API ---------------------------------------------------------------------------------------------

    def api(self, parts: list[str], params: dict[str, str]) -> Any:
        """The JSON answer of GET /api/<parts>?<params>; LookupError -> 404, ValueError -> 400."""
        if parts == ["runs"]:
            return {"runs": [run.summary() for run in self.runs().values()]}
        if len(parts) < 2 or parts[0] != "run":
            raise LookupError(f"no API /api/{'/'.join(parts)}")
        run = self.run(parts[1])
        rest = parts[2:]
        if not rest:
            config_text = _read_text(run.path / "config.yaml")
            return {
                "summary": run.summary(),
                "manifest": run.manifest(),
                "config": config_text,
                "facets": facets(run.index()),
                "exactness": run.exactness(),
            }
        if rest == ["metrics"]:
            return run.series()
        if rest == ["health"]:
            return run.health()
        if rest == ["episodes"]:
            return query_episodes(run.index(), params)
        if len(rest) == 2 and rest[0] == "episode":
            try:
                record = run.record(int(rest[1]))
            except KeyError:
                raise LookupError(f"run {run.id!r} has no episode on line {rest[1]}") from None
            tokenizer, note = run.tokenizer()
            trained = record.get("trained")
            if trained is None and record.get("split") == "train":  # a run from before `trained` was recorded
                recomputed = run.recomputed_trained(record["step"])
                if recomputed is not None:
                    episode = record["episode"]
                    record["trained"] = [
                        recomputed.get((episode.get("id"), i)) for i in range(len(episode.get("trajectories") or []))
                    ]
                    record["trained_source"] = "recomputed"
            try:
                view = episode_view(
                    record, run.config(), tokenizer, note, image_base=f"/api/run/{quote(run.id, safe='')}/images/"
                )
            except (OverflowError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
                # a record that parses as JSON but not as an episode this viewer can show: damaged, as corrupt lines
                raise ValueError(
                    f"line {rest[1]} of episodes.jsonl is damaged: {type(exc).__name__}: {str(exc)[:300]}"
                ) from None
            view["line"] = int(rest[1])
            return view
        raise LookupError(f"no API /api/{'/'.join(parts)}")

    def image(self, run_id: str, name: str) -> tuple[bytes, str]:
        """(bytes, content type) of the stored image `name` of a run. Only names of the stored form (a hash and an
        extension) are looked up: a name with a path in it (`../config.yaml`) is not one, so nothing outside the
        run's images/ folder can be read through this."""
        if not IMAGE_FILE.fullmatch(name):
            raise LookupError(f"no image {name!r}: image names are <sha256>.<png|jpeg|webp|gif>")
        path = self.run(run_id).path / "images" / name
        try:
            return path.read_bytes(), f"image/{name.rsplit('.', 1)[1]}"
        except OSError:
            raise LookupError(f"run {run_id!r} has no image {name}") from None


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer

    def do_GET(self) -> None:
        refusal = self.server.host_check.refusal(self.headers.get("Host"))
        if refusal is not None:
            self._send_json(HTTPStatus.FORBIDDEN, {"error": refusal})
            return
        try:
            self._get()
        except Exception as exc:  # a bug must answer, not drop the connection (the page shows the message)
            self._send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"})

    def _get(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        if path.startswith("/api/"):
            params = dict(parse_qsl(url.query, keep_blank_values=True))
            parts = [unquote(p) for p in url.path[len("/api/") :].split("/") if p]
            if len(parts) == 4 and parts[0] == "run" and parts[2] == "images":
                self._send_image(parts[1], parts[3])
                return
            try:
                self._send_json(HTTPStatus.OK, self.server.viewer.api(parts, params))
            except LookupError as exc:
                self._send_json(HTTPStatus.NOT_FOUND, {"error": str(exc).strip("'\"")})
            except (ValueError, NotARunError) as exc:
                self._send_json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        name = "index.html" if path in ("/", "/index.html") else path.removeprefix("/static/")
        asset = resources.files("rllm.viewer") / "static" / name
        if "/" in name or not asset.is_file():
            self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
            return
        self._send(HTTPStatus.OK, asset.read_bytes(), mimetypes.guess_type(name)[0] or "application/octet-stream")

    def _send_image(self, run_id: str, name: str) -> None:
        try:
            body, content_type = self.server.viewer.image(run_id, name)
        except LookupError as exc:
            self._send_json(HTTPStatus.NOT_FOUND, {"error": str(exc).strip("'\"")})
            return
        self._send(HTTPStatus.OK, body, content_type)

    def _send_json(self, status: HTTPStatus, data: Any) -> None:
        body = json.dumps(json_safe(data), allow_nan=False, default=str)
        self._send(status, body.encode("utf-8"), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        charset = "" if content_type.startswith("image/") else "; charset=utf-8"
        self.send_header("Content-Type", content_type + charset)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no line per request on the user's terminal


class ViewerServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, viewer: Viewer, port: int = 0, host: str = "127.0.0.1", allowed_hosts: tuple[str, ...] | list[str] = ()
    ) -> None:
        self.viewer = viewer
        self.host_check = HostCheck(host, allowed_hosts)
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


def start_server(
    paths: list[str | os.PathLike],
    *,
    port: int = 0,
    cache_dir: Path | None = None,
    allowed_hosts: tuple[str, ...] | list[str] = (),
) -> ViewerServer:
    """A viewer server on 127.0.0.1 (`port` 0: a free one), serving in a daemon thread; `.shutdown()` stops it.
    `allowed_hosts`: `Host` names served besides the loopback ones (module docstring)."""
    server = ViewerServer(Viewer(paths, cache_dir), port, allowed_hosts=allowed_hosts)
    threading.Thread(target=server.serve_forever, name="rllm-view", daemon=True).start()
    # index every run now, in the background, so the first look at a big run waits less (or not at all)
    threading.Thread(target=_index_all, args=(server.viewer,), name="rllm-view-index", daemon=True).start()
    return server


def _index_all(viewer: Viewer) -> None:
    for run in viewer.runs().values():
        try:
            run.index()
        except OSError:  # a run removed meanwhile: its page says so when opened
            continue


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None
