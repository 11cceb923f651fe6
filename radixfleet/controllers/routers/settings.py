"""The routers' own setting: the smg image every serving revision's router runs.

`--router-image` (or RADIXFLEET_ROUTER_IMAGE, which the operator's Deployment sets) on
`radixfleet operator run`, where it may be absent (the routers are then left alone), and on
`radixfleet routers run`, which runs nothing else and so requires it.
"""

from __future__ import annotations

from dataclasses import replace

from radixfleet.kit.settings import Setting

ROUTER_IMAGE = Setting(
    "image", ("--router-image",), "smg image of revisions' routers.",
    envvar="RADIXFLEET_ROUTER_IMAGE",
)  # fmt: skip
SETTINGS = (ROUTER_IMAGE,)
ALONE = (replace(ROUTER_IMAGE, help="The smg image routers run.", required=True),)
