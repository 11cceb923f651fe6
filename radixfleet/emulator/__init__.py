"""The emulated SGLang replica: the replica model behind sglang 0.5.23's HTTP interface.

Run one with `radixfleet emulate --port P [--profile FILE|NAME] [--model NAME]`, or in-process
with :func:`radixfleet.emulator.testing.serve_in_thread`. Modules: `server` (the aiohttp app and
generation routes), `served` (the replica both servers share: model, driver, tokenizer,
metrics), `control` (the other routes), `streaming` (SSE answers), `http_io` (JSON bodies in,
dropped connections), `grpc_server` (SGLang's gRPC beside HTTP), `driver` (plays the model in
real time), `protocol` (request and response bodies, errors),
`metrics` (`sglang:*` families), `info` (/model_info, /server_info), `tokenizer` (the
deterministic tokenizer written for the SGLang gateway), `cli` (the command), `hicache` (SGLang
HiCache's flags), `disagg` and `bootstrap` (SGLang's prefill/decode roles: what each role does to
a request, its metrics, the prefill's bootstrap server where a decode collects a room's KV).
"""

from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.server import Emulator

__all__ = ["Emulator", "EmulatorConfig"]
