"""Threads a test runs beside it (a router job, a service) until it ends, their failures kept."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Running:
    """Threads that run until the test ends; the first failure of any is reported."""

    def __init__(self) -> None:
        self.failures: list[BaseException] = []
        self.threads: list[tuple[threading.Thread, threading.Event]] = []

    def start(self, target: Callable[[threading.Event], object], name: str | None = None) -> threading.Event:
        """Run `target(stop)` in a thread (named `name`); the event returned stops it."""
        stop = threading.Event()

        def body() -> None:
            try:
                target(stop)
            except BaseException as error:  # reported by `check`
                self.failures.append(error)

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        self.threads.append((thread, stop))
        return stop

    def stop(self, which: threading.Event) -> None:
        which.set()
        for thread, stop in self.threads:
            if stop is which:
                thread.join(120)

    def stop_all(self) -> None:
        for _, stop in self.threads:
            stop.set()
        for thread, _ in self.threads:
            thread.join(120)

    def check(self) -> None:
        assert self.failures == [], self.failures
