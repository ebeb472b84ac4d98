"""A server that speaks OpenAI's chat API from a script: what a server that splits reasoning sends.

It answers ``GET /v1/models`` and streams ``POST /v1/chat/completions`` as
vLLM, SGLang and llama-server do for a thinking model: ``reasoning_content``
deltas, then ``content`` deltas, then a chunk with ``usage`` (cached prompt
tokens included), then ``[DONE]``. Any other POST is a 404 (it has no way to
count tokens). Used where the bundled model cannot write the layout itself;
the protocol, the client and the window are real.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptServer:
    USAGE = {"prompt_tokens": 30, "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": 16}}

    def __init__(self, reasoning: list[str], answer: list[str], model: str = "thinker-7b", *,
                 usage: dict | None = USAGE, timings: dict | None = None) -> None:
        """``usage``: the last chunk's (None: none, as llama-cpp-python's server); ``timings``: llama-server's
        figures on the finishing chunk."""
        self.reasoning, self.answer, self.model = reasoning, answer, model
        self.requests: list[dict] = []  # the chat requests' bodies
        self.other: list[str] = []      # the paths of the other POSTs, each answered 404
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = json.dumps({"object": "list", "data": [{"id": outer.model, "object": "model",
                                                               "owned_by": "vllm", "max_model_len": 32768}]})
                self._send(200, "application/json", body.encode())

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(n)
                if self.path != "/v1/chat/completions":  # as vLLM answers llama-server's routes: no such route
                    outer.other.append(self.path)
                    self._send(404, "application/json", b'{"error": {"message": "Not Found"}}')
                    return
                outer.requests.append(json.loads(body))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for kind, pieces in (("reasoning_content", outer.reasoning), ("content", outer.answer)):
                    for p in pieces:
                        self._event({"choices": [{"index": 0, "delta": {kind: p}, "finish_reason": None}]})
                end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                self._event({**end, "timings": timings} if timings else end)
                if usage is not None:
                    self._event({"choices": [], "usage": usage})
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _event(self, obj: dict) -> None:
                self._chunk(f"data: {json.dumps({'object': 'chat.completion.chunk', **obj})}\n\n".encode())

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _send(self, status: int, ctype: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
