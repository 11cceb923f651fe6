"""A LoRA model of the local fleet is one tenant's base, as the catalog renders one per tenant;
and the adapter policy's bounds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from radixfleet.localfleet.spec import LoraAdapterSpec, ModelSpec

OWN = LoraAdapterSpec(name="support-tone", tenant="support")


@pytest.mark.parametrize(
    ("tenants", "adapters", "match"),
    [([], [OWN], "exactly one tenant"),
     (["support", "search"], [OWN], "exactly one tenant"),
     (["support"], [LoraAdapterSpec(name="search-rerank", tenant="search")], "another tenant"),
     (["support"], [OWN, OWN], "twice")],
    ids=["every-tenants", "two-tenants-share-a-base", "anothers-adapter", "an-adapter-twice"],
)  # fmt: skip
def test_a_lora_model_is_one_tenants_base_with_its_own_or_shared_adapters(
    tenants: list[str], adapters: list[LoraAdapterSpec], match: str
) -> None:
    with pytest.raises(ValidationError, match=match):
        ModelSpec(name="lora", tenants=tenants, lora_adapters=adapters)


@pytest.mark.parametrize("name", ["", "a b", "../x", "x" * 129], ids=repr)
def test_an_adapter_name_sglang_could_not_take_is_refused(name: str) -> None:
    with pytest.raises(ValidationError):
        LoraAdapterSpec(name=name)


def test_a_shared_adapter_sits_on_any_tenants_base() -> None:
    model = ModelSpec(name="lora", tenants=["search"], lora_adapters=[LoraAdapterSpec(name="g")])
    assert model.tenant == "search"
