"""The manatee cluster kind's pure parts: node counts, roles read from the cluster state, the
processes the faults find, the options refused before anything starts."""

from __future__ import annotations

import re

import pytest

from clusters.kinds.manatee import ManateeCluster, role_in
from clusters.registry import cluster_kind, kind_options
from core.errors import BadInput

STATE = {"generation": 3, "primary": "n2", "sync": "n3", "async": ["n1", "n4"], "init_wal": 7}


def test_peers_and_three_zookeeper_servers() -> None:
    assert cluster_kind("manatee") is ManateeCluster
    assert ManateeCluster.nodes_needed(ManateeCluster.checked_options({})) == 6
    assert ManateeCluster.nodes_needed(ManateeCluster.checked_options({"peers": 5})) == 8
    with pytest.raises(BadInput, match="--peers must be 3 or more"):
        ManateeCluster.checked_options({"peers": 2})


def test_roles_come_from_the_cluster_state() -> None:
    assert [role_in(STATE, n) for n in ("n1", "n2", "n3", "n4", "n5")] == [
        "async 1", "primary", "sync", "async 2", "none",
    ]  # fmt: skip
    assert role_in({}, "n1") == "none"


def test_the_kind_own_options_only() -> None:
    assert kind_options("manatee", {"peers": 4, "on_session_loss": "stop"}) == {
        "peers": 4,
        "on_session_loss": "stop",
    }
    with pytest.raises(BadInput, match="--on-session-loss applies to --cluster manatee only"):
        kind_options("safekeeper", {"on_session_loss": "stop"})


def test_process_patterns_find_the_daemons_and_not_their_shells() -> None:
    patterns = {p.name: re.compile(p.pattern) for p in ManateeCluster.runs}
    sitter = "python3 -u -m manatee.sitter --zookeeper n4:2181 --cluster harness --name n1"
    assert patterns["sitter"].search(sitter)
    assert not patterns["sitter"].search("pgrep -f manatee[.]sitter")
    java = "java -Xmx256m -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum."
    assert patterns["zookeeper"].search(java + "QuorumPeerMain /var/lib/harness/zookeeper/zoo.cfg")
    assert patterns["postgres"].search("/usr/lib/postgresql/15/bin/postgres -D /var/lib/x")
