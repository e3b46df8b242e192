"""Real Chromium for web environments: one Playwright driver and a few browsers per process, one context per episode.

- The browser is Debian's `chromium-headless-shell` (or `chromium`), driven by PyPI's `playwright` through
  `executable_path`: nothing downloads a browser. `find_chromium()` finds it (`$RLLM_CHROMIUM` first) or raises
  `BrowserUnavailableError` naming the apt command.
- Playwright objects belong to the event loop that made them, and envs are stepped from the engine's thread pool. So
  the pool owns one asyncio loop on its own daemon thread, and every browser call is a coroutine sent to it
  (`BrowserPool.call`); the browsers work concurrently, each env waits only for its own call.
- Episodes get a fresh browser context (cookies, storage and pages of their own: ~20 MB) on the least-loaded of
  `browsers` browsers (~330 MB each), launched lazily. A browser that crashed or was killed is noticed
  (`is_connected`) and replaced at the next context it is asked for: `restarts` counts them.
- Nothing outlives us: Playwright's driver closes its browsers when our process dies (even by SIGKILL: it reads our
  end of a pipe), and `close()` (also at exit) closes them first. `chromium_pids()` lists the browsers' processes
  (tests kill them to simulate a crash, and check that none is left after the trainer is killed).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from rllm.errors import InfraError, RllmError

__all__ = ["BrowserPool", "BrowserUnavailableError", "chromium_pids", "descendant_pids", "find_chromium", "shared_pool"]

T = TypeVar("T")
CANDIDATES = ("chromium-headless-shell", "chromium", "chromium-browser")
# Debian's /usr/bin/chromium* are shell wrappers that do not exec: the binary itself is launched instead, so the
# browser is one process that Playwright owns, not a shell with a browser under it.
DEBIAN_BINARIES = ("/usr/lib/chromium/chromium-headless-shell", "/usr/lib/chromium/chromium")
# --no-sandbox: Chromium's own sandbox needs user namespaces it cannot get as root in a container; the pages are
# MiniWoB's local files. The rest keep a headless browser from reaching the network or the GPU.
LAUNCH_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--no-first-run",
    "--mute-audio",
)


class BrowserUnavailableError(RllmError):
    """No Chromium (or no Playwright) on this machine; the message names the install command."""


def find_chromium() -> str:
    explicit = os.environ.get("RLLM_CHROMIUM")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise BrowserUnavailableError(f"RLLM_CHROMIUM={explicit} is not an executable file")
        return explicit
    for path in DEBIAN_BINARIES:
        if os.access(path, os.X_OK):
            return path
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise BrowserUnavailableError(
        "web environments need Chromium: apt-get install chromium-headless-shell (Debian/Ubuntu; `make test` does it "
        "as root), or set RLLM_CHROMIUM to a Chromium/Chrome binary. rllm never downloads a browser."
    )


def descendant_pids(root: int | None = None) -> list[int]:
    """Every process descended from `root` (default: this process), from /proc."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for pid in children.get(stack.pop(), []):
            found.append(pid)
            stack.append(pid)
    return sorted(found)


def chromium_pids(root: int | None = None) -> list[int]:
    """PIDs of the Chromium browser processes (not their renderers) descended from `root` (default: this process)."""
    found = []
    for pid in descendant_pids(root):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(name in command for name in CANDIDATES) and "--type=" not in command:
            found.append(pid)
    return found


