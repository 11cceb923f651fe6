"""The fleet twin: the shared replica model and the controllers' decisions, in virtual time.

A scenario (:mod:`~radixfleet.twin.scenario`, loaded by :mod:`~radixfleet.twin.load`) names the
regions, GPU pools, models, tenants and their traffic, the faults on its timeline and the policy
sets to compare. :mod:`~radixfleet.twin.epochs` plays it epoch by epoch across worker processes,
each region (:mod:`~radixfleet.twin.region`) driving :class:`radixfleet.replica.ReplicaModel`
instances from one event heap; the policies implement the protocols of
:mod:`~radixfleet.twin.interfaces`. :mod:`~radixfleet.twin.results` scores the runs against each
baseline and the oracles, :mod:`~radixfleet.twin.run` writes results.json, and
:mod:`~radixfleet.twin.cli` is `radixfleet twin run` and `radixfleet bench`.
"""

from radixfleet.twin.load import load_scenario, parse_scenario
from radixfleet.twin.run import Outcome, run_scenario, write_outcome
from radixfleet.twin.scenario import Scenario

__all__ = [
    "Outcome",
    "Scenario",
    "load_scenario",
    "parse_scenario",
    "run_scenario",
    "write_outcome",
]
