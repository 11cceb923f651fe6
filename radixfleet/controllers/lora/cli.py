"""`radixfleet lora run`: the LoRA controller alone, as every controller can run."""

from __future__ import annotations

import typer

from radixfleet.kit.commands import add_run

lora_app = typer.Typer(
    name="lora",
    help="The LoRA adapters each replica keeps, by demand (radixfleet/controllers/lora).",
    no_args_is_help=True,
)

add_run(
    lora_app, "radixfleet.controllers.lora.plugin:PLUGIN",
    help="Run the LoRA controller against the current cluster until interrupted.",
)  # fmt: skip
