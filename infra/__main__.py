"""Entry point `pulumi up` runs: read the stack config, wire the components, export."""

from infra.program import main

main()
