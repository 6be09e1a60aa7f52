"""In a sample pod, a process of the sandbox container (the model's uid, no capability, as its commands
run) cannot stop the tool server, read its memory or listen in its place: the sample goes on.

The sample is caught while its agent waits on its second model reply; the attack runs in the sandbox
container meanwhile; released, the agent's next tool call must still reach the server for the run to
succeed.
"""

from __future__ import annotations

import json

import pytest

from gdpval import contract
from support.attacks import server_attack
from support.netprobe import model_control
from support.polling import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_the_sandbox_container_cannot_stop_read_or_replace_the_tool_server(env):  # noqa: F811
    script = {"fake_script": [{"bash": "echo first"}, {"bash": "echo alive"}]}
    model_control(env.model_url, "hold", {"after": 1})
    try:
        name = env.submit("toolserver", selection={"limit": 1}, model={"extraBody": script})
        wait_until(lambda: model_control(env.model_url, "stats")["held"] >= 1, 300, "the sample's second model call")
        (pod,) = wait_until(lambda: env.pods_in(name, "Running"), 60, "the sample pod reported Running")
        attack = server_attack(contract.SANDBOX_HOST, contract.SANDBOX_PORT)
        done = env.kube.run("exec", pod["metadata"]["name"], "-c", "sandbox", "--", "python3", "-c", attack, timeout=60)
        seen = json.loads(done.stdout)
    finally:
        model_control(env.model_url, "release", {})
    assert seen == {"mem": "Permission denied", "server": contract.TOOLSERVER, "127.0.0.1": "Address already in use", "0.0.0.0": "Address already in use"}
    env.wait_condition(name, "Succeeded")
    assert env.kube.run_status(name)["samples"]["succeeded"] == 1, "the agent's next call reached the same tool server"