class BrowserPool:
    """See the module docstring. `call(fn, timeout)` runs `await fn()` on the pool's loop and returns its result."""

    def __init__(self, executable: str | None = None, browsers: int = 1, launch_timeout: float = 60.0) -> None:
        if browsers < 1:
            raise ValueError(f"BrowserPool(browsers={browsers}): need at least 1")
        self.executable = executable or find_chromium()
        self.browsers, self.launch_timeout = int(browsers), float(launch_timeout)
        self.restarts = 0
        self._slots: list[Any] = [None] * self.browsers  # playwright Browser per slot, launched lazily
        self._load = [0] * self.browsers  # open contexts per slot
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._playwright: Any = None
        self._launching: list[asyncio.Lock] = []
        self._closed = False

    # ---- the loop ----------------------------------------------------------------------------------------------

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise InfraError("the browser pool was closed")
            if self._loop is None:
                try:
                    from playwright.async_api import async_playwright
                except ImportError as e:
                    raise BrowserUnavailableError(
                        "web environments need Playwright: pip install 'rllm[web]' "
                        "(playwright==1.65.2; no browser download)"
                    ) from e
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="rllm-browsers", daemon=True).start()
                start = asyncio.run_coroutine_threadsafe(async_playwright().start(), loop)
                self._playwright = start.result(self.launch_timeout)
                self._launching = [asyncio.Lock() for _ in range(self.browsers)]
                self._loop = loop
                atexit.register(self.close)
            return self._loop

    def call(self, fn: Callable[[], Awaitable[T]], timeout: float) -> T:
        """Run `await fn()` on the pool's loop; past `timeout` s the call is cancelled and TimeoutError raised."""
        future = asyncio.run_coroutine_threadsafe(_awaited(fn), self._start())
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    # ---- contexts ------------------------------------------------------------------------------------------------

    async def _browser(self, slot: int) -> Any:
        browser = self._slots[slot]
        if browser is not None and browser.is_connected():
            return browser
        if browser is not None:
            self.restarts += 1  # it crashed or was killed: its episodes fail, and release their load as they close
        browser = await self._playwright.chromium.launch(
            executable_path=self.executable, args=list(LAUNCH_ARGS), timeout=self.launch_timeout * 1000
        )
        self._slots[slot] = browser
        return browser

    async def new_context(self, **options: Any) -> tuple[int, Any]:
        """A fresh context on the least-loaded browser: (slot, context). Close it with `release(slot, context)`."""
        slot = min(range(self.browsers), key=lambda i: self._load[i])
        self._load[slot] += 1
        try:
            async with self._launching[slot]:  # two episodes starting at once launch one browser, not two
                browser = await self._browser(slot)
            return slot, await browser.new_context(**options)
        except BaseException:
            self._load[slot] = max(0, self._load[slot] - 1)
            raise

    async def release(self, slot: int, context: Any) -> None:
        self._load[slot] = max(0, self._load[slot] - 1)
        try:
            await asyncio.wait_for(context.close(), 10)
        except Exception:  # a dead browser's context is gone already; a hung one is restarted below
            await self.restart(slot)

    async def restart(self, slot: int) -> None:
        """Kill slot's browser (hung or crashed); the next context there launches a new one."""
        browser, self._slots[slot] = self._slots[slot], None
        if browser is not None:
            self.restarts += 1
            try:
                await asyncio.wait_for(browser.close(), 10)
            except Exception:  # already dead
                pass

    def open_contexts(self) -> int:
        return sum(self._load)

    def live_browsers(self) -> int:
        """Browsers of this pool launched and still connected."""
        return sum(1 for browser in self._slots if browser is not None and browser.is_connected())

    def close(self) -> None:
        """Close every browser and the driver. Idempotent; registered at exit."""
        with self._lock:
            loop, self._loop, self._closed = self._loop, None, True
        if loop is None:
            return

        async def shutdown() -> None:
            for slot in range(self.browsers):
                browser, self._slots[slot] = self._slots[slot], None
                if browser is not None:
                    try:
                        await asyncio.wait_for(browser.close(), 10)
                    except Exception:  # dead already
                        pass
            await self._playwright.stop()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(30)
        except Exception:  # at exit, the driver's own exit closes what is left
            pass
        loop.call_soon_threadsafe(loop.stop)


async def _awaited(fn: Callable[[], Awaitable[T]]) -> T:
    return await fn()


_SHARED: dict[tuple[str | None, int], BrowserPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(executable: str | None = None, browsers: int = 1) -> BrowserPool:
    """The process's pool for these settings, made on first use (all envs of a run share its browsers)."""
    with _SHARED_LOCK:
        pool = _SHARED.get((executable, browsers))
        if pool is None or pool._closed:
            pool = _SHARED[(executable, browsers)] = BrowserPool(executable, browsers)
        return pool
