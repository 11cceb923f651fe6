"""The emulator's streamed answers (server-sent events): each sample's tokens as the replica
produces them, its finish, then the usage and [DONE], as SGLang's HTTP server streams them."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from radixfleet.emulator import answers
from radixfleet.emulator.answers import Sample
from radixfleet.emulator.driver import Ticket, each_change
from radixfleet.emulator.http_io import drop
from radixfleet.emulator.protocol import Job
from radixfleet.emulator.served import EmulatedReplica
from radixfleet.replica import Phase


async def stream(
    replica: EmulatedReplica, request: web.Request, jobs: list[Job], tickets: list[Ticket]
) -> web.StreamResponse:
    """Each sample's tokens as they come (chunks carry the sample's index), its end when it
    ends, and, once every sample has ended, the usage and [DONE]."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    if jobs[0].kind == "chat":
        for job in jobs:
            chunk = answers.stream_chunk(job, replica.tokenizer, start=0, end=0, role=True)
            await _send(response, chunk)
    sent = [0] * len(jobs)
    ended: dict[int, Sample] = {}
    async for i, done in each_change(tickets):
        job, ticket = jobs[i], tickets[i]
        if done and ticket.request.phase is not Phase.FINISHED:
            return drop(request)
        upto = min(replica.driver.generated(ticket), len(job.answer_ids))
        if upto > sent[i] or done:
            await _send_progress(replica, response, job, ticket, sent=sent[i], upto=upto)
            sent[i] = upto
        if done:
            ended[i] = await _send_end(replica, response, job, ticket)
    await _send_tail(response, [ended[i] for i in range(len(jobs))])
    return response


async def _send_progress(
    replica: EmulatedReplica,
    response: web.StreamResponse,
    job: Job,
    ticket: Ticket,
    *,
    sent: int,
    upto: int,
) -> None:
    if job.kind == "generate":
        outcome = replica.outcome(ticket)
        upto = len(job.answer_ids) if outcome.finished else upto
        await _send(response, answers.format_generate(job, outcome, replica.tokenizer, upto=upto))
        return
    if upto > sent:
        await _send(response, answers.stream_chunk(job, replica.tokenizer, start=sent, end=upto))


async def _send_end(
    replica: EmulatedReplica, response: web.StreamResponse, job: Job, ticket: Ticket
) -> Sample:
    """A sample's last chunk: its finish reason (OpenAI routes)."""
    sample = replica.finished(job, ticket)
    if job.kind != "generate":
        reason = answers.finish_reason(job, sample.outcome)
        end = len(job.answer_ids)
        chunk = answers.stream_chunk(job, replica.tokenizer, start=end, end=end, reason=reason)
        await _send(response, chunk)
    return sample


async def _send_tail(response: web.StreamResponse, samples: list[Sample]) -> None:
    first = samples[0].job
    if first.kind != "generate" and first.include_usage:
        await _send(response, answers.usage_chunk(samples))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()


async def _send(response: web.StreamResponse, chunk: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
