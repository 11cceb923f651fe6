"""The data plane's own errors: what an entry answers when it refuses or cannot serve a request,
always as OpenAI's error body (`openai.error_body`), with the headers that go with it."""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from radixfleet.dataplane import openai


class EntryError(Exception):
    """An error of the entry's own, with OpenAI's `code` and `param` and headers to send along
    (Retry-After)."""

    def __init__(
        self, status: int, message: str, *, headers: Mapping[str, str] | None = None,
        code: str | None = None, param: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.code = code
        self.param = param

    def answer(self) -> web.Response:
        body = openai.error_body(self.status, self.message, code=self.code, param=self.param)
        return web.json_response(body, status=self.status, headers=self.headers)


def model_not_found(name: object) -> EntryError:
    """404 for a model the caller cannot use (another tenant's looks exactly like none)."""
    message = f"The model '{name}' does not exist."
    return EntryError(404, message, code="model_not_found", param="model")
