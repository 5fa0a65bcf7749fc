"""One files-domain task (save the meeting minutes: one write_file call) for the stage tests
that replay or play steps by hand (not part of the package)."""

from __future__ import annotations

from trajsynth.core import GroundTruth, Message
from trajsynth.core.prompts import system_prompt
from trajsynth.core.task import GoldCall, GoldTurn
from trajsynth.envs import EnvFactory

FACTORY = EnvFactory()
TOOLS = FACTORY.toolset("files").to_openai()
GOAL = "Save the meeting minutes to /home/user/docs/minutes.txt."
WRITE = {"path": "/home/user/docs/minutes.txt", "content": "Minutes"}
GOLD = GroundTruth(
    turns=[GoldTurn(request=GOAL, steps=[[GoldCall(name="write_file", arguments=WRITE)]])]
)
OPENING = [Message(role="system", content=system_prompt()), Message(role="user", content=GOAL)]
