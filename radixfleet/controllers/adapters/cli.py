"""`radixfleet adapters run`: the adapters controller alone, as every controller can run."""

from __future__ import annotations

import typer

from radixfleet.kit.commands import add_run

adapters_app = typer.Typer(
    name="adapters",
    help="The LoRA adapters each replica keeps, by demand (radixfleet/controllers/adapters).",
    no_args_is_help=True,
)

add_run(
    adapters_app, "radixfleet.controllers.adapters.plugin:PLUGIN",
    help="Run the adapters controller against the current cluster until interrupted.",
)  # fmt: skip
