"""`rllm view`: a local web viewer of runs (curves, episode table, conversation, token overlay, comparison).

rllm view runs/                          # every run in runs/, at http://127.0.0.1:<free port>/
server = start_server(["runs/"])         # the same from Python; server.url, server.shutdown()
"""

from rllm.runs import view_command
from rllm.viewer.data import NotARunError, discover_runs
from rllm.viewer.index import EpisodeIndex
from rllm.viewer.server import Viewer, start_server

__all__ = ["EpisodeIndex", "NotARunError", "Viewer", "discover_runs", "start_server", "view_command"]
