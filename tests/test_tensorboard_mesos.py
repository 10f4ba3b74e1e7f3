"""TensorBoard on the Mesos backend, against the master emulator: a real TensorBoard process
on an agent beside a job, reachable at the address in the job's record; and the framework
registers the daemon's status page as its ``webui_url``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import kill_leftovers
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import PY, start_emulator
from tests.test_mesos_faults import Project, spec
from tests.test_tensorboard_local import answers
from tfdeclare.core.enums import Role, TaskState

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    made = start_emulator(tmp_path, agents=1, agent_resources="cpus:4;mem:4096;ports:[31000-31099]")
    try:
        yield made
    finally:
        made.stop()


def test_tensorboard_on_an_agent_and_the_page_as_webui_url(tmp_path: Path, emulator: Emulator) -> None:
    project = Project(tmp_path / "project", emulator)
    project.settings = project.settings.with_page_url("http://tfdeclare.example:8470/")
    board = f"  tensorboard: {{logDir: {tmp_path}, command: [{PY}, -m, tensorboard.main], resources: {{cpus: 0.5, mem: 256}}}}\n"
    project.write("tb", spec("tb", {"worker": (1, "serve")}, extra=board))
    controller = project.controller()
    try:
        project.apply(controller)

        def board_running() -> bool:
            tasks = {t.key.role: t for t in project.record(controller, "tb").tasks}
            board = tasks.get(Role.TENSORBOARD)
            return board is not None and board.state is TaskState.RUNNING

        project.passes(controller, board_running, timeout=60)
        task = next(t for t in project.record(controller, "tb").tasks if t.key.role is Role.TENSORBOARD)
        url = f"http://{task.host}:{task.port}/"
        project.passes(controller, lambda: answers(url), timeout=120)
        subscribe = emulator.calls("SUBSCRIBE")[0]
        assert (
            subscribe["call"]["subscribe"]["framework_info"]["webui_url"] == "http://tfdeclare.example:8470/"
        )
        controller.delete(["tb"])
        project.passes(controller, lambda: controller.store.load("tb") is None, timeout=60)
        assert not answers(url)
    finally:
        controller.close()
        project.close()
        assert kill_leftovers(tmp_path) == [], "a task outlived its job"
