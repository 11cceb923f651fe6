"""The dashboards' stable uids: alerts and links point at them, so they never change."""

FLEET_UID = "radixfleet-fleet"
MODEL_UID = "radixfleet-model"
TENANT_UID = "radixfleet-tenant"
REGIONS_UID = "radixfleet-regions"
CANARY_UID = "radixfleet-canary"
