"""Bounds on the shape of any YAML radixfleet reads from a user, checked before it is built.

Size is bounded by `radixfleet.config.load.read_bounded`; this module bounds the two shapes a
small file can still use to hurt its reader:

- **Depth.** libyaml's composer recurses in C once per level of nesting: 50,000 `[` crash the
  process (a segfault, no error); PyYAML's own composer raises `RecursionError`. The deepest
  file radixfleet reads for real is KServe's InferenceService CRD, 34 levels, so 100 is far
  above anything real.
- **Aliases.** An anchor used by aliases that are themselves anchored grows exponentially: 354
  bytes expand to 387 million strings ("billion laughs"). The loaders share an aliased value
  rather than copy it, but everything after them walks it: a validator printing one field of a
  bomb wrote 80 MB. Counted here is every node as it would be expanded, and a document may
  hold at most ten times the nodes it writes (or 100,000, whichever is more): a catalog's
  `<<: *defaults` per model stays well inside that.

The check walks libyaml's event stream, which keeps its stacks on the heap: it cannot itself
recurse, and it costs about a fifth of what building the objects costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

MAX_DEPTH = 100
MAX_EXPANSION_RATIO = 10
MIN_EXPANDED_NODES = 100_000

_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPENS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSES = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


class YamlBoundsError(yaml.YAMLError):
    """The text nests or expands past radixfleet's bounds; `line` is where it first did."""

    def __init__(self, message: str, *, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.reason = message


def check_bounds(text: str) -> None:
    """Raise `YamlBoundsError` if `text` nests or expands too far; a syntax error is left to
    the loader that follows, which locates it."""
    counter = _Counter()
    try:
        for event in yaml.parse(text, Loader=_Parser):
            counter.see(event)
    except YamlBoundsError:
        raise
    except yaml.YAMLError:
        return


@dataclass
class _Counter:
    written: int = 0
    expanded: int = 0
    open_anchors: list[tuple[str | None, int]] = field(default_factory=list)  # anchor, start
    sizes: dict[str, int] = field(default_factory=dict)  # anchor -> expanded nodes under it

    def see(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.DocumentStartEvent):
            self.sizes.clear()  # anchors are per document
        elif isinstance(event, yaml.AliasEvent):
            self._grow(event, by=self.sizes.get(event.anchor or "", 1))
        elif isinstance(event, yaml.ScalarEvent):
            self.written += 1
            self._grow(event, by=1)
            if event.anchor:
                self.sizes[event.anchor] = 1
        elif isinstance(event, _OPENS):
            self._open(event)
        elif isinstance(event, _CLOSES):
            anchor, start = self.open_anchors.pop()
            if anchor:
                self.sizes[anchor] = self.expanded - start

    def _open(self, event: yaml.CollectionStartEvent) -> None:
        if len(self.open_anchors) >= MAX_DEPTH:
            raise YamlBoundsError(f"nested deeper than {MAX_DEPTH} levels", line=_line(event))
        self.written += 1
        self._grow(event, by=1)
        self.open_anchors.append((event.anchor, self.expanded - 1))

    def _grow(self, event: yaml.Event, *, by: int) -> None:
        self.expanded += by
        limit = max(MIN_EXPANDED_NODES, MAX_EXPANSION_RATIO * self.written)
        if self.expanded > limit:
            message = (
                f"aliases expand it past {limit:,} nodes ({self.written:,} written): "
                "an alias bomb, or a file to write without anchors"
            )
            raise YamlBoundsError(message, line=_line(event))


def _line(event: yaml.Event) -> int:
    mark = event.start_mark
    return mark.line + 1 if mark is not None else 0
