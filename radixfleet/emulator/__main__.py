"""`python -m radixfleet.emulator ...`: the `radixfleet emulate` command on its own."""

import typer

from radixfleet.emulator.cli import emulate

if __name__ == "__main__":
    typer.run(emulate)
