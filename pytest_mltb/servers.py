"""Lifetime of the embedded llama.cpp server(s) a run with ``local`` models uses (controller side)."""
from __future__ import annotations

__all__ = ["LocalServers"]


class LocalServers:
    """Hold the shared llama.cpp server for the whole run when a ``local`` model is selected.

    LocalServer is refcounted through a state file, so the workers' backends join this server instead
    of starting and stopping one per trial; the last release stops it. A failure to start is not fatal
    here: it is listed in ``errors`` and the trials report it as an infrastructure error.
    """

    def __init__(self) -> None:
        self.held: list = []
        self.errors: list[str] = []

    def start(self, models) -> None:
        from mltb_core.llm.backends import parse_model

        local = sorted({ref.arg for ref in map(parse_model, models) if ref.kind == "local"})
        if not local:
            return
        from mltb_core.llm.local import LocalServer, default_model_path

        for path in local:
            server = LocalServer(path or default_model_path())
            try:
                server.acquire()
            except Exception as exc:  # noqa: BLE001 - reported, and every trial will say it again
                self.errors.append(f"local model server for {path or 'local'} failed to start: {exc}")
                continue
            self.held.append(server)

    def stop(self) -> None:
        for server in self.held:
            server.release()
        self.held.clear()
