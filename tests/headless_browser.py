"""A minimal DevTools-protocol client for a headless Chromium over ``--remote-debugging-pipe``.

``load_page(path)`` opens a local file, waits for its load event, and returns what a reader would see
broken: images that did not load, console messages, uncaught exceptions and failed requests, plus a
full-page PNG screenshot. Used by the report-page test; skipped there when no browser is installed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def _above_4(fd: int) -> int:
    """The same pipe end on a descriptor above 4 (close-on-exec), so moving it to 3 or 4 clobbers nothing."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5)
    os.close(fd)
    return moved


class _Pipe:
    def __init__(self, browser: str, profile: str):
        to_child_r, self.to_child = (_above_4(fd) for fd in os.pipe())
        self.from_child, from_child_w = (_above_4(fd) for fd in os.pipe())
        flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                 "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]  # fmt: skip

        def child_fds():  # the protocol lives on fds 3 (commands in) and 4 (replies out)
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        # close_fds=False: subprocess would close fds 3 and 4 after preexec_fn; the parent's other fds are
        # non-inheritable (PEP 446) and close on exec anyway
        self.proc = subprocess.Popen([browser, *flags], preexec_fn=child_fds, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        os.close(to_child_r)
        os.close(from_child_w)
        self.buffer, self.next_id, self.events = b"", 0, []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_child, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(e.get("method") == method for e in self.events):
                return next(e for e in self.events if e.get("method") == method)
            self.events.append(self._read())
        raise TimeoutError(method)

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            chunk = os.read(self.from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("browser closed the pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_child)
        os.close(self.from_child)


IMAGES = "Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth}))"


def load_page(path: Path, browser: str, width: int = 1280) -> dict[str, Any]:
    """Open ``path`` headless; returns images, console messages, exceptions, failed requests, screenshot."""
    with tempfile.TemporaryDirectory() as profile:
        pipe = _Pipe(browser, profile)
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.send(f"{domain}.enable", session=session)
            pipe.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session)  # fmt: skip
            pipe.send("Page.navigate", {"url": Path(path).resolve().as_uri()}, session)
            pipe.wait_for("Page.loadEventFired")
            images = pipe.send("Runtime.evaluate", {"expression": IMAGES, "returnByValue": True}, session)
            height = pipe.send("Runtime.evaluate", {"expression": "document.documentElement.scrollHeight",
                                                    "returnByValue": True}, session)["result"]["value"]  # fmt: skip
            shot = pipe.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                             "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}}, session)  # fmt: skip
            events = pipe.events
        finally:
            pipe.close()
    return {
        "images": images["result"]["value"],
        "console": [e["params"] for e in events if e.get("method") == "Runtime.consoleAPICalled"],
        "exceptions": [e["params"] for e in events if e.get("method") == "Runtime.exceptionThrown"],
        "log_errors": [e["params"]["entry"] for e in events
                       if e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"],
        "failed_requests": [e["params"] for e in events if e.get("method") == "Network.loadingFailed"],
        "requests": [e["params"]["request"]["url"][:60] for e in events if e.get("method") == "Network.requestWillBeSent"],
        "screenshot": base64.b64decode(shot["data"]),
    }  # fmt: skip
